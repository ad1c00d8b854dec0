"""A queue's rate limit across real worker processes: two processes share it (the starts in
the history, on Redis's clock, never exceed the bound over any 2 s window, and the drain
keeps close to the rate), a throttled thread sleeps until its token (no polling), and
lifting the limit wakes the sleeping threads at once."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from tests.worker.conftest import ROOT, stop_process, wait_for, worker_processes
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


@pytest.fixture
def idle_workers(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """The same two processes with idle_wait 30 s: a thread that looks again within the
    test's windows did so because of a token or a wake-up, never because its wait ended."""
    monkeypatch.setenv("ZTQ_IDLE_WAIT", "30")
    with worker_processes(redis_url, tmp_path, 2, f"{Q}:3") as procs:
        from ztq.core.monitor.workers import list_workers

        wait_for(lambda: len(list_workers(ztq.get_storage(), 30)) == 2, timeout=20)
        yield procs


def settled(count: Callable[[], int], quiet: float = 1.0, timeout: float = 20.0) -> int:
    """``count()`` once it kept its value for ``quiet`` seconds (threads of a loaded machine
    may take their first look late)."""
    last, since = count(), time.monotonic()
    deadline = since + timeout
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = count()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return now
    raise AssertionError(f"still changing after {timeout}s")


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
    assert 10 <= measured <= 20.5  # the drain keeps close to the limit, never above it


def test_a_throttled_thread_sleeps_until_its_token(
    idle_workers: list[subprocess.Popen[bytes]],
) -> None:
    ztq.configure_queue(Q, rate_limit="1/m")
    handles = [t.add.delay(i, 1) for i in range(4)]
    wait_for(lambda: handles[0].state.value == "done", timeout=10)
    wait_for(lambda: throttled() > 0, timeout=5)
    looked = settled(throttled)  # the six threads each looked once (or were woken once)
    assert looked <= 12
    time.sleep(3)  # no thread polls: nobody fetches again before its token (a minute away)
    assert throttled() == looked
    assert [h.state.value for h in handles[1:]] == ["queued"] * 3  # waiting, never failed
    ztq.configure_queue(Q, rate_limit=None)  # lifted: the sleeping threads wake at once
    lifted = time.monotonic()
    wait_for(lambda: all(h.state.value == "done" for h in handles), timeout=5, every=0.02)
    assert time.monotonic() - lifted < 3  # woken: not at the end of idle_wait (30 s)
    assert all(ztq.get_storage().tasks.record(Q, h.id).meta.get("attempts") == 1 for h in handles)


def test_a_task_limit_holds_only_that_task(redis_url: str, tmp_path: Path) -> None:
    """Two worker processes register ``call_api`` (4/s, its own limit) and ``local_work``
    (none) of one queue. Queued first, the limited task does not hold up the other: its
    tasks wait in the queue's delayed set (shown as queued, never failed or retried), start
    at most 4 a second, in their order; the others run at once."""
    from tests import rate_tasks as r

    procs = []
    try:
        for i in range(2):
            log = open(tmp_path / f"p{i}.log", "ab")  # noqa: SIM115 - closed with the process
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "ztq.worker", "--redis", redis_url, "--name", f"p{i}",
                 "--import", "tests.rate_tasks", "--queue", "paced:2", "--heartbeat", "0.3",
                 "--log-level", "warning"], cwd=ROOT, stdout=log, stderr=log))  # fmt: skip
        st = ztq.get_storage()
        wait_for(lambda: st.queues.queue_limits("paced").task_rates, timeout=20)
        api = [r.call_api.delay(n) for n in range(8)]
        local = [r.local_work.delay(n) for n in range(8)]
        wait_for(lambda: all(h.state.value == "done" for h in local), timeout=10)
        assert any(h.state.value == "queued" for h in api)  # held: still waiting
        wait_for(lambda: all(h.state.value == "done" for h in api), timeout=15)
        entries = st.client.xrange(st.keys.history("paced"), "-", "+")
        runs = [(int(f["started"]), str(f["id"])) for _, f in entries if f["task"].endswith("api")]
        ended = [int(f["ended"]) for _, f in entries if f["task"].endswith("local_work")]
        assert max(ended) < max(s for s, _ in runs)  # not behind the limited ones (2 s of tokens)
        times = [s for s, _ in sorted(runs)]
        assert len(times) == 8 and [i for _, i in sorted(runs)] == [h.id for h in api]  # in order
        for i, s in enumerate(times):
            assert sum(1 for x in times[i:] if x - s <= 1000) <= Rate(4, "s").bound(1.0)
        assert all(st.tasks.record("paced", h.id).meta.get("attempts") == 1 for h in api)
    finally:
        for p in procs:
            stop_process(p)
