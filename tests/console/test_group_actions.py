"""Acting on one error group (issue 30): its link shows exactly its errors, Redo and Delete
per group (and per group within a queue) state their scope first, run as bulk steps, are
audited, and a redo is followed to exactly the tasks it put back."""

from __future__ import annotations

import re
from typing import Any

import pytest
from webtest import TestApp

import ztq.core as ztq
from tests import sample_tasks as t
from tests.console import scenario
from tests.console.conftest import post
from tests.console.test_actions import audit_log, follow_bulk
from ztq.core.engine.storage import Storage
from ztq.core.monitor.groups import group_key

DOWN = ("SMTPServerDisconnected", "Connection unexpectedly closed")
REFUSED = ("SMTPRecipientsRefused", "550 mailbox unavailable")


def mail_incident(store: Storage) -> dict[str, list[str]]:
    """Two groups of one task name in ``mail`` (6 down, 3 refused), one group in default."""
    down = [t.send.delay(f"user{i}@example.org", "receipt").id for i in range(6)]
    refused = [t.send.delay(f"bad{i}@example.org", "receipt").id for i in range(3)]
    scenario.work(store, "mail", fail=lambda p: REFUSED if "bad" in p["args"][0] else DOWN)
    boom = [t.boom.delay(f"disk {i} is full").id for i in range(2)]
    scenario.work(store, fail=lambda p: p["args"][0])
    return {"down": down, "refused": refused, "boom": boom}


def run(app: TestApp, response: Any) -> Any:
    """Every step of a bulk job started by ``response``; the last answer."""
    return follow_bulk(app, response)[1]


def key_of(store: Storage, queue: str, task_id: str) -> str:
    rec = store.tasks.record(queue, task_id)
    assert rec is not None
    return group_key(rec)


def confirm_url(page: str, action: str, n: int = 0) -> str:
    links = re.findall(rf'href="(/bulk/confirm\?action={action}[^"]*)"', page)
    return links[n].replace("&amp;", "&")


@pytest.mark.slow
def test_a_group_link_shows_exactly_that_group(operator: TestApp, store: Storage) -> None:
    ids = mail_incident(store)
    key = key_of(store, "mail", ids["down"][0])
    page = operator.get("/errors/groups?queue=mail").text
    assert f"/errors?group={key}&amp;queue=mail" in page
    listing = operator.get(f"/errors?group={key}&queue=mail").text
    assert all(i in listing for i in ids["down"])
    assert not any(i in listing for i in ids["refused"])  # same task name, another group
    assert "550 mailbox" not in listing
    assert operator.get("/errors?group=nothex", expect_errors=True).status_int == 404


@pytest.mark.slow
def test_a_group_redo_states_its_scope_then_redoes_that_group_only(
    operator: TestApp, store: Storage
) -> None:
    ids = mail_incident(store)
    key = key_of(store, "mail", ids["down"][0])
    page = operator.get("/errors/groups?queue=mail").text
    url = confirm_url(page, "redo")
    assert f"group={key}" in url and "queue=mail" in url
    confirm = operator.get(url)
    text = confirm.text
    assert "Redo 6 failed tasks?" in text  # the count
    assert 'href="/queues/mail"' in text and key in text  # the queue and the group
    assert "SMTPServerDisconnected: Connection unexpectedly closed" in text
    assert all(ztq.ping(i) == "error" for i in ids["down"])  # nothing ran yet
    last = run(operator, confirm.forms["confirm"].submit())
    assert last.status_int == 303 and "/redo/" in last.location
    assert all(ztq.ping(i) == "queued" for i in ids["down"])
    assert all(ztq.ping(i) == "error" for i in ids["refused"] + ids["boom"])
    [entry] = [e for e in audit_log(store) if e["action"] == "bulk redo"]
    assert entry["count"] == "6" and f"group={key}" in entry["detail"]
    assert entry["queue"] == "mail"

    # follow-through: the page lists exactly those tasks; those that fail again are marked
    scenario.work(store, "mail", fail=lambda p: DOWN)
    follow = last.follow().text
    assert "Redid 6 tasks." in follow
    assert all(i in follow for i in ids["down"]) and ids["refused"][0] not in follow
    assert follow.count("failed again after redo") >= 6
    listing = operator.get("/errors?queue=mail").text
    assert listing.count("failed again after redo") == 6
    groups = operator.get("/errors/groups?queue=mail").text
    assert "6 failed again after redo" in groups


