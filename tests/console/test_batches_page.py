"""The console's Batches page (WebTest): the list, one batch with its members' states and a
progress bar, the redo of its failed members, 404s; in English and in Chinese."""

from __future__ import annotations

from typing import Any

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from tests.console.conftest import post
from ztq.core.client.batch import relay
from ztq.core.engine.storage import Finished, Storage

W = "w-console"


def finish(storage: Storage, fail: set[str]) -> None:
    for lease in storage.leases.fetch("default", W, "t", 30_000, 100):
        if lease.id in fail:
            storage.leases.fail("default", W, lease.id, lease.token, "x", "ValueError: no", "")
        else:
            storage.leases.ack("default", W, [Finished(lease.id, lease.token, "x", "")])
    relay(storage, ["default"])


@pytest.mark.slow
def test_list_batch_and_redo(operator: Any, viewer: Any, store: Storage) -> None:
    with ztq.batch(description="thumbnails <b>", on_success=t.noop.prepare(("ok",))) as b:
        hs = [t.add.delay(i, 2) for i in range(3)]
    finish(store, {hs[0].id})
    page = operator.get("/batches")
    assert b.id in page.text and "thumbnails &lt;b&gt;" in page.text and "67%" not in page.text
    assert 'value="100"' in page.text  # every member ended: the bar is full
    one = operator.get(f"/batches/{b.id}")
    assert "2 done, 1 failed, 0 running, 0 pending of 3" in one.text
    assert all(h.id in one.text for h in hs) and "Redo failed members" in one.text
    assert "Redo failed members" not in viewer.get(f"/batches/{b.id}").text  # read-only
    r = post(operator, "/batches/redo", {"batch": b.id, "next": f"/batches/{b.id}"})
    assert r.status_int == 303 and "1 failed members back to run" in r.follow().text
    finish(store, set())
    assert b.status().state == "success"
    assert "success" in operator.get(f"/batches/{b.id}").text


@pytest.mark.slow
def test_unknown_batch_is_404(operator: Any, store: Storage) -> None:
    r = operator.get("/batches/nope", expect_errors=True)
    assert r.status_int == 404 and "No batch nope" in r.text
    r = post(operator, "/batches/redo", {"batch": "nope"}, expect_errors=True)
    assert r.status_int == 404
    assert "No batch yet" in operator.get("/batches").text


@pytest.mark.slow
def test_in_chinese(operator: Any, store: Storage) -> None:
    with ztq.batch(description="缩略图") as b:
        t.add.delay(1, 1)
    page = operator.get(f"/batches/{b.id}", headers={"Accept-Language": "zh"})
    assert "批次" in page.text and "成员" in page.text and "缩略图" in page.text
