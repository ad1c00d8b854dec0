"""Where ztq's time goes: pyinstrument on the enqueue and drain hot paths, in-process.

The drain runs one ``Executor`` of a real ``Worker`` in the main thread, stepping it the way
its thread would (``Executor.step``), so the profile sees the fetch/run/ack loop and nothing
else. Redis's own time per script comes from ``INFO commandstats``. A second pass with the
log level at WARNING shows what the worker's default per-task INFO lines cost.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

from pyinstrument import Profiler

from bench.common import stamp_client
from bench.peers.ztq_peer import ZtqPeer

INTERVAL = 0.0005
os.environ.setdefault("PYINSTRUMENT_IGNORE_OVERHEAD_WARNING", "1")  # ~1 µs timer on this VM


@dataclass
class Profiles:
    enqueue_rate: float = 0.0
    enqueue_rate_plain: float = 0.0  # one by one without the profiler, just before
    bulk_rate: float = 0.0
    drain_rate_info: float = 0.0
    drain_rate_warning: float = 0.0
    enqueue_tree: str = ""
    bulk_tree: str = ""
    drain_tree: str = ""
    script_us: dict[str, float] = field(default_factory=dict)  # Redis µs per script call
    script_calls: dict[str, int] = field(default_factory=dict)
    round_trip_us: dict[str, float] = field(default_factory=dict)  # one call, client side


def _tree(profiler: Profiler) -> str:
    text = profiler.output_text(unicode=False, color=False, show_all=False)
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith(("  _", " /", "/"))]
    return "\n".join(lines[:60])


def _evalsha(into: Profiles, prefix: str) -> None:
    """Redis time per script call: EVALSHA and FCALL together (enqueue runs as a function
    on Redis 7, the worker's scripts by SHA)."""
    stats: dict[str, Any] = stamp_client().info("commandstats")
    rows = [stats[k] for k in ("cmdstat_evalsha", "cmdstat_fcall") if k in stats]
    calls = sum(int(row["calls"]) for row in rows)
    if calls:
        into.script_us[prefix] = sum(float(row["usec"]) for row in rows) / calls
        into.script_calls[prefix] = calls


def _reset_stats() -> None:
    stamp_client().config_resetstat()


def _profiled(peer: ZtqPeer, out: Profiles, label: str, run: Any, n: int) -> tuple[float, str]:
    """Run ``run(0, n)`` under the profiler on a clean Redis: (tasks/s, call tree)."""
    peer.reset()
    _reset_stats()
    prof = Profiler(interval=INTERVAL)
    prof.start()
    t0 = time.perf_counter()
    run(0, n)
    rate = n / (time.perf_counter() - t0)
    prof.stop()
    _evalsha(out, label)
    return rate, _tree(prof)


def profile_enqueue(peer: ZtqPeer, n: int, bulk_n: int, out: Profiles) -> None:
    peer.reset()
    peer.enqueue_serial(0, 100)  # connect, load scripts
    t0 = time.perf_counter()
    peer.enqueue_serial(100, n)
    out.enqueue_rate_plain = n / (time.perf_counter() - t0)
    one = _profiled(peer, out, "enqueue (one by one)", peer.enqueue_serial, n)
    out.enqueue_rate, out.enqueue_tree = one
    bulk = _profiled(peer, out, "enqueue (transaction)", peer.enqueue_bulk, bulk_n)
    out.bulk_rate, out.bulk_tree = bulk


def _drain_in_process(peer: ZtqPeer, n: int, level: int, prof: Profiler | None) -> float:
    from ztq.worker.config import ThreadSpec, WorkerConfig
    from ztq.worker.executors.threads import Executor
    from ztq.worker.worker import Worker

    peer.reset()
    peer.fill(n)
    spec = ThreadSpec("default-0", ("default",))
    cfg = WorkerConfig(redis_url=peer.url, threads=(spec,), imports=(peer.module,))
    worker = Worker(cfg)
    worker.setup()
    executor = Executor(worker, spec)
    root = logging.getLogger()
    old = root.level
    root.setLevel(level)
    _reset_stats()
    done = 0
    try:
        if prof is not None:
            prof.start()
        t0 = time.perf_counter()
        while done < n:
            ran = executor.step()
            done += ran
            if ran == 0:
                break
        elapsed = time.perf_counter() - t0
        if prof is not None:
            prof.stop()
    finally:
        root.setLevel(old)
    executor.flush(fetch=False)
    return done / elapsed


def profile_drain(peer: ZtqPeer, n: int, out: Profiles) -> None:
    """The drain loop with the worker CLI's logging (INFO, ztq's handler, to /dev/null),
    then at WARNING."""
    from ztq.worker import logs

    root = logging.getLogger()
    before = list(root.handlers)
    with open(os.devnull, "w") as devnull:
        logs.configure("INFO", "text", devnull)
        try:
            prof = Profiler(interval=INTERVAL)
            _drain_in_process(peer, n, logging.INFO, prof)
            out.drain_tree = _tree(prof)
            _evalsha(out, "fetch + ack (drain)")
            out.drain_rate_info = _drain_in_process(peer, n, logging.INFO, None)
            out.drain_rate_warning = _drain_in_process(peer, n, logging.WARNING, None)
        finally:
            for handler in [h for h in root.handlers if h not in before]:
                root.removeHandler(handler)
                handler.close()


def round_trips(peer: ZtqPeer, out: Profiles, n: int = 2000) -> None:
    """What one round trip costs from ztq's client: a plain command against an empty script."""
    from ztq.core.client.app import get_storage

    peer.enqueue_noop(-1)  # connects
    client = get_storage().client
    sha = client.script_load("return 1")
    calls = {
        "LPUSH": lambda: client.lpush("bench:rt", "x"),
        "EVALSHA of an empty script": lambda: client.evalsha(sha, 0),
    }
    for _ in range(5):  # alternate, keep the best round of each
        for label, call in calls.items():
            t0 = time.perf_counter()
            for _ in range(n):
                call()
            took = (time.perf_counter() - t0) / n * 1e6
            out.round_trip_us[label] = min(out.round_trip_us.get(label, math.inf), took)
    client.delete("bench:rt")


def run(peer: ZtqPeer, n: int = 5000, bulk_n: int = 20000, drain_n: int = 20000) -> Profiles:
    out = Profiles()
    round_trips(peer, out)
    profile_enqueue(peer, n, bulk_n, out)
    profile_drain(peer, drain_n, out)
    peer.reset()
    return out
