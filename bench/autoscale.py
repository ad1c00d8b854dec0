"""The autoscaler against every static split of the same threads, on a mixed workload.

    python -m bench.autoscale [--reps 2] [--budget 8] [--burst 2000] [--splits grid|all]

One private redis-server; for each configuration in turn (interleaved over the
repetitions) one worker process (``ztq worker``, heartbeat 1 s) and the same workload:

- **cpu**: at 0 s, ``--cpu`` CPU-bound tasks of 20 ms of CPU each (queue ``cpu``);
- **trickle**: from 0 s until the end, one I/O-bound task of 10 ms every 50 ms (``trickle``);
- **burst**: at 2 s, ``--burst`` I/O-bound tasks of 5 to 20 ms each (``burst``, a seeded draw).

A static split runs ``--queue burst:B --queue trickle:T --queue cpu:C`` with B + T + C =
``--budget``; the grid gives trickle and cpu 1 or 2 threads each, the burst the rest
(``--splits all``: every split with at least one thread each). The autoscaled worker runs
``burst:1..B trickle:1..B cpu:0..B`` with ``--autoscale-threads-max B`` (B the budget):
never more threads than a static split. Its CPU ceiling is off (``--cpu-max 100``) unless
given: on a small shared machine the host's CPU (other programs, the bench itself) is
over 85 % for seconds at a time, and the ceiling then holds the burst's growth back (that is
its job; ``--cpu-max 85`` measures it). Measured: the finish (from 0 s until the last burst
and cpu task ended) and the p99 of the waiting time (sent → started) of every task, and
per queue; the autoscaler's decisions are counted from the worker log. The autoscaled
worker's queues have the run times of the earlier runs in their stats (as a queue in
service has): the static runs go first in the first repetition.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import redis

from bench.common import ROOT

QUEUES = ("burst", "trickle", "cpu")
BURST_AT = 2.0  # seconds after the start
TRICKLE_EVERY = 0.05
CPU_MS = 20.0
HEARTBEAT = 1.0


@dataclass
class Result:
    label: str
    finish: float
    waits: dict[str, list[float]] = field(default_factory=dict)  # queue -> seconds
    decisions: int = 0
    holds: int = 0

    def p99(self, queue: str = "") -> float:
        values = self.waits.get(queue) if queue else [w for v in self.waits.values() for w in v]
        return quantile(values or [float("nan")], 0.99)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def splits(budget: int, every: bool) -> list[tuple[int, int, int]]:
    out = []
    for trickle in range(1, budget):
        for cpu in range(1, budget - trickle):
            burst = budget - trickle - cpu
            if burst >= 1 and (every or (trickle <= 2 and cpu <= 2)):
                out.append((burst, trickle, cpu))
    return out


def start_worker(
    url: str, name: str, queues: list[str], extra: list[str]
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_STAMPS_URL": url}
    flags = [a for q in queues for a in ("--queue", q)] + extra
    cmd = [sys.executable, "-m", "ztq.worker", "--redis", url, "--name", name, "--import",
           "bench.autoscale_tasks", "--heartbeat", str(HEARTBEAT), "--lease", "3",
           "--log-level", "warning", *flags]  # fmt: skip
    return subprocess.Popen(cmd, cwd=ROOT, env=env)


def wait_ready(
    storage: Any, name: str, proc: subprocess.Popen[bytes], want: dict[str, int]
) -> None:
    from ztq.core.workers import get_worker

    deadline = time.monotonic() + 60
    while True:
        info = get_worker(storage, name)
        if info is not None and info.status == "running":
            threads = info.get("threads") or {}
            if all(threads.get(q, 0) == n for q, n in want.items()):
                return
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"worker {name} did not start")
        time.sleep(0.05)


def workload(url: str, burst: int, cpu: int, seed: int) -> tuple[float, int]:
    """Send the workload; return (finish seconds, trickle tasks sent) once all ran."""
    import ztq.core as ztq
    from ztq.core.calls import TaskCall

    client = redis.Redis.from_url(url, decode_responses=True)
    rng = random.Random(seed)
    stop = threading.Event()
    sent_trickle = 0

    def send(name: str, queue: str, items: list[float]) -> None:
        now = time.time()
        with ztq.transaction():
            for ms in items:
                TaskCall(name, (ms, now, queue), {}, queue=queue, unique=False).enqueue()

    def trickle() -> None:
        nonlocal sent_trickle
        next_at = time.monotonic()
        while not stop.is_set():
            send("bench.autoscale.io", "trickle", [10.0])
            sent_trickle += 1
            next_at += TRICKLE_EVERY
            stop.wait(max(0.0, next_at - time.monotonic()))

    started = time.monotonic()
    feeder = threading.Thread(target=trickle, daemon=True)
    send("bench.autoscale.cpu", "cpu", [CPU_MS] * cpu)
    feeder.start()
    time.sleep(max(0.0, BURST_AT - (time.monotonic() - started)))
    draws = [rng.uniform(5, 20) for _ in range(burst)]
    for lo in range(0, burst, 500):
        send("bench.autoscale.io", "burst", draws[lo : lo + 500])
    deadline = started + 300
    while True:
        done = client.hgetall("bench:autoscale:done")
        if int(done.get("burst", 0)) >= burst and int(done.get("cpu", 0)) >= cpu:
            break
        if time.monotonic() > deadline:
            raise RuntimeError("the workload did not finish in 300 s")
        time.sleep(0.01)
    finish = time.monotonic() - started
    stop.set()
    feeder.join()
    while int(client.hget("bench:autoscale:done", "trickle") or 0) < sent_trickle:
        time.sleep(0.01)
    return finish, sent_trickle


def run_one(url: str, label: str, queues: list[str], extra: list[str], want: dict[str, int],
            args: argparse.Namespace, n: int) -> Result:  # fmt: skip
    import ztq.core as ztq
    from ztq.core import streams

    storage = ztq.connect(url)
    client = redis.Redis.from_url(url, decode_responses=True)
    client.delete("bench:autoscale:stamps", "bench:autoscale:done")
    name = f"bench-{n}"
    proc = start_worker(url, name, queues, extra)
    try:
        wait_ready(storage, name, proc, want)
        finish, _ = workload(url, args.burst, args.cpu, seed=n)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    result = Result(label, finish, {q: [] for q in QUEUES})
    for line in map(str, client.lrange("bench:autoscale:stamps", 0, -1)):
        queue, sent, begun, _ = line.split()
        result.waits[queue].append(float(begun) - float(sent))
    events = streams.stream_page(storage, "events", limit=2000).rows
    mine = [e for e in events if e.get("worker") == name and e.get("kind") == "autoscale"]
    result.decisions = sum(e.get("why") != "hold_cpu" and e.get("why") != "hold_memory"
                           for e in mine)  # fmt: skip
    result.holds = len(mine) - result.decisions
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.autoscale",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--budget", type=int, default=8, help="threads of every configuration")
    parser.add_argument("--burst", type=int, default=2000, help="I/O-bound tasks of the burst")
    parser.add_argument("--cpu", type=int, default=100, help="CPU-bound tasks (20 ms each)")
    parser.add_argument("--splits", choices=["grid", "all"], default="grid")
    parser.add_argument("--cpu-max", type=float, default=100.0,
                        help="the autoscaled worker's autoscale_cpu_max")  # fmt: skip
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from ztq.worker.embedded import RedisProcess

    b = args.budget
    configs: list[tuple[str, list[str], list[str], dict[str, int]]] = []
    for burst, trickle, cpu in splits(b, args.splits == "all"):
        configs.append((f"static {burst}/{trickle}/{cpu}",
                        [f"burst:{burst}", f"trickle:{trickle}", f"cpu:{cpu}"], [],
                        {"burst": burst, "trickle": trickle, "cpu": cpu}))  # fmt: skip
    configs.append(("autoscaled", [f"burst:1..{b}", f"trickle:1..{b}", f"cpu:0..{b}"],
                    ["--autoscale-threads-max", str(b), "--autoscale-cpu-max",
                     f"{args.cpu_max:g}"], {"burst": 1, "trickle": 1}))  # fmt: skip
    server = RedisProcess().start()
    results: dict[str, list[Result]] = {c[0]: [] for c in configs}
    n = 0
    started = time.monotonic()
    try:
        for rep in range(args.reps):
            for label, queues, extra, want in configs if rep % 2 == 0 else configs[::-1]:
                n += 1
                r = run_one(server.url, label, queues, extra, want, args, n)
                results[label].append(r)
                print(f"bench.autoscale: rep {rep + 1} {label}: finish {r.finish:.2f} s, "
                      f"p99 wait {r.p99() * 1000:.0f} ms"
                      + (f", {r.decisions} decisions, {r.holds} holds" if r.decisions or r.holds
                         else ""), flush=True)  # fmt: skip
    finally:
        server.stop()
    report(results, args, time.monotonic() - started)
    return 0


def report(results: dict[str, list[Result]], args: argparse.Namespace, took: float) -> None:
    def med(label: str, f: Any) -> float:
        return statistics.median(f(r) for r in results[label])

    print()
    print(f"## Autoscaled against static splits of {args.budget} threads "
          f"(burst of {args.burst:,} I/O tasks of 5–20 ms at 2 s, {args.cpu} CPU tasks of "
          f"20 ms at 0 s, an I/O task of 10 ms every 50 ms; median of {args.reps})")  # fmt: skip
    print()
    print("| threads burst/trickle/cpu | finish (s) | p99 wait, all (ms) | p99 burst | "
          "p99 trickle | p99 cpu |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for label in results:
        cells = [med(label, lambda r: r.finish)]
        cells += [med(label, lambda r, q=q: r.p99(q)) * 1000 for q in ("", *QUEUES)]
        print(f"| {label} | {cells[0]:.2f} | " + " | ".join(f"{c:,.0f}" for c in cells[1:]) + " |")
    statics = [label for label in results if label != "autoscaled"]
    best_finish = min(statics, key=lambda lb: med(lb, lambda r: r.finish))
    best_wait = min(statics, key=lambda lb: med(lb, lambda r: r.p99()))
    auto_finish = med("autoscaled", lambda r: r.finish)
    auto_wait = med("autoscaled", lambda r: r.p99())
    print()
    print(
        f"autoscaled / best static finish ({best_finish}): "
        f"{auto_finish / med(best_finish, lambda r: r.finish):.2f}"
    )
    print(
        f"autoscaled / best static p99 wait ({best_wait}): "
        f"{auto_wait / med(best_wait, lambda r: r.p99()):.2f}"
    )
    print(
        f"autoscaler decisions per run: {med('autoscaled', lambda r: r.decisions):.0f} "
        f"(ceiling holds: {med('autoscaled', lambda r: r.holds):.0f}); bench took {took:.0f} s"
    )


if __name__ == "__main__":
    raise SystemExit(main())
