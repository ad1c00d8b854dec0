"""Review fixes: a group's actions keep the page's filters, a bulk job does what its
confirmation said, the follow and confirm pages say when they cover only part of a job."""

from __future__ import annotations

import re

import pytest
from webtest import TestApp

import ztq.core as ztq
from tests import sample_tasks as t
from tests.console import test_browser
from tests.console.test_actions import failed, follow_bulk
from ztq.core.engine.record import decode_payload
from ztq.core.engine.storage import Storage

browser = test_browser.browser  # the headless Chromium fixtures
server = test_browser.server

SHARED_TB = """Traceback (most recent call last):
  File "/srv/app/tests/helpers.py", line 12, in check
    raise OSError(message)
OSError: disk is full
"""


def fail_in_one_frame(store: Storage) -> None:
    """Every ready task of ``default`` fails with the same error in the same top frame."""
    for lease in store.leases.fetch("default", "w1", "default-0", 60_000, 100):
        task = decode_payload(lease.payload)["task"]
        store.leases.fail(
            "default", "w1", lease.id, lease.token, task, "OSError: disk is full", SHARED_TB
        )


def links(page: str, start: str) -> list[str]:
    return [u.replace("&amp;", "&") for u in re.findall(rf'href="({re.escape(start)}[^"]*)"', page)]


def test_group_actions_keep_the_task_and_text_filters(operator: TestApp, store: Storage) -> None:
    booms = [t.boom.delay(f"b{i}").id for i in range(1)]
    noops = [t.noop.delay(f"n{i}").id for i in range(1)]
    fail_in_one_frame(store)
    whole = operator.get("/errors/groups").text
    assert "Show these 2 errors" in whole  # one group, both task names
    page = operator.get("/errors/groups?task=boom&q=disk").text
    [show] = [u for u in links(page, "/errors?") if "group=" in u]
    assert "task=boom" in show and "q=disk" in show
    assert all(i in operator.get(show).text for i in booms)
    assert not any(i in operator.get(show).text for i in noops)
    [redo] = links(page, "/bulk/confirm?action=redo")
    [delete] = links(page, "/bulk/confirm?action=delete")
    assert "task=boom" in delete and "text=disk" in delete
    confirm = operator.get(redo)
    assert "Redo 1 failed tasks?" in confirm.text
    follow_bulk(operator, confirm.forms["confirm"].submit())
    assert [ztq.ping(i) for i in booms] == ["queued"]
    assert [ztq.ping(i) for i in noops] == ["error"]


def test_a_bulk_delete_does_what_its_confirmation_said(operator: TestApp, store: Storage) -> None:
    first = failed(store, 2, "early")
    confirm = operator.get("/bulk/confirm?action=delete&source=errors&next=/errors")
    assert "Delete 2 failed tasks?" in confirm.text
    later = failed(store, 3, "late")  # fail between the confirmation and its submit
    last = follow_bulk(operator, confirm.forms["confirm"].submit())[1]
    assert "Deleted 2 tasks." in last.follow().text
    assert [ztq.ping(i) for i in first] == ["none", "none"]
    assert [ztq.ping(i) for i in later] == ["error"] * 3


@pytest.mark.browser
def test_live_refresh_keeps_a_changed_choice_and_an_opened_traceback(
    store: Storage, server: str, browser: object
) -> None:
    from tests.console.test_browser import wait_for
    from tests.console.test_refresh_browser import fast_refresh, open_console

    failed(store, 1, "first")
    page = open_console(browser, server)
    page.route(re.compile(r".*/errors/groups(\?.*)?$"), fast_refresh)
    page.goto(server + "/errors/groups")
    note, sub = page.locator("#live-note"), page.locator("main .page-head .sub")
    wait_for(lambda: re.fullmatch(r"updated \d+ s ago", note.inner_text()), timeout=5)

    # a traceback opened: not folded away by the next refresh
    page.click("main details.trace summary")
    page.locator("h1").click()  # focus back on <main>: only the open traceback holds it
    failed(store, 1, "second")
    page.wait_for_timeout(1500)
    assert page.locator("main details.trace[open]").count() == 1
    assert note.inner_text() == "paused while you type or select"
    page.evaluate("document.querySelector('main details.trace').open = false")
    wait_for(lambda: "2 errors by" in sub.inner_text(), timeout=5)  # closed: it refreshes

    # a queue chosen and not yet filtered: kept
    page.select_option("main select[name=queue]", "default")
    page.locator("h1").click()
    failed(store, 1, "third")
    page.wait_for_timeout(1500)
    assert page.input_value("main select[name=queue]") == "default"
    assert "2 errors by" in sub.inner_text()
    page.select_option("main select[name=queue]", "")
    page.locator("h1").click()
    wait_for(lambda: "3 errors by" in sub.inner_text(), timeout=5)
    assert not page.problems, page.problems
    page.context.close()


def test_follow_and_confirm_say_when_they_cover_part_of_a_job(
    operator: TestApp, store: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ztq.core.engine.parts import errors as error_part

    monkeypatch.setattr(error_part, "TRASH_BATCH_MAX", 2)
    failed(store, 3)
    confirm = operator.get("/bulk/confirm?action=delete&source=errors&next=/errors")
    assert (
        "2 of them go to the trash and can be restored for 1h 00m; 1 cannot be kept and would be "
        "deleted for good" in confirm.text
    )
    confirm = operator.get("/bulk/confirm?action=redo&source=errors&next=/errors")
    last = follow_bulk(operator, confirm.forms["confirm"].submit())[1]
    follow = last.follow().text
    assert "Redid 3 tasks." in follow
    assert "3 tasks put back" in follow and "tasks put back 0" not in follow


@pytest.mark.slow
def test_search_pages_show_every_match_once(operator: TestApp, store: Storage) -> None:
    ids = {t.noop.delay(i).id for i in range(2600)}
    url, seen, pages = "/search?state=queued&limit=500", [], 0
    while url:
        page = operator.get(url).text
        shown = re.findall(r'class="mono tid" href="/tasks/([^"?]+)\?', page)
        seen += shown
        m = re.search(r'rel="next" href="([^"]+)"', page)
        url = m.group(1).replace("&amp;", "&").split("#")[0] if m else ""
        pages += 1
        assert pages < 20
    assert len(seen) == len(set(seen)) and set(seen) == ids
