"""Issue 30, points 4 and 5 in headless Chromium: a worker command shows as pending and turns
to done without a reload once the worker confirms it; live refresh never takes away a filter
being typed, says when it last updated or why it waits, and marks rows that came new.

The pages' refresh interval is cut to 1 s on the way to the browser (the HTML's data-live),
so that the tests wait seconds, not tens of them; the script itself is the shipped one."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests import sample_tasks as t
from tests.console import scenario, test_browser
from tests.console.conftest import browser_sign_in, switch_language
from ztq.core.engine.storage import Storage
from ztq.core.engine.workers import take_commands

pytestmark = pytest.mark.browser

browser = test_browser.browser  # the same headless Chromium fixture
server = test_browser.server
wait_for = test_browser.wait_for


def fast_refresh(route: Any) -> None:
    """The page as served, its live refresh every second instead of every 5 or 10."""
    if route.request.method != "GET":
        route.continue_()
        return
    response = route.fetch(max_redirects=0)
    body = re.sub(r'data-live="\d+"', 'data-live="1"', response.text())
    route.fulfill(response=response, body=body)


def open_console(browser: Any, url: str, lang: str = "en") -> Any:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.problems = problems
    browser_sign_in(page, url, lang)
    page.route(re.compile(r".*/(workers|history)(/[^?]*)?(\?(?!state).*)?$"), fast_refresh)
    return page


def no_reload_since(page: Any) -> bool:
    """The mark put on the window before is still there: the page was not loaded again."""
    return bool(page.evaluate("window.__ztqMark === 42"))


def test_pause_shows_pending_then_done_without_a_reload(
    store: Storage, server: str, browser: Any
) -> None:
    scenario.heartbeat(store, "w1", threads={"default": 1})
    page = open_console(browser, server)
    page.goto(server + "/workers/w1")
    page.uncheck("#live-toggle")  # no live refresh: what follows is the pending poll's
    page.click("button[value=pause]")
    pausing, paused = "pausing…", "paused"
    assert page.inner_text("h1 .badge.pending") == pausing  # from Redis: the command waits
    page.evaluate("window.__ztqMark = 42")
    page.wait_for_timeout(1200)  # the worker has not taken it: still pending, not redrawn
    assert page.inner_text("h1 .badge.pending") == pausing
    take_commands(store, "w1")  # the worker takes it ...
    page.wait_for_timeout(1200)
    assert page.inner_text("h1 .badge.pending") == pausing  # ... but has not reported yet
    scenario.heartbeat(store, "w1", status="paused", threads={"default": 1})  # ... now it has
    page.wait_for_selector("h1 .state-paused", timeout=10_000)
    assert page.locator("h1 .badge.pending").count() == 0
    assert page.inner_text("h1 .state-paused") == paused
    assert page.locator("button[value=resume]").count() == 1
    assert no_reload_since(page)

    # threads: "1 → 3…" until the worker reports 3, then 3
    page.fill("table.threads input[name=threads]", "3")
    page.click("table.threads button[value=set_threads]")
    assert "→ 3…" in page.inner_text("table.threads td.num")
    page.evaluate("window.__ztqMark = 42")
    take_commands(store, "w1")
    scenario.heartbeat(store, "w1", status="paused", threads={"default": 3})
    wait_for(lambda: page.inner_text("table.threads td.num").strip() == "3", timeout=10)
    assert no_reload_since(page)

    # in Chinese: Resume is "正在恢复…" until the worker reports running again
    switch_language(page, "zh")
    page.click("button[value=resume]")
    assert page.inner_text("h1 .badge.pending") == "正在恢复…"
    page.evaluate("window.__ztqMark = 42")
    take_commands(store, "w1")
    scenario.heartbeat(store, "w1", threads={"default": 3})
    page.wait_for_selector("h1 .state-running", timeout=10_000)
    assert page.inner_text("h1 .state-running") == "运行中" and no_reload_since(page)
    page.check("#live-toggle")  # kept in localStorage: on again
    assert not page.problems, page.problems
    page.context.close()


def test_live_refresh_keeps_a_typed_filter_and_says_so(
    store: Storage, server: str, browser: Any
) -> None:
    for i in range(3):
        t.add.delay(i, 1)
    scenario.work(store)
    page = open_console(browser, server)
    page.goto(server + "/history")
    note = page.locator("#live-note")
    wait_for(lambda: re.fullmatch(r"updated \d+ s ago", note.inner_text()), timeout=5)
    rows = page.locator("main table tbody tr").count()

    # typed, not submitted: the refresh waits and says why, focus or not
    page.fill("input[name=task]", "sample_tasks.ad")
    page.evaluate("window.__ztqMark = 42")
    t.add.delay(10, 1)
    scenario.work(store)  # a new row waits on the server
    page.wait_for_timeout(1500)
    assert note.inner_text() == "paused while you type or select"
    page.locator("h1").click()  # the field loses focus, the text stays typed
    page.wait_for_timeout(1500)
    assert page.input_value("input[name=task]") == "sample_tasks.ad"
    assert page.locator("main table tbody tr").count() == rows  # not redrawn under the reader
    assert note.inner_text() == "paused while you type or select"

    # the text gone, it refreshes; the row that came is marked, the note counts again
    page.fill("input[name=task]", "")
    page.locator("h1").click()
    wait_for(lambda: page.locator("main table tbody tr").count() == rows + 1, timeout=10)
    assert page.locator("main table tbody tr.fresh").count() == 1
    assert page.locator("main table tbody tr.moved").count() == 0  # pushed down, not moved
    assert re.fullmatch(r"updated \d+ s ago", note.inner_text())
    assert no_reload_since(page)

    # the switch: off, it says so and draws nothing
    page.uncheck("#live-toggle")
    assert note.inner_text() == "paused"
    t.add.delay(11, 1)
    scenario.work(store)
    page.wait_for_timeout(1500)
    assert page.locator("main table tbody tr").count() == rows + 1
    page.check("#live-toggle")

    # every list page has the switch and the note (the grouped errors too)
    scenario.populate(store)
    for path in ("/errors/groups", "/scheduled", "/queues"):  # all of them: test_live_state
        page.goto(server + path)
        assert page.locator("#live-toggle").is_visible(), path
        assert page.locator("#live-note").inner_text(), path
    assert not page.problems, page.problems
    page.context.close()
