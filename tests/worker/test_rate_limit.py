"""A queue's rate limit across real worker processes: two processes share it (the starts in
the history, on Redis's clock, never exceed the bound over any 2 s window, and the drain
keeps close to the rate), a throttled thread sleeps until its token (no polling), and
lifting the limit wakes the sleeping threads at once."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from tests.worker.conftest import wait_for, worker_processes
from ztq.core.engine.queue_limits import Rate

pytestmark = pytest.mark.slow
Q = "default"


@pytest.fixture
def workers(redis_url: str, tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Two worker processes, three threads each on the default queue."""
    with worker_processes(redis_url, tmp_path, 2, f"{Q}:3") as procs:
        from ztq.core.monitor.workers import list_workers

        wait_for(lambda: len(list_workers(ztq.get_storage(), 30)) == 2, timeout=20)
        yield procs


def starts() -> list[tuple[int, str]]:
    st = ztq.get_storage()
    entries = st.client.xrange(st.keys.history(Q), "-", "+")
    return sorted((int(f["started"]), str(f["worker"])) for _, f in entries)


def throttled() -> int:
    st = ztq.get_storage()
    return int(st.client.hget(st.keys.totals(Q), "throttled") or 0)


def test_two_processes_share_the_rate(workers: list[subprocess.Popen[bytes]]) -> None:
    rate = Rate.parse("20/s burst 2")
    ztq.configure_queue(Q, rate_limit=str(rate))
    handles = [t.add.delay(i, 0) for i in range(70)]
    wait_for(lambda: all(h.state.value == "done" for h in handles), timeout=30, every=0.1)
    got = starts()
    assert len(got) == 70
    assert {w for _, w in got} == {"w0", "w1"}  # both processes took tokens
    times = [s for s, _ in got]
    for i, s in enumerate(times):  # any window of 2 s: at most 2 x 20 + 2 starts
        assert sum(1 for x in times[i:] if x - s <= 2000) <= rate.bound(2.0)
    measured = (len(times) - rate.burst) / ((times[-1] - times[0]) / 1000)
    assert 14 <= measured <= 20.5  # the drain keeps close to the limit, never above it


def test_a_throttled_thread_sleeps_until_its_token(workers: list[subprocess.Popen[bytes]]) -> None:
    ztq.configure_queue(Q, rate_limit="1/m")
    handles = [t.add.delay(i, 1) for i in range(4)]
    wait_for(lambda: handles[0].state.value == "done", timeout=10)
    wait_for(lambda: throttled() > 0, timeout=5)
    time.sleep(0.5)  # the six threads each looked once (or were woken once by a fetch)
    settled = throttled()
    assert settled <= 12
    time.sleep(3)  # no thread polls: nobody fetches again before its token or idle_wait (5 s)
    assert throttled() == settled
    assert [h.state.value for h in handles[1:]] == ["queued"] * 3  # waiting, never failed
    ztq.configure_queue(Q, rate_limit=None)  # lifted: the sleeping threads wake at once
    lifted = time.monotonic()
    wait_for(lambda: all(h.state.value == "done" for h in handles), timeout=5, every=0.02)
    assert time.monotonic() - lifted < 1.5
    assert all(ztq.get_storage().record(Q, h.id).meta.get("attempts") == 1 for h in handles)
