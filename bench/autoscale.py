"""The autoscaler against static splits of the same threads, on two workloads.

    python -m bench.autoscale [--reps 2] [--budget 8] [--scenario shift|mixed|both]
                              [--splits grid|all]

One private redis-server; for each configuration in turn one worker process (``ztq
worker``, heartbeat 1 s) and the same workload, sent by this producer on a fixed schedule
(the same for every configuration):

- **shift** (the load moves, what autoscaling is for): at 0 s a burst of ``--burst`` I/O-bound
  tasks of 20 to 80 ms (``--io-ms``) on ``a`` and 100 CPU-bound tasks of 20 ms on ``d``; at
  3 s a burst of ``--burst`` I/O-bound tasks on ``b``; throughout, one I/O-bound task of
  10 ms every 50 ms on ``c``.
- **mixed** (all at once): at 0 s 100 CPU-bound tasks on ``cpu``; throughout, the trickle
  on ``trickle``; at 2 s a burst of 1,500 I/O-bound tasks on ``burst``.

A static split gives every queue a count, at least one thread each, ``--budget`` in all.
The grid (``--splits all``: every such split): for shift, ``c`` and ``d`` one thread each
and ``a``/``b`` every split of the rest with two threads or more each (all 35 splits,
measured once: 3/3/1/1 was the best, a burst on one thread takes twice as long); for
mixed, ``trickle`` and ``cpu`` three threads together at most, the burst the rest (4/2/2
came last in every measurement). The autoscaled worker runs every queue as ``1..B`` (B the
budget: the same floor as every static split, the same range for every queue; ``--low 0``:
``0..B``) with
``--autoscale-threads-max B``, twice: its CPU ceiling off (``--autoscale-cpu-max 100``)
and at the default 85 %. Fairness: the database is flushed before every run (no run
inherits the run times of the one before: the autoscaler starts blind), and the order of
the configurations is reversed every other repetition. Measured: the finish (from 0 s
until the last task but the trickle's ended), the p99 of the waiting time (sent → started)
of every task and per queue; the autoscaler's decisions and ceiling holds are counted
from the worker log.
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

TRICKLE_EVERY = 0.05
CPU_MS = 20.0
HEARTBEAT = 1.0
AUTO = "autoscaled"
AUTO_CEILING = "autoscaled, CPU ceiling 85 %"


@dataclass(frozen=True)
class Scenario:
    name: str
    queues: tuple[str, ...]
    trickle: str  # the queue of the steady trickle (not waited for at the end)
    sends: tuple[tuple[float, str, str, int], ...]  # (seconds, queue, "io" or "cpu", tasks)
    title: str
    io_ms: tuple[float, float] = (5.0, 20.0)  # the I/O-bound tasks' waits, a seeded draw

    def grid(self, budget: int, every: bool) -> list[dict[str, int]]:
        """The static splits: at least one thread a queue, ``budget`` in all."""
        out: list[dict[str, int]] = []

        def fill(prefix: list[int], left: int) -> None:
            if len(prefix) == len(self.queues) - 1:
                if left >= 1:
                    out.append(dict(zip(self.queues, [*prefix, left], strict=True)))
                return
            for n in range(1, left):
                fill([*prefix, n], left - n)

        fill([], budget)
        return out if every else [s for s in out if self.in_grid(s)]

    def in_grid(self, split: dict[str, int]) -> bool:
        if self.name == "shift":  # a burst on one thread alone takes twice as long
            return split["c"] == split["d"] == 1 and min(split["a"], split["b"]) >= 2
        # 4/2/2 came last in every measurement: the burst needs the threads
        return split["trickle"] + split["cpu"] <= 3


def scenarios(burst: int, io_ms: tuple[float, float]) -> dict[str, Scenario]:
    return {
        "shift": Scenario(
            "shift",
            ("a", "b", "c", "d"),
            "c",
            ((0.0, "a", "io", burst), (0.0, "d", "cpu", 100), (3.0, "b", "io", burst)),
            f"the load shifts: {burst:,} I/O tasks of {io_ms[0]:g}–{io_ms[1]:g} ms on a and 100 "
            "CPU tasks of 20 ms "
            f"on d at 0 s, {burst:,} I/O tasks on b at 3 s, an I/O task of 10 ms every 50 ms "
            "on c",
            io_ms,
        ),  # fmt: skip
        "mixed": Scenario(
            "mixed",
            ("burst", "trickle", "cpu"),
            "trickle",
            ((0.0, "cpu", "cpu", 100), (2.0, "burst", "io", 1500)),
            "all at once: 100 CPU tasks of 20 ms on cpu at 0 s, 1,500 I/O tasks of 5–20 ms on "
            "burst at 2 s, an I/O task of 10 ms every 50 ms on trickle",
        ),  # fmt: skip
    }


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
    from ztq.core.engine.workers import get_worker

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


def workload(url: str, sc: Scenario, seed: int) -> float:
    """Send the scenario's tasks; return the finish (seconds) once all but the trickle ran,
    after the trickle's last task ran too."""
    import ztq.core as ztq
    from ztq.core.client.calls import TaskCall

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
            send("bench.autoscale.io", sc.trickle, [10.0])
            sent_trickle += 1
            next_at += TRICKLE_EVERY
            stop.wait(max(0.0, next_at - time.monotonic()))

    started = time.monotonic()
    feeder = threading.Thread(target=trickle, daemon=True)
    feeder.start()
    expected: dict[str, int] = {}
    for at, queue, kind, count in sorted(sc.sends):
        time.sleep(max(0.0, at - (time.monotonic() - started)))
        if kind == "cpu":
            send("bench.autoscale.cpu", queue, [CPU_MS] * count)
        else:
            draws = [rng.uniform(*sc.io_ms) for _ in range(count)]
            for lo in range(0, count, 500):
                send("bench.autoscale.io", queue, draws[lo : lo + 500])
        expected[queue] = expected.get(queue, 0) + count
    deadline = started + 300
    while True:
        done = client.hgetall("bench:autoscale:done")
        if all(int(done.get(q, 0)) >= n for q, n in expected.items()):
            break
        if time.monotonic() > deadline:
            raise RuntimeError("the workload did not finish in 300 s")
        time.sleep(0.01)
    finish = time.monotonic() - started
    stop.set()
    feeder.join()
    while int(client.hget("bench:autoscale:done", sc.trickle) or 0) < sent_trickle:
        time.sleep(0.01)
    return finish


