"""A queue-wide running limit (``configure_queue(q, max_running=N)``): the fetch script takes
no more than the limit leaves free, across every worker, and the end of a run (ack, fail,
reap) wakes an idle worker when tasks wait. Worker processes: tests/worker/test_serial_queue.py;
every state move under a limit: the state-machine test."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from ztq.core.engine.storage import Finished, Storage
from ztq.core.errors import InvalidOption
from ztq.worker.config import load_config

Q = "xapian"


def fill(n: int) -> list[str]:
    return [t.serial_write.delay("/dev/null", i).id for i in range(n)]


def wake_tokens(storage: Storage) -> int:
    return int(storage.client.llen(storage.keys.wake(Q)))


@pytest.mark.slow
def test_a_fetch_takes_no_more_than_the_limit_leaves(storage: Storage) -> None:
    fill(6)
    ztq.configure_queue(Q, max_running=2)
    assert storage.queues.queue_config(Q) == {"max_running": 2}
    storage.client.delete(storage.keys.wake(Q))
    a = storage.leases.fetch(Q, "w1", "t", 60_000, 5)
    assert len(a) == 2  # asked for 5
    assert wake_tokens(storage) == 0  # no chain wake-up: the limit, not the batch, stopped it
    assert storage.leases.fetch(Q, "w2", "t", 60_000, 5) == []  # another worker: full
    storage.leases.ack(Q, "w1", [Finished(a[0].id, a[0].token, "x", "")])
    assert len(storage.leases.fetch(Q, "w2", "t", 60_000, 5)) == 1
    ztq.configure_queue(Q, max_running=None)  # lifted: the rest at once
    assert storage.queues.queue_config(Q) == {}
    assert len(storage.leases.fetch(Q, "w2", "t", 60_000, 5)) == 3


@pytest.mark.parametrize("end", ["ack", "fail", "reap"])
def test_the_end_of_a_run_wakes_an_idle_worker_when_tasks_wait(storage: Storage, end: str) -> None:
    fill(3)
    ztq.configure_queue(Q, max_running=1)
    [lease] = storage.leases.fetch(Q, "w1", "t", 1 if end == "reap" else 60_000, 3)
    assert (
        storage.leases.fetch(Q, "w2", "t", 60_000, 3) == []
    )  # full: w2 goes to sleep on the wake list
    storage.client.delete(storage.keys.wake(Q))
    if end == "ack":
        storage.leases.ack(Q, "w1", [Finished(lease.id, lease.token, "x", "")])
    elif end == "fail":
        storage.leases.fail(Q, "w1", lease.id, lease.token, "x", "E: e", "", retry_delay_ms=-1)
    else:
        time.sleep(0.005)  # the 1 ms lease is over
        # lost once is a poison pill here: the task goes to the errors, nothing back in ready
        assert [outcome for _, _, outcome in storage.leases.reap(Q, max_lost=1).items] == ["error"]
    assert wake_tokens(storage) == 1
    assert len(storage.leases.fetch(Q, "w2", "t", 60_000, 3)) == 1


def test_no_wake_up_without_a_limit_or_without_waiting_tasks(storage: Storage) -> None:
    fill(1)
    [lease] = storage.leases.fetch(Q, "w1", "t", 60_000, 1)
    storage.client.delete(storage.keys.wake(Q))
    storage.leases.ack(Q, "w1", [Finished(lease.id, lease.token, "x", "")])
    assert wake_tokens(storage) == 0  # no limit: fetch never left anyone waiting
    ztq.configure_queue(Q, max_running=1)
    t.serial_write.enqueue(("/dev/null", 99), delay=3600)  # waiting, but not ready
    task_id = t.serial_write.delay("/dev/null", 50).id
    [lease] = storage.leases.fetch(Q, "w1", "t", 60_000, 1)
    storage.client.delete(storage.keys.wake(Q))
    storage.leases.ack(Q, "w1", [Finished(lease.id, lease.token, "x", "")])
    assert wake_tokens(storage) == 0 and lease.id == task_id  # a limit, but nothing ready


def test_bad_limits_and_sharded_queues_are_refused(storage: Storage) -> None:
    for bad in (0, -1, True, 1.5, "1"):
        with pytest.raises(InvalidOption, match="max_running must be an int >= 1 or None"):
            ztq.configure_queue(Q, max_running=bad)  # type: ignore[arg-type]
    t.spread.delay(1)  # queue "hot" has 3 shards
    with pytest.raises(InvalidOption, match="is sharded"):
        ztq.configure_queue("hot", max_running=1)
    with pytest.raises(ztq.InvalidName):
        ztq.configure_queue("no such/queue", max_running=1)


def test_cancel_takes_back_a_queued_or_delayed_task_only(storage: Storage) -> None:
    queued = t.add.delay(1, 2)
    delayed = t.add.enqueue((3, 4), delay=3600)
    assert queued.cancel() and delayed.cancel()
    assert (queued.state.value, delayed.state.value) == ("none", "none")
    assert storage.queues.pending_count("default") == 0  # out of the ready list and the delayed set
    assert not queued.cancel()  # gone already
    running = t.add.delay(5, 6)
    [lease] = storage.leases.fetch("default", "w", "t", 60_000, 1)
    assert not running.cancel() and running.state.value == "running"
    storage.leases.ack("default", "w", [Finished(lease.id, lease.token, "x", "11")])
    assert not running.cancel() and running.state.value == "done"  # finished: kept
    failed = t.add.delay(7, 8)
    [lease] = storage.leases.fetch("default", "w", "t", 60_000, 1)
    storage.leases.fail("default", "w", lease.id, lease.token, "x", "E: e", "", retry_delay_ms=-1)
    assert not failed.cancel() and failed.state.value == "error"  # errors: redo or delete
    shard = next(h for h in (t.spread.delay(n) for n in range(9)) if h.queue == "hot~2")
    assert shard.cancel() and ztq.ping(shard.id, "hot") == "none"  # in its shard


def doc_blocks(language: str) -> list[str]:
    text = (Path(__file__).resolve().parents[2] / "docs" / "queue-controls.md").read_text()
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.S | re.M)


@pytest.mark.slow
def test_the_doc_examples_run_as_they_say(
    storage: Storage, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the keys' example runs in test_keys.py, the expiry's in test_expiry.py
    serial, pressure, rate, task_rate, _keys, cancel, *_ = doc_blocks("python")
    namespace: dict[str, Any] = {"__name__": "docs_queue_controls"}
    exec(compile(serial, "docs/queue-controls.md", "exec"), namespace)  # noqa: S102
    assert (
        storage.queues.pending_count("xapian") == 3 and storage.queues.queue_config("xapian") == {}
    )
    exec(compile(pressure, "docs/queue-controls.md", "exec"), namespace)  # noqa: S102
    assert (
        storage.queues.pending_count("thumbnails") == 3
        and storage.queues.queue_config("thumbnails") == {}
    )
    assert int(storage.client.hget(storage.keys.totals("thumbnails"), "refused")) == 1
    said = re.search(r"print\(exc\)  # (.*)", pressure)
    assert said and capsys.readouterr().out == said.group(1) + "\n"
    exec(compile(rate, "docs/queue-controls.md", "exec"), namespace)  # noqa: S102
    assert (
        storage.queues.pending_count("payments") == 3
        and storage.queues.queue_config("payments") == {}
    )
    said = re.search(r"print\(.*\)  # (.*)", rate)
    assert said and capsys.readouterr().out == said.group(1) + "\n"
    exec(compile(task_rate, "docs/queue-controls.md", "exec"), namespace)  # noqa: S102
    assert str(namespace["call_payment_api"].rate_limit) == "20/s burst 5"
    assert namespace["write_invoice"].rate_limit is None
    exec(compile(cancel, "docs/queue-controls.md", "exec"), namespace)  # noqa: S102
    assert namespace["h"].state.value == "none"
    [ini] = doc_blocks("ini")
    (tmp_path / "w.ini").write_text(ini)
    specs = {s.name: s for s in load_config(tmp_path / "w.ini").threads}
    assert (specs["fast"].queues, specs["fast"].fair) == (("urgent", "default"), False)
    assert (specs["mixed"].queues, specs["mixed"].fair) == (("mail", "reports", "pdf"), True)


def test_an_enqueue_wakes_one_idle_worker_per_task_up_to_16_tokens(storage: Storage) -> None:
    """A batch pushes its tokens once, at the end of its script call: one per task for now
    (and per task moved to the head), as many as fit under 16; a delayed task wakes the
    scheduler instead."""
    storage.client.delete(storage.keys.wake(Q))
    fill(3)
    assert wake_tokens(storage) == 3
    with ztq.transaction():
        for i in range(2, 8):  # 2 exists: no token
            t.serial_write.delay("/dev/null", i)
        t.serial_write.enqueue(("/dev/null", 0), first=True)  # moved: one more
    assert wake_tokens(storage) == 9
    with ztq.transaction():
        for i in range(10, 30):
            t.serial_write.delay("/dev/null", i)
    assert wake_tokens(storage) == 16
    schedule = storage.keys.schedule(Q)
    storage.client.delete(schedule)
    with ztq.transaction():
        for i in range(3):
            t.serial_write.enqueue(("/dev/null", 100 + i), delay=60)
    assert wake_tokens(storage) == 16 and storage.client.llen(schedule) == 3
