"""Expiry with real workers (docs/queue-controls.md, "Expiry"): a worker process that starts
after the tasks' expiry runs none of them (and runs the others); a task that waits in a
worker's leased batch past its expiry is given back and ends as expired, not run. The
script moves: tests/core/test_expiry.py and the state-machine test."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from tests.worker.conftest import wait_for
from ztq.core.errors import TaskExpired
from ztq.core.monitor import timings
from ztq.worker.worker import Worker

ROOT = Path(__file__).resolve().parents[2]


def redis_ms() -> int:
    seconds, micros = ztq.get_storage().client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def statuses(queue: str = "default") -> list[str]:
    storage = ztq.get_storage()
    return [f["status"] for _, f in storage.client.xrange(storage.keys.history(queue))]


@pytest.mark.slow
def test_a_worker_started_after_the_expiry_runs_nothing_expired(
    redis_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "runs.txt"
    stale = [t.record.enqueue((str(out), f"stale-{n}"), expires=0.05) for n in range(3)]
    fresh = t.record.enqueue((str(out), "fresh"), expires=3600)
    plain = t.record.delay(str(out), "plain")
    storage = ztq.get_storage()
    last_exp = max(storage.tasks.record("default", h.id).get("exp") for h in stale)
    wait_for(lambda: redis_ms() > last_exp)  # Redis's clock passed their expiry
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from ztq.worker.cli import main; sys.exit(main())",
         "worker", "--redis", redis_url,
         "--import", "tests.sample_tasks", "--queue", "default:2", "--burst"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert sorted(out.read_text().split()) == ["fresh", "plain"]
    for h in stale:
        assert ztq.ping(h) == "expired"
        with pytest.raises(TaskExpired):
            h.get(timeout=5)
    assert fresh.get(timeout=5) is None and plain.get(timeout=5) is None
    assert sorted(statuses()) == ["done", "done", "expired", "expired", "expired"]
    assert timings.totals(storage, ["default"])["default"].expired == 3


@pytest.mark.slow
def test_a_task_held_in_a_batch_past_its_expiry_is_not_run(
    start_worker: Callable[..., Worker], tmp_path: Path
) -> None:
    """A thread leases a batch and runs it in order: the second task waits behind a slow
    one past its expiry, so the worker gives it back and the next fetch ends it."""
    out = tmp_path / "runs.txt"
    gate = tmp_path / "gate"
    w = start_worker({"default": 1}, name="batcher", prefetch=8, idle_wait=0.2)
    for h in [t.noop.delay(n) for n in range(8)]:  # quick runs: the thread's batch grows
        h.get(timeout=10)
    assert w.executors[0].batch >= 2
    storage = ztq.get_storage()
    w.paused.set()  # both wait in ready, then go in one batch
    wait_for(lambda: storage.client.get(storage.keys.waiter("default")) is None)
    slow = t.reports_then_waits.delay(str(gate), "holding", 10)  # runs until the gate opens
    late = t.record.enqueue((str(out), "late"), expires=0.5)
    w.paused.clear()
    wait_for(lambda: str(storage.tasks.record("default", late.id).state) == "running")
    assert str(storage.tasks.record("default", slow.id).state) == "running"  # one batch of two
    exp = storage.tasks.record("default", late.id).get("exp")
    wait_for(lambda: redis_ms() > exp + 50)
    gate.write_text("go")
    with pytest.raises(TaskExpired):
        late.get(timeout=10)
    assert slow.get(timeout=10) == "released"
    assert not out.exists()  # never ran
    rec = storage.tasks.record("default", late.id)
    assert rec.get("attempts") == 1  # it was leased in the batch, given back, then ended
    assert w.executors[0].is_alive()


@pytest.mark.slow
def test_a_give_back_redis_refuses_leaves_the_rest_of_the_batch_running(
    start_worker: Callable[..., Worker], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The give-back of an expired task fails (Redis unreachable for that call): the task
    is not held any more (its lease lapses, the reaper returns it), and the tasks after it
    in the batch still run (they stayed held, renewed and never run)."""
    from ztq.core.errors import ConnectionFailed

    out = tmp_path / "runs.txt"
    gate = tmp_path / "gate"
    w = start_worker({"default": 1}, name="batcher", prefetch=8, idle_wait=0.2)
    for h in [t.noop.delay(n) for n in range(8)]:
        h.get(timeout=10)
    storage = ztq.get_storage()
    ex = w.executors[0]
    refused: list[str] = []

    def release(queue: str, worker: str, held: list[tuple[str, int]]) -> None:
        refused.extend(task_id for task_id, _ in held)
        raise ConnectionFailed("Redis unreachable (test)")

    monkeypatch.setattr(ex.storage.leases, "release", release)
    w.paused.set()
    wait_for(lambda: storage.client.get(storage.keys.waiter("default")) is None)
    slow = t.reports_then_waits.delay(str(gate), "holding", 10)
    late = t.record.enqueue((str(out), "late"), expires=0.5)
    after = t.record.delay(str(out), "after")
    w.paused.clear()
    wait_for(lambda: str(storage.tasks.record("default", after.id).state) == "running")
    exp = storage.tasks.record("default", late.id).get("exp")
    wait_for(lambda: redis_ms() > exp + 50)
    gate.write_text("go")
    assert slow.get(timeout=10) == "released"
    after.get(timeout=10)
    assert refused == [late.id]
    assert out.read_text().split() == ["after"]
    assert ("default", late.id) not in ex.held
    assert ex.is_alive()