def run_one(url: str, sc: Scenario, label: str, queues: list[str], extra: list[str],
            want: dict[str, int], n: int) -> Result:  # fmt: skip
    import ztq.core as ztq
    from ztq.core.monitor import streams

    client = redis.Redis.from_url(url, decode_responses=True)
    client.flushdb()  # no run inherits the run times (or anything else) of the one before
    storage = ztq.connect(url)
    name = f"bench-{n}"
    proc = start_worker(url, name, queues, extra)
    try:
        wait_ready(storage, name, proc, want)
        finish = workload(url, sc, seed=n)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    result = Result(label, finish, {q: [] for q in sc.queues})
    for line in map(str, client.lrange("bench:autoscale:stamps", 0, -1)):
        queue, sent, begun, _ = line.split()
        result.waits[queue].append(float(begun) - float(sent))
    events = streams.stream_page(storage, "events", limit=2000).rows
    mine = [e for e in events if e.get("worker") == name and e.get("kind") == "autoscale"]
    result.holds = sum(str(e.get("why", "")).startswith("hold_") for e in mine)
    result.decisions = len(mine) - result.holds
    return result


Config = tuple[str, list[str], list[str], dict[str, int]]


def configs_of(sc: Scenario, budget: int, every: bool, low: int = 1) -> list[Config]:
    out: list[Config] = []
    for split in sc.grid(budget, every):
        out.append(("static " + "/".join(str(split[q]) for q in sc.queues),
                    [f"{q}:{n}" for q, n in split.items()], [], split))  # fmt: skip
    ranges = [f"{q}:{low}..{budget}" for q in sc.queues]
    ones = dict.fromkeys(sc.queues, low)
    for label, cpu_max in ((AUTO, "100"), (AUTO_CEILING, "85")):
        out.append((label, ranges, ["--autoscale-threads-max", str(budget),
                                    "--autoscale-cpu-max", cpu_max], ones))  # fmt: skip
    return out


