"""Undo of a delete (issue 30): deleted errors go to a trash that Redis expires after the
window (TTL), bounded in size, restorable whole or one by one, audited."""

from __future__ import annotations

import time

import pytest
from webtest import TestApp

import ztq.core as ztq
from tests import sample_tasks as t
from tests.console import scenario
from tests.console.conftest import post
from tests.console.test_actions import audit_log, failed
from ztq.core.engine.parts import errors as error_part
from ztq.core.engine.storage import Storage


def delete(app: TestApp, ids: list[str]) -> TestApp:
    """Delete errors of default by selection, through the confirmation; the trash page."""
    r = post(
        app, "/errors/selected", [("action", "delete"), *(("task", f"default:{i}") for i in ids)]
    )
    done = r.forms["confirm"].submit()
    assert done.status_int == 303 and "/trash?batch=" in done.location
    return done.follow()


def batch_of(page: TestApp) -> str:
    return str(page.request.params["batch"])


@pytest.mark.slow
def test_deleted_errors_can_be_restored_whole_or_one_by_one(
    operator: TestApp, store: Storage
) -> None:
    ids = failed(store, 4, "disk full")
    page = delete(operator, ids[:3])
    assert "Delete: 3 of 3 tasks." in page.text and "4 tasks of default" not in page.text
    assert "3 tasks of default" in page.text and all(i in page.text for i in ids[:3])
    assert [ztq.ping(i) for i in ids] == ["none", "none", "none", "error"]
    batch = batch_of(page)
    # one: from the page that confirmed the delete
    form = next(f for f in page.forms.values() if f.get("id", default=None) is not None
                and f["id"].value == ids[1])  # fmt: skip
    r = form.submit().follow()
    assert "Restored 1 task." in r.text and "2 tasks of default" in r.text
    assert ztq.ping(ids[1]) == "error"
    rec = store.tasks.record("default", ids[1])
    assert rec is not None and rec.get("error") == "ValueError: disk full 1"
    # the rest: from the Trash view, with the failed-at time they had
    trash = operator.get("/trash")
    assert batch in trash.text
    before = store.client.zscore(store.keys.errors("default"), ids[3])
    r = next(f for f in trash.forms.values() if "Restore all" in f.text).submit()
    # back to the delete it came from, not to every delete
    assert r.location.endswith(f"/trash?batch={batch}&queue=default")
    r = r.follow()
    assert "Restored 2 tasks." in r.text and "Nothing of this delete is left" in r.text
    assert "The trash is empty." in operator.get("/trash").text
    assert all(ztq.ping(i) == "error" for i in ids)
    assert store.client.zscore(store.keys.errors("default"), ids[3]) == before
    assert [e["action"] for e in audit_log(store)][:3] == ["restore", "restore", "delete"]


def test_the_trash_window_is_a_redis_ttl(operator: TestApp, store: Storage) -> None:
    ids = failed(store, 2)
    batch = batch_of(delete(operator, ids))
    k = store.keys
    for key in (k.trash("default", batch), k.trash_index("default")):
        ttl = store.client.pttl(key)
        assert error_part.TRASH_WINDOW_MS - 60_000 < ttl <= error_part.TRASH_WINDOW_MS, key
    assert "restorable for 59m" in operator.get("/trash").text
    # the window runs out: Redis drops the batch, nothing is left to restore
    store.client.pexpire(k.trash("default", batch), 1)
    deadline = time.monotonic() + 5
    while store.client.exists(k.trash("default", batch)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "The trash is empty." in operator.get("/trash").text
    r = post(operator, "/trash/restore", {"queue": "default", "batch": batch}).follow()
    assert "Restored 0 tasks." in r.text
    assert all(ztq.ping(i) == "none" for i in ids)


def test_the_trash_is_bounded(
    operator: TestApp, store: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(error_part, "TRASH_BATCH_MAX", 2)
    monkeypatch.setattr(error_part, "TRASH_BATCHES", 2)
    ids = failed(store, 6)
    first = batch_of(delete(operator, ids[:3]))  # 3 deleted, 2 kept
    assert store.client.hlen(store.keys.trash("default", first)) == 2
    delete(operator, ids[3:4])
    delete(operator, ids[4:5])  # a third delete: the oldest one is dropped
    assert not store.client.exists(store.keys.trash("default", first))
    assert store.client.zcard(store.keys.trash_index("default")) == 2
    assert all(ztq.ping(i) == "none" for i in ids[:5])


@pytest.mark.slow
def test_a_restore_leaves_an_id_that_came_back(operator: TestApp, store: Storage) -> None:
    [tid] = failed(store, 1, "again")
    batch = batch_of(delete(operator, [tid]))
    t.boom.prepare(("again 0",)).enqueue()  # the same task, enqueued anew: the same id
    assert ztq.ping(tid) == "queued"
    r = post(operator, "/trash/restore", {"queue": "default", "batch": batch}).follow()
    assert "1 has a task with the same id again" in r.text
    assert ztq.ping(tid) == "queued"
    scenario.work(store)


@pytest.mark.slow
def test_restore_needs_an_operator_a_token_and_a_real_batch(
    operator: TestApp, viewer: TestApp, store: Storage
) -> None:
    ids = failed(store, 1)
    batch = batch_of(delete(operator, ids))
    assert "Restore all" not in viewer.get("/trash").text and batch in viewer.get("/trash").text
    data = {"queue": "default", "batch": batch}
    assert post(viewer, "/trash/restore", data, expect_errors=True).status_int == 403
    assert operator.post("/trash/restore", data, expect_errors=True).status_int == 400
    bad = {"queue": "default", "batch": "../x"}
    assert post(operator, "/trash/restore", bad, expect_errors=True).status_int == 404
    assert operator.get("/trash?batch=zz", expect_errors=True).status_int == 404
    assert ztq.ping(ids[0]) == "none"
