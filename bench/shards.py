"""One busy queue on a local three-master Redis Cluster: ``shards=1`` against more shards.

    python -m bench.shards [--tasks 40000] [--workers 3] [--threads 2] [--reps 3]
                           [--shards 1,3,12]

Builds a Cluster of three redis-server masters (``tests/redis_cluster.py``, every process
killed by PID at the end). Each repetition, for each shard count in turn (interleaved,
so that a slower machine phase hurts both): empty the Cluster, enqueue ``--tasks`` no-op
tasks of queue ``hot`` (in transactions: 500 tasks per script call), start ``--workers``
worker processes (``ztq worker --queue hot:THREADS:shards=N``), and time from their start
until every task is done. Meanwhile each master's ``used_cpu_sys + used_cpu_user`` is read:
the CPU seconds each master spent on the drain, and its share of the drain's wall time.

What it shows: with one shard every task's keys are in one slot, so one master does all
the work and the others idle. A shard's slot is fixed by its name (``hot~2``), so a few
shards may share a master (3 shards on 3 masters: 2 of them here); a count several times
the number of masters spreads the load evenly, and ``redis-cli --cluster reshard`` can move
a shard's slot where it is wanted. Whether
the drain gets faster depends on what is saturated first: on a machine with fewer cores
than masters plus workers, the Python workers are, and the gain is in Redis CPU per master
(the headroom before one master becomes the ceiling), not in tasks per second.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import redis

from bench.common import ROOT, median

QUEUE = "hot"
TASK = "bench.shard_tasks.nothing"


@dataclass
class Run:
    shards: int
    tasks: int
    seconds: float
    cpu: list[float]  # CPU seconds per master during the drain

    @property
    def per_second(self) -> float:
        return self.tasks / self.seconds


def master_cpu(ports: list[int]) -> list[float]:
    out = []
    for port in ports:
        c = redis.Redis(port=port)
        info = c.info("cpu")
        c.close()
        out.append(float(info["used_cpu_sys"]) + float(info["used_cpu_user"]))
    return out


def fill(url: str, shards: int, tasks: int) -> float:
    """Enqueue ``tasks`` calls of the no-op task; returns the seconds it took."""
    import ztq.core as ztq
    from ztq.core.client.calls import TaskCall

    ztq.connect(url)
    started = time.perf_counter()
    for lo in range(0, tasks, 5000):
        with ztq.transaction():
            for i in range(lo, min(tasks, lo + 5000)):
                TaskCall(TASK, (i,), queue=QUEUE, shards=shards).enqueue()
    took = time.perf_counter() - started
    ztq.disconnect_all()
    return took


def left(url: str) -> int:
    """Tasks of the queue not finished yet (ready, delayed or running, every shard)."""
    import ztq.core as ztq
    from ztq.core.monitor import queues as monitor

    storage = ztq.connect(url)
    try:
        [s] = monitor.folded_stats(storage, [QUEUE], minutes=0)
        return s.pending + s.delayed + s.running
    finally:
        ztq.disconnect_all()


def drain(url: str, shards: int, tasks: int, workers: int, threads: int, ports: list[int]) -> Run:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "ztq.worker", "--redis", url, "--import",
           "bench.shard_tasks", "--queue", f"{QUEUE}:{threads}:shards={shards}",
           "--log-level", "warning"]  # fmt: skip
    before = master_cpu(ports)
    started = time.perf_counter()
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env) for _ in range(workers)]
    try:
        deadline = time.monotonic() + 600
        while left(url):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError("the drain did not finish (a worker exited, or 600 s)")
            time.sleep(0.05)
        seconds = time.perf_counter() - started
        after = master_cpu(ports)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    return Run(shards, tasks, seconds, [b - a for a, b in zip(before, after, strict=True)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.shards", description=__doc__)
    parser.add_argument("--tasks", type=int, default=40_000)
    parser.add_argument("--workers", type=int, default=3, help="worker processes")
    parser.add_argument("--threads", type=int, default=2, help="threads per worker process")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--shards", default="1,3,12", help="shard counts to compare")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.shards.split(",")]
    sys.path.insert(0, str(ROOT))
    from tests.redis_cluster import LocalCluster

    cluster = LocalCluster(3).start()
    ports = [n.port for n in cluster.nodes[:3]]
    runs: dict[int, list[Run]] = {n: [] for n in counts}
    try:
        for rep in range(args.reps):
            for shards in counts if rep % 2 == 0 else counts[::-1]:
                cluster.flush()
                fill(cluster.url, shards, args.tasks)
                run = drain(cluster.url, shards, args.tasks, args.workers, args.threads, ports)
                runs[shards].append(run)
                shares = " ".join(f"{c / run.seconds:5.0%}" for c in run.cpu)
                print(f"bench.shards: rep {rep + 1} shards={shards}: {run.per_second:,.0f} "
                      f"tasks/s, CPU per master {shares}", flush=True)  # fmt: skip
    finally:
        cluster.stop()
    print_report(runs, args)
    return 0


def print_report(runs: dict[int, list[Run]], args: Any) -> None:
    print()
    print(f"## One busy queue over 3 Cluster masters ({args.tasks:,} no-op tasks, "
          f"{args.workers} worker processes x {args.threads} threads, "
          f"median of {args.reps})")  # fmt: skip
    print()
    print("| shards | drain (tasks/s) | busiest master (CPU share) | CPU share per master |")
    print("|---|---|---|---|")
    rates = {}
    for shards, rs in runs.items():
        rates[shards] = median([r.per_second for r in rs])
        shares = [median([r.cpu[i] / r.seconds for r in rs]) for i in range(3)]
        cells = " / ".join(f"{s:.0%}" for s in shares)
        print(f"| {shards} | {rates[shards]:,.0f} | {max(shares):.0%} | {cells} |")
    print()
    base = min(rates)
    for shards in rates:
        if shards != base:
            print(f"shards={shards} / shards={base} drain: {rates[shards] / rates[base]:.2f}x")


if __name__ == "__main__":
    raise SystemExit(main())