def bench(url: str, sc: Scenario, args: argparse.Namespace, first: int) -> dict[str, list[Result]]:
    configs = configs_of(sc, args.budget, args.splits == "all", args.low)
    results: dict[str, list[Result]] = {c[0]: [] for c in configs}
    n = first
    for rep in range(args.reps):
        for label, queues, extra, want in configs if rep % 2 == 0 else configs[::-1]:
            n += 1
            r = run_one(url, sc, label, queues, extra, want, n)
            results[label].append(r)
            print(f"bench.autoscale {sc.name}: rep {rep + 1} {label}: finish {r.finish:.2f} s, "
                  f"p99 wait {r.p99() * 1000:.0f} ms"
                  + (f", {r.decisions} decisions, {r.holds} holds" if r.decisions or r.holds
                     else ""), flush=True)  # fmt: skip
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.autoscale",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--budget", type=int, default=8, help="threads of every configuration")
    parser.add_argument("--burst", type=int, default=300, help="I/O tasks of each shift burst")
    parser.add_argument("--io-ms", type=float, nargs=2, default=[20.0, 80.0],
                        help="the shift's I/O-bound tasks wait between these ms")  # fmt: skip
    parser.add_argument("--low", type=int, default=1, help="the autoscaled ranges' minimum")
    parser.add_argument("--scenario", choices=["shift", "mixed", "both"], default="both")
    parser.add_argument("--splits", choices=["grid", "all"], default="grid")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from ztq.worker.embedded import RedisProcess

    every = scenarios(args.burst, (args.io_ms[0], args.io_ms[1]))
    chosen = list(every) if args.scenario == "both" else [args.scenario]
    server = RedisProcess().start()
    started = time.monotonic()
    out = {}
    try:
        for i, name in enumerate(chosen):
            out[name] = bench(server.url, every[name], args, first=1000 * i)
    finally:
        server.stop()
    for name, results in out.items():
        report(every[name], results, args)
    print(f"\nbench.autoscale took {time.monotonic() - started:.0f} s")
    return 0


def report(sc: Scenario, results: dict[str, list[Result]], args: argparse.Namespace) -> None:
    def med(label: str, f: Any) -> float:
        return statistics.median(f(r) for r in results[label])

    def spread(label: str, f: Any) -> float:
        values = [f(r) for r in results[label]]
        return (max(values) - min(values)) / statistics.median(values)

    finish, wait = (lambda r: r.finish), (lambda r: r.p99())
    print()
    print(f"## {sc.name}: autoscaled against static splits of {args.budget} threads "
          f"({sc.title}; median of {args.reps})")  # fmt: skip
    print()
    print(f"| threads {'/'.join(sc.queues)} | finish (s) | p99 wait, all (ms) | "
          + " | ".join(f"p99 {q}" for q in sc.queues) + " | spread finish, p99 |")  # fmt: skip
    print("|---|---|---|" + "---|" * len(sc.queues) + "---|")
    for label in results:
        cells = [med(label, lambda r, q=q: r.p99(q)) * 1000 for q in ("", *sc.queues)]
        print(f"| {label} | {med(label, finish):.2f} | "
              + " | ".join(f"{c:,.0f}" for c in cells)
              + f" | {spread(label, finish):.0%}, {spread(label, wait):.0%} |")  # fmt: skip
    statics = [label for label in results if label.startswith("static")]
    best_finish = min(statics, key=lambda lb: med(lb, finish))
    best_wait = min(statics, key=lambda lb: med(lb, wait))
    print()
    for auto in (AUTO, AUTO_CEILING):
        print(f"{auto} / best static: finish {med(auto, finish) / med(best_finish, finish):.2f} "
              f"({best_finish}), p99 wait {med(auto, wait) / med(best_wait, wait):.2f} "
              f"({best_wait}); {med(auto, lambda r: r.decisions):.0f} decisions a run, "
              f"{med(auto, lambda r: r.holds):.0f} ceiling holds")  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