@pytest.mark.slow
def test_a_group_delete_goes_to_the_trash_and_is_audited(operator: TestApp, store: Storage) -> None:
    ids = mail_incident(store)
    key = key_of(store, "mail", ids["refused"][0])
    url = f"/bulk/confirm?action=delete&source=errors&group={key}&queue=mail&next=/errors"
    confirm = operator.get(url)
    assert "Delete 3 failed tasks?" in confirm.text
    assert "restore them for 1h" in confirm.text
    last = run(operator, confirm.forms["confirm"].submit())
    assert last.status_int == 303 and "/trash?batch=" in last.location
    assert all(ztq.ping(i) == "none" for i in ids["refused"])
    assert all(ztq.ping(i) == "error" for i in ids["down"])
    [entry] = [e for e in audit_log(store) if e["action"] == "bulk delete"]
    assert entry["count"] == "3" and f"group={key}" in entry["detail"]


@pytest.mark.slow
def test_a_filter_wide_action_states_the_filter_and_count(
    operator: TestApp, store: Storage
) -> None:
    mail_incident(store)
    page = operator.get("/errors?queue=mail&q=550").text
    assert 'action="/bulk/confirm"' in page and "data-confirm" not in page
    confirm = operator.get("/bulk/confirm?action=delete&source=errors&queue=mail&text=550")
    assert "Delete 3 failed tasks?" in confirm.text and "550" in confirm.text
    everything = operator.get("/bulk/confirm?action=redo&source=errors")
    assert "Redo 11 failed tasks?" in everything.text and "every queue" in everything.text
    purge = operator.get("/bulk/confirm?action=delete&source=ready&queue=mail")
    assert "cannot be undone" in purge.text


@pytest.mark.slow
def test_selected_rows_delete_states_its_scope_and_actions_sit_on_top(
    operator: TestApp, store: Storage
) -> None:
    ids = mail_incident(store)
    page = operator.get("/errors?queue=mail").text
    assert page.index("selected-actions") < page.index("<table")  # above the rows
    picked = [("task", f"mail:{i}") for i in ids["down"][:2]]
    r = post(operator, "/errors/selected", [("action", "delete"), *picked])
    assert r.status_int == 200 and "Delete 2 failed tasks?" in r.text
    assert all(i in r.text for i in ids["down"][:2])
    assert all(ztq.ping(i) == "error" for i in ids["down"])  # not before the confirmation
    done = r.forms["confirm"].submit()
    assert done.status_int == 303 and "/trash?batch=" in done.location
    assert [ztq.ping(i) for i in ids["down"][:3]] == ["none", "none", "error"]


@pytest.mark.slow
def test_group_actions_need_an_operator_and_a_csrf_token(
    operator: TestApp, viewer: TestApp, store: Storage
) -> None:
    ids = mail_incident(store)
    key = key_of(store, "mail", ids["down"][0])
    assert "Redo group" not in viewer.get("/errors/groups").text
    assert "Redo group" not in viewer.get("/").text
    url = f"/bulk/confirm?action=redo&source=errors&group={key}"
    assert viewer.get(url, expect_errors=True).status_int == 403
    r = post(viewer, "/bulk", {"action": "redo", "source": "errors", "group": key},
             expect_errors=True)  # fmt: skip
    assert r.status_int == 403
    r = post(viewer, "/errors/selected", {"action": "delete", "task": f"mail:{ids['down'][0]}",
             "confirmed": "1"}, expect_errors=True)  # fmt: skip
    assert r.status_int == 403
    form = operator.get(url).forms["confirm"]
    fields = [(k, v) for k, v in form.submit_fields() if k != "csrf_token"]
    assert operator.post("/bulk", fields, expect_errors=True).status_int == 400
    fields = [("action", "delete"), ("task", f"mail:{ids['down'][0]}"), ("confirmed", "1")]
    assert operator.post("/errors/selected", fields, expect_errors=True).status_int == 400
    assert all(ztq.ping(i) == "error" for i in ids["down"])
    r = post(operator, "/bulk", {"action": "redo", "source": "errors", "group": "x"}).follow()
    assert "Unknown command" in r.text


@pytest.mark.slow
def test_the_queue_page_bulk_buttons_confirm_their_scope_first(
    operator: TestApp, store: Storage
) -> None:
    """The queue page's Redo all / Delete all errors and Purge ready lead to the same
    confirmation page as the errors page (count and queue named; without JavaScript too),
    and nothing changes until it is confirmed."""
    ids = mail_incident(store)
    page = operator.get("/queues/mail")
    assert "data-confirm" not in page.text.split('id="selection"')[0]
    form = next(f for f in page.forms.values() if f.action == "/bulk/confirm"
                and f.fields.get("source", [None])[0].value == "errors")  # fmt: skip
    confirm = form.submit("action", value="delete")
    assert confirm.status_int == 200 and "Delete 9 failed tasks?" in confirm.text
    assert "mail" in confirm.text
    assert all(ztq.ping(i) == "error" for i in ids["down"] + ids["refused"])
    run(operator, confirm.forms["confirm"].submit())
    assert all(ztq.ping(i) == "none" for i in ids["down"] + ids["refused"])
    assert ztq.ping(ids["boom"][0]) == "error"  # another queue's errors stay
