"""The measurements of issue 5, each for one peer and one repetition, through ``Peer`` only.

Every function empties the peer's database first, starts and stops its own workers, and
returns plain numbers (NaN where the peer could not do it); ``run.py`` repeats and
interleaves them.
"""

from __future__ import annotations

import math
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import (
    clear_stamps,
    percentile,
    read_stamps,
    spawn,
    stamp_client,
    stop,
    wait_stamps,
)
from bench.peers.base import Peer
from bench.peers.ztq_peer import ZtqPeer

POLL = 0.005  # seconds between progress polls while a queue drains
QUIET = 2.0  # seconds past the last due time before the delayed test polls for stamps
WARMUP_TIMEOUT = 60.0


def used_memory() -> int:
    return int(stamp_client().info("memory")["used_memory"])


def start_workers(peer: Peer, procs: int, logs: Path, *, scheduler: bool = False) -> list:
    return [
        spawn(cmd, logs / f"{peer.label.replace(' ', '-')}.log", peer.worker_env())
        for cmd in peer.worker_commands(procs, scheduler=scheduler)
    ]


def warm_up(peer: Peer, i: int = -1) -> tuple[float, int]:
    """Send one stamp task and wait for it: the workers are up. Returns (seconds, pid)."""
    clear_stamps(peer.name)
    t0 = time.time()
    peer.enqueue_stamp(i)
    got = wait_stamps(peer.name, 1, WARMUP_TIMEOUT)
    if not got:
        raise RuntimeError(f"{peer.label}: workers did not run a task in {WARMUP_TIMEOUT}s")
    clear_stamps(peer.name)
    return got[0][1] - t0, got[0][2]


# -- 1 and 5: enqueue, and memory per queued task -----------------------------------------------
def enqueue_serial(peer: Peer, n: int, warm: int = 200) -> dict[str, float]:
    """Tasks/s of one call per task; and used_memory delta / n with all n queued.

    ``warm`` tasks go first (connections made, keys created, client buffers grown), so both
    figures are marginal: what one more task costs.
    """
    peer.reset()
    peer.enqueue_serial(n, warm)
    time.sleep(0.2)
    before = used_memory()
    t0 = time.perf_counter()
    peer.enqueue_serial(0, n)
    elapsed = time.perf_counter() - t0
    return {"rate": n / elapsed, "mem": (used_memory() - before) / n}


def enqueue_bulk(peer: Peer, n: int) -> dict[str, float]:
    if not peer.bulk_api:
        return {"rate": math.nan}
    peer.reset()
    t0 = time.perf_counter()
    peer.enqueue_bulk(0, n)
    return {"rate": n / (time.perf_counter() - t0)}


def rpush_reference(peer: ZtqPeer, n: int) -> dict[str, float]:
    """Tasks/s of the floor of a bulk enqueue: the ids of ztq's bulk run (computed first,
    not timed) pushed to one list in one redis-py pipeline, ``RPUSH`` one id each."""
    peer.reset()
    ids = peer.ids(0, n)
    with peer.client() as client:
        t0 = time.perf_counter()
        pipe = client.pipeline(transaction=False)
        for task_id in ids:
            pipe.rpush("bench:raw", task_id)
        pipe.execute()
        return {"rate": n / (time.perf_counter() - t0)}


# -- 2: drain ----------------------------------------------------------------------------------
def drain(peer: Peer, n: int, procs: int, logs: Path) -> dict[str, float]:
    """Tasks/s while ``procs`` fresh workers empty a queue of ``n`` no-ops.

    Timed from the first poll that sees at most 90% of the tasks left (worker start-up and
    first prefetch excluded) to the first poll that sees none left.
    """
    peer.reset()
    peer.fill(n)
    client = peer.client()
    queued = peer.remaining(client, n)
    if queued != n:
        raise RuntimeError(f"{peer.label}: filled {n} tasks but {queued} are queued")
    procs_ = start_workers(peer, procs, logs)
    mark: tuple[float, int] | None = None
    deadline = time.monotonic() + 120 + n / 100
    try:
        while time.monotonic() < deadline:
            left = peer.remaining(client, n)
            now = time.perf_counter()
            if mark is None and left <= 0.9 * n:
                mark = (now, left)
            if left == 0 and mark is not None:
                return {"rate": mark[1] / (now - mark[0])}
            time.sleep(POLL)
        return {"rate": math.nan}
    finally:
        stop(procs_)
        client.close()


# -- 3 and 4: latency and delayed lateness -----------------------------------------------------
@dataclass
class Spread:
    values: list[float] = field(default_factory=list)
    missing: int = 0

    def summary(self, prefix: str) -> dict[str, float]:
        if not self.values:
            return {f"{prefix}p50": math.nan, f"{prefix}p99": math.nan, f"{prefix}max": math.nan}
        return {
            f"{prefix}p50": percentile(self.values, 50),
            f"{prefix}p99": percentile(self.values, 99),
            f"{prefix}max": max(self.values),
            f"{prefix}missing": float(self.missing),
        }


def _collect(peer: Peer, origin: dict[int, float], timeout: float) -> Spread:
    got = wait_stamps(peer.name, len(origin), timeout)
    starts: dict[int, float] = {}
    for i, t, _pid in got:
        starts.setdefault(i, t)  # the first run of each task
    spread = Spread([(starts[i] - t0) * 1000 for i, t0 in origin.items() if i in starts])
    spread.missing = len(origin) - len(spread.values)
    return spread


