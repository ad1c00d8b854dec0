"""A serial queue across real worker processes: with ``max_running=1`` no two runs of the
queue overlap, however many workers and threads serve it; with 2, never more than two."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from tests.worker.conftest import wait_for, worker_processes

pytestmark = pytest.mark.slow


@pytest.fixture
def workers(redis_url: str, tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Three worker processes, two threads each on queue xapian."""
    with worker_processes(redis_url, tmp_path, 3, "xapian:2") as procs:
        yield procs


def most_at_once(path: Path) -> tuple[int, set[str]]:
    """The most runs in progress at one instant, from the start/end lines; and the pids
    (one process may well run them all: its thread acks and fetches in one round trip)."""
    events, pids = [], set()
    for line in path.read_text().splitlines():
        kind, at, pid, _ = line.split()
        events.append((float(at), 1 if kind == "start" else -1))
        pids.add(pid)
    now = top = 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):  # an end before a start at a tie
        now += step
        top = max(top, now)
    return top, pids


@pytest.mark.parametrize("limit", [1, 2])
def test_runs_never_overlap_past_the_limit(
    redis_url: str, workers: list[subprocess.Popen[bytes]], tmp_path: Path, limit: int
) -> None:
    from ztq.core.monitor.workers import list_workers

    ztq.configure_queue("xapian", max_running=limit)
    # six threads in three processes compete for the queue before the first task arrives
    wait_for(lambda: len(list_workers(ztq.get_storage(), 30)) == 3, timeout=20)
    marker = tmp_path / "runs"
    handles = [t.serial_write.delay(str(marker), n, 0.05) for n in range(24)]
    wait_for(lambda: all(h.state.value == "done" for h in handles), timeout=60, every=0.1)
    top, _ = most_at_once(marker)
    assert top == limit  # never more, and the limit was reached (it is not serial by chance)
