"""A batch's members spread over two worker processes, one SIGKILLed mid-batch: the batch
still completes and its on_complete runs exactly once; what a dead worker left unrelayed is
relayed by another worker's sweep (docs/batches.md)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from tests.worker.conftest import wait_for, worker_processes
from ztq.core.client.batch import callback_id, relay
from ztq.core.engine.storage import Finished


@pytest.mark.slow
def test_on_complete_once_when_a_worker_dies_mid_batch(redis_url: str, tmp_path: Path) -> None:
    storage = ztq.get_storage()
    marker = str(tmp_path / "ran")
    key = "test:completed"
    with worker_processes(redis_url, tmp_path, 2, "default:2") as procs:
        wait_for(lambda: len(storage.client.hkeys(storage.keys.workers)) == 2, timeout=20)
        on_complete = t.count_in_redis.prepare((key,), queue="default")
        on_success = t.count_in_redis.prepare((key + ":ok",), queue="default")
        with ztq.batch(on_complete=on_complete, on_success=on_success) as b:
            members = [t.sleepy.delay(0.4, f"{marker}{i}") for i in range(16)]  # distinct
            t.boom.delay("member fails")  # one member ends in the error list
        # both processes run members, then one dies with leases in hand (the victim has
        # started a member, which sleeps 0.4 s)
        wait_for(lambda: len(_pids(marker)) >= 2 and str(procs[0].pid) in _pids(marker),
                 timeout=20)  # fmt: skip
        os.kill(procs[0].pid, signal.SIGKILL)
        status = b.wait(timeout=60)
        assert (status.total, status.done, status.failed) == (17, 16, 1)
        done = ztq.TaskHandle(callback_id(b.id, "complete"), "default")
        wait_for(done.record, timeout=10)  # the relay that completed it enqueues it next
        done.get(timeout=30)
        relay(storage, ["default"])  # a replay of everything left: nothing fires again
        assert storage.client.get(key) == "1"
        assert storage.client.get(key + ":ok") is None  # one member failed: no success
        assert storage.client.llen(storage.keys.batch_send) == 0
        # the victim died with a member in hand: it was reaped and ran again
        lost = [h for h in members if (h.record() or {}).get("lost")]
        assert lost, "the killed worker held no member: nothing was tested"


def _pids(marker: str) -> set[str]:
    pids: set[str] = set()
    for path in Path(marker).parent.glob(Path(marker).name + "*"):
        pids |= set(path.read_text().split())
    return pids


def test_the_sweep_relays_what_a_killed_worker_left(start_worker: Any) -> None:
    """A worker acked the last member and died before relaying: the entry waits in the
    queue's outbox until any worker's tick relays it, and on_complete runs once."""
    storage = ztq.get_storage()
    key = "test:swept"
    with ztq.batch(on_complete=t.count_in_redis.prepare((key,), queue="default")) as b:
        t.add.delay(1, 2)
    [lease] = storage.leases.fetch("default", "dead-worker", "t0", 30_000, 1)
    storage.leases.ack("default", "dead-worker", [Finished(lease.id, lease.token, t.add.name, "3")])
    assert storage.client.llen(storage.keys.batch_out("default")) == 1  # not relayed
    assert b.status().state == "open"
    start_worker({"default": 1})  # another worker: its tick sweeps the outboxes
    assert storage.batches.wait_batch(b.id, "complete", 20)
    done = ztq.TaskHandle(callback_id(b.id, "complete"), "default")
    wait_for(done.record, timeout=10)
    assert done.get(timeout=10) == 1
    relay(storage, ["default"])
    assert storage.client.get(key) == "1"