def latency(peer: Peer, n: int, gap: float, logs: Path) -> dict[str, float]:
    """Enqueue→start (ms) of ``n`` stamp tasks sent ``gap`` s apart to one idle worker.

    The clock starts just before the enqueue call, so the enqueue round trip counts.
    """
    peer.reset()
    procs = start_workers(peer, 1, logs)
    try:
        warm_up(peer)
        time.sleep(1.0)  # idle: the worker is blocked (or polling) on an empty queue
        origin: dict[int, float] = {}
        start = time.perf_counter()
        for i in range(n):
            pause = start + i * gap - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            origin[i] = time.time()
            peer.enqueue_stamp(i)
        return _collect(peer, origin, 30.0).summary("")
    finally:
        stop(procs)


def delayed(peer: Peer, n: int, gap: float, lead: float, logs: Path) -> dict[str, float]:
    """Lateness (start − due, ms) of ``n`` tasks due ``gap`` s apart from ``lead`` s on.

    Negative lateness means the task ran before it was due.
    """
    peer.reset()
    procs = start_workers(peer, 1, logs, scheduler=True)
    try:
        warm_up(peer)
        due0 = time.time() + lead
        origin = {i: due0 + i * gap for i in range(n)}
        for i, due in origin.items():
            peer.enqueue_stamp(i, eta=due)
        if time.time() > due0:
            raise RuntimeError(f"{peer.label}: enqueueing {n} delayed tasks took over {lead}s")
        # Send nothing to Redis until every task is due and QUIET s more: a poll would wake
        # Redis's event loop, which fires BLPOP timeouts only on its 100 ms cron otherwise.
        time.sleep(max(0.0, origin[n - 1] + QUIET - time.time()))
        return _collect(peer, origin, 15.0).summary("")
    finally:
        stop(procs)


# -- 6: recovery -------------------------------------------------------------------------------
def recovery(peers: list[Peer], logs: Path, cap: float, settle: float = 8.0) -> dict[str, float]:
    """Seconds from SIGKILL of the process running a task to that task starting elsewhere.

    All peers run at once (the workers are idle, so they do not disturb each other): worker
    A takes ``hold(0)``; worker B starts; after ``settle`` s the process that runs the task
    is killed; NaN when no other process started the task within ``cap`` s.
    """
    procs: dict[str, list] = {}
    victims: dict[str, int] = {}
    out: dict[str, float] = {}
    try:
        for peer in peers:
            peer.reset()
            procs[peer.name] = start_workers(peer, 1, logs)
            peer.enqueue_hold(0)
        for peer in peers:
            got = wait_stamps(peer.name, 1, WARMUP_TIMEOUT)
            if not got:
                raise RuntimeError(f"{peer.label}: hold(0) did not start")
            victims[peer.name] = got[0][2]
            procs[peer.name] += start_workers(peer, 1, logs)
        time.sleep(settle)
        killed = {}
        for peer in peers:
            os.kill(victims[peer.name], signal.SIGKILL)
            killed[peer.name] = time.time()
        deadline = time.monotonic() + cap
        pending = {p.name for p in peers}
        while pending and time.monotonic() < deadline:
            for name in list(pending):
                again = [t for _, t, pid in read_stamps(name) if pid != victims[name]]
                if again:
                    out[name] = again[0] - killed[name]
                    pending.discard(name)
            time.sleep(0.05)
        for name in pending:
            out[name] = math.nan
        return out
    finally:
        for group in procs.values():
            stop(group)


# -- 8: asyncio, tasks that sleep, on one worker process (issue 9) -----------------------------
def sleeps(peer: Peer, label: str, n: int, seconds: float, logs: Path) -> dict[str, float]:
    """Seconds from starting one worker process until all of ``n`` queued tasks that each
    sleep ``seconds`` have finished (start-up included); until the first one and until 90%
    have (the last 10% taking longer than the rest is a tail: tasks that waited)."""
    peer.reset()
    peer.fill_sleeps(label, n, seconds)
    client = peer.client()
    queued = peer.sleeps_left(label, client)
    if queued != n:
        raise RuntimeError(f"{label}: filled {n} tasks but {queued} are queued")
    log = logs / f"{label.replace(' ', '-')}-sleeps.log"
    t0 = time.perf_counter()
    proc = spawn(peer.sleep_command(label), log, peer.worker_env())
    first = most = math.nan
    deadline = time.monotonic() + 120 + n * seconds / 10
    try:
        while time.monotonic() < deadline:
            left = peer.sleeps_left(label, client)
            now = time.perf_counter() - t0
            if left < n and math.isnan(first):
                first = now
            if left <= n // 10 and math.isnan(most):
                most = now
            if left == 0:
                return {"wall": now, "rate": n / now, "first": first, "most": most}
            if proc.poll() is not None:
                raise RuntimeError(f"{label}: the worker exited ({proc.returncode}), see {log}")
            time.sleep(POLL)
        return {"wall": math.nan, "rate": math.nan, "first": first, "most": most}
    finally:
        stop([proc])
        client.close()
