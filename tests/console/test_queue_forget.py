"""Forget a queue from its page (issue 39, point 2): an operator's POST, CSRF-protected and
audited, removes a queue that holds nothing and no worker serves; a queue that holds a task
or is served is refused with the reason in a flash message; a viewer has no such button."""

from __future__ import annotations

from webtest import TestApp

from tests import sample_tasks as t
from tests.console import scenario
from tests.console.conftest import post
from ztq.core.engine.parts.leases import Finished
from ztq.core.engine.storage import Storage


def test_an_idle_queue_is_forgotten_from_its_page_and_a_busy_one_is_refused(
    operator: TestApp, viewer: TestApp, store: Storage
) -> None:
    t.add.prepare((1, 2)).with_options(queue="abc").enqueue()
    page = operator.get("/queues/abc")
    assert "Forget this queue" not in page.text  # it holds a task: no button
    got = post(operator, "/queues/abc/state", {"action": "forget"}).maybe_follow()
    assert "abc is not forgotten: abc holds 1 ready tasks (normal)." in got.text
    [lease] = store.leases.fetch("abc", "w1", "x", 60_000)
    assert store.leases.ack("abc", "w1", [Finished(lease.id, lease.token, "add", "3")]) == []
    scenario.heartbeat(store, "w1", threads={"abc": 1})
    got = post(operator, "/queues/abc/state", {"action": "forget"}).maybe_follow()
    assert "abc is not forgotten: 1 live worker thread(s) serve abc" in got.text
    scenario.heartbeat(store, "w1", status="stopped", threads={"abc": 1})
    assert "Forget this queue" not in viewer.get("/queues/abc").text
    post(viewer, "/queues/abc/state", {"action": "forget"}, status=403)
    operator.post("/queues/abc/state", {"action": "forget"}, status=400)  # no CSRF token
    assert "abc" in store.queues.names()
    page = operator.get("/queues/abc")
    form = next(f for f in page.forms.values() if 'value="forget"' in f.text)
    got = form.submit("action", value="forget").maybe_follow()
    assert "Forgot queue abc." in got.text and got.request.path == "/queues"
    assert "abc" not in store.queues.names()
    operator.get("/queues/abc", status=404)
    assert "forget queue" in operator.get("/audit").text
