"""Back-pressure with real worker processes: producers far faster than two worker processes
meet ``max_pending``; with ``buffer`` they never wait, with ``block`` they wait for room. In
both, every task runs exactly once and the ready lists never hold more than the limit."""

from __future__ import annotations

import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from tests.worker.conftest import wait_for, worker_processes
from ztq.core.monitor import queues as monitor

Q = "press"
LIMIT = 5
TASKS = 120
pytestmark = pytest.mark.slow


@pytest.fixture
def workers(redis_url: str, tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Two worker processes, two threads each on queue press."""
    with worker_processes(redis_url, tmp_path, 2, f"{Q}:2") as procs:
        yield procs


@pytest.mark.parametrize("when_full", ["buffer", "block"])
def test_every_task_runs_once_and_the_queue_never_holds_more_than_the_limit(
    redis_url: str, workers: list[subprocess.Popen[bytes]], tmp_path: Path, when_full: str
) -> None:
    storage = ztq.get_storage()
    ztq.configure_queue(Q, max_pending=LIMIT, when_full=when_full, block_timeout=60)
    marker = tmp_path / "runs"
    seen: list[int] = []  # the ready lists' length, sampled while producers run
    producing = threading.Event()
    producing.set()

    def watch() -> None:
        while producing.is_set():
            [stats] = monitor.queue_stats(storage, [Q], minutes=1)
            seen.append(stats.pending)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    handles = [
        t.slow_record.enqueue((str(marker), str(n), 0.01), queue=Q, unique=False)
        for n in range(TASKS)
    ]
    producing.clear()
    watcher.join(5)
    outcomes = Counter(h.outcome for h in handles)
    if when_full == "buffer":
        assert outcomes["overflow"] > TASKS // 2  # the producer outran the workers, never waited
    else:
        assert outcomes == {"added": TASKS}
        refused = int(storage.client.hget(storage.keys.totals(Q), "refused") or 0)
        assert refused > 0  # it did wait for room
    wait_for(lambda: marker.exists() and len(marker.read_text().split()) >= TASKS, timeout=90)
    wait_for(lambda: all(h.state.value in ("done", "none") for h in handles), timeout=30)
    runs = Counter(marker.read_text().split())
    assert runs == Counter({str(n): 1 for n in range(TASKS)})  # each once, none lost
    assert seen and max(seen) <= LIMIT
    assert storage.client.llen(storage.keys.overflow(Q)) == 0
