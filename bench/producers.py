"""Producers at scale (issue 26): many threads, or many coroutines, enqueueing at once.

    python -m bench.producers [--reps 3] [--tasks 8000] [--quick] [--out docs/benchmarks.md]

Outside ``.venv-bench`` it re-executes itself there (``bench/env.py``). One private
redis-server; no worker runs. Threads: 1, 8 and 32 threads share ``--tasks`` no-op enqueues
of one library (each thread its share, one call per task), for ztq (``fn.delay``; its
``unique=False`` variant as a reference), huey (calling the task) and RQ
(``Queue.enqueue``). Coroutines: 1, 100 and 1,000 coroutines of one event loop share them,
for ztq (``await fn.adelay``) and arq (``await pool.enqueue_job``). The libraries run
interleaved, in a rotated order each repetition, so that the load of the (shared, 2-core)
machine falls on all of them alike. Per run: tasks per second (wall), each call's time
(p50, p99), the producer process's CPU per task, and Redis's CPU per task (the sum of
``INFO commandstats`` usec over the run). The section "Producers" of ``--out`` is rewritten
(inserted before "Where the time goes" when missing); the rest of the file is kept.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from bench import env
from bench.common import ROOT, median, percentile, write_section

THREADS = (1, 8, 32)
COROUTINES = (1, 100, 1000)
SLICES = 4  # each run is made of slices, the libraries taking turns: they share load phases
HEADING = "## Producers: concurrent enqueues"


@dataclass
class Run:
    rate: float
    p50: float  # ms per call
    p99: float
    cpu: float  # µs of producer CPU per task
    redis: float  # µs of Redis CPU per task


@dataclass
class Sample:
    """One slice of a run: each call's time (s), the wall time, the producer's CPU and
    Redis's (µs, commandstats) over it."""

    times: list[float]
    wall: float
    cpu: float
    redis_us: float


def merged(samples: list[Sample]) -> Run:
    """The run made of its interleaved slices."""
    times = [x for s in samples for x in s.times]
    n = len(times)
    wall = sum(s.wall for s in samples)
    cpu = sum(s.cpu for s in samples) / n * 1e6
    used = sum(s.redis_us for s in samples) / n
    return Run(n / wall, percentile(times, 50) * 1e3, percentile(times, 99) * 1e3, cpu, used)


@dataclass
class Results:
    runs: dict[tuple[str, int], list[Run]] = field(default_factory=dict)
    python: float = float("nan")  # µs of ztq's Python work per delay(), without Redis

    def add(self, label: str, n: int, run: Run) -> None:
        self.runs.setdefault((label, n), []).append(run)
        print(f"  {label:16s} x{n:<5d} {run.rate:9,.0f}/s  p50 {run.p50:6.3f} ms  p99 "
              f"{run.p99:6.3f} ms  cpu {run.cpu:5.1f} µs  redis {run.redis:5.1f} µs",
              flush=True)  # fmt: skip

    def med(self, label: str, n: int, what: str) -> float:
        return median([getattr(r, what) for r in self.runs.get((label, n), [])])

    def ratio(self, label: str, to: str, n: int) -> float:
        """The median of each repetition's ratio of rates (runs interleaved: paired)."""
        pairs = zip(self.runs.get((label, n), []), self.runs.get((to, n), []), strict=False)
        return median([a.rate / b.rate for a, b in pairs])

    def span(self, label: str, n: int) -> str:
        rates = sorted(r.rate for r in self.runs.get((label, n), []))
        if not rates:
            return "—"
        lo, hi = rates[0], rates[-1]
        return f"{median(rates):,.0f} ({lo:,.0f}–{hi:,.0f})"


def redis_usec(client: redis.Redis) -> float:
    stats = client.info("commandstats")
    return sum(float(v.get("usec", 0)) for v in stats.values())


# -- the thread producers ------------------------------------------------------------------------
def thread_peers() -> dict[str, tuple[Callable[[int], Any], int]]:
    """label -> (enqueue one no-op, the Redis database it writes)."""
    from bench.common import DB
    from bench.peers import huey_peer, rq_peer, ztq_peer

    ztq_peer.PEER._connect()
    return {
        "ztq": (ztq_peer.noop.delay, DB["ztq"]),
        "ztq unique=False": (ztq_peer.noop_any.delay, DB["ztq"]),
        "huey": (huey_peer.noop, DB["huey"]),
        "rq": (rq_peer.PEER.enqueue_noop, DB["rq"]),
    }


def run_threads(send: Callable[[int], Any], db: int, threads: int, n: int, url: str) -> Sample:
    admin = redis.Redis.from_url(f"{url}/{db}")
    admin.flushdb()
    for i in range(20):  # warm: connections, scripts, the queue's registration
        send(-1 - i)
    admin.config_resetstat()
    share = n // threads
    times: list[list[float]] = [[] for _ in range(threads)]
    start = threading.Barrier(threads + 1)

    def producer(t: int) -> None:
        mine, clock = times[t], time.perf_counter
        base = t * share
        start.wait()
        for i in range(base, base + share):
            t0 = clock()
            send(i)
            mine.append(clock() - t0)

    pool = [threading.Thread(target=producer, args=(t,)) for t in range(threads)]
    for p in pool:
        p.start()
    cpu0 = time.process_time()
    start.wait()
    t0 = time.perf_counter()
    for p in pool:
        p.join()
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    used = redis_usec(admin)
    admin.close()
    return Sample([x for ts in times for x in ts], wall, cpu, used)


# -- the coroutine producers ---------------------------------------------------------------------
async def _ztq_async(n: int, coros: int, url: str) -> Sample:
    from bench.peers.ztq_peer import noop

    for i in range(20):
        await noop.adelay(-1 - i)
    return await _gather(lambda i: noop.adelay(i), n, coros, url, 1)


async def _arq_async(n: int, coros: int, url: str) -> Sample:
    from arq import create_pool

    from bench.peers.arq_peer import SETTINGS

    pool = await create_pool(SETTINGS)
    # redis-py's async pool stops at 100 connections by default ("Too many connections"),
    # and arq takes one per enqueue in flight: give it one per coroutine
    pool.connection_pool.max_connections = max(pool.connection_pool.max_connections, coros + 10)
    for i in range(20):
        await pool.enqueue_job("noop", -1 - i)
    try:
        return await _gather(lambda i: pool.enqueue_job("noop", i), n, coros, url, 6)
    finally:
        await pool.aclose()


async def _gather(send: Callable[[int], Any], n: int, coros: int, url: str, db: int) -> Sample:
    admin = redis.Redis.from_url(f"{url}/{db}")
    admin.config_resetstat()
    share = n // coros
    times: list[float] = []

    async def producer(c: int) -> None:
        clock = time.perf_counter
        for i in range(c * share, (c + 1) * share):
            t0 = clock()
            await send(i)
            times.append(clock() - t0)

    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(producer(c) for c in range(coros)))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    used = redis_usec(admin)
    admin.close()
    return Sample(times, wall, cpu, used)


def run_coroutines(label: str, coros: int, n: int, url: str) -> Sample:
    from bench.common import DB

    admin = redis.Redis.from_url(f"{url}/{DB[label]}")
    admin.flushdb()
    admin.close()
    go = _ztq_async if label == "ztq" else _arq_async
    return asyncio.run(go(n, coros, url))


def python_cost(n: int = 20000) -> float:
    """µs of this process's CPU per ``fn.delay()`` with the script call answered at once
    (no Redis, no socket): ztq's Python work per one-by-one enqueue."""
    from bench.peers.ztq_peer import noop
    from ztq.core import get_storage

    storage = get_storage()
    storage.call = lambda name, keys, args: [args[0], "added"]  # type: ignore[method-assign]
    try:
        t0 = time.process_time()
        for i in range(n):
            noop.delay(i)
        return (time.process_time() - t0) / n * 1e6
    finally:
        del storage.call


# -- the report ----------------------------------------------------------------------------------
def section(res: Results, args: argparse.Namespace, load: str, machine: dict[str, str]) -> str:
    lines = [
        HEADING,
        "",
        f"`python -m bench.producers` (part of `make bench`): {args.tasks:,} no-op enqueues "
        "per run, no worker running, one private redis-server; the libraries interleaved "
        f"(rotated order, {args.reps} repetitions) on this {machine['nproc']}-core machine "
        f"({machine['cpu']}, Python {machine['python']}, Redis {machine['redis']}; load "
        f"average {load} at the start — other jobs shared the machine, and interleaving "
        f"makes them weigh on every library alike: each run is {SLICES} slices, the libraries "
        "taking turns slice by slice). Rate: median (min–max) of the runs; ratio: the median "
        "of each repetition's ratio (paired runs); per call: medians of each run's p50 and "
        "p99; CPU: the producer process's CPU per task; Redis: Redis's CPU per task "
        "(`INFO commandstats` usec over the run).",
        "",
        "### Threads",
        "",
        "| producers | library | tasks/s | ratio to huey | per call p50 / p99 | CPU / task | "
        "Redis / task |",
        "|---|---|---|---|---|---|---|",
    ]
    for threads in THREADS:
        for label in ("ztq", "ztq unique=False", "huey", "rq"):
            if (label, threads) not in res.runs:
                continue
            ratio = res.ratio(label, "huey", threads)
            lines.append(
                f"| {threads} thread{'s' if threads > 1 else ''} | {label} | "
                f"{res.span(label, threads)} | {ratio:.2f}× | "
                f"{res.med(label, threads, 'p50'):.3f} / {res.med(label, threads, 'p99'):.3f} ms"
                f" | {res.med(label, threads, 'cpu'):.0f} µs | "
                f"{res.med(label, threads, 'redis'):.1f} µs |"
            )
    lines += [
        "",
        "### Coroutines (one event loop)",
        "",
        "| producers | library | tasks/s | ratio to arq | per call p50 / p99 | CPU / task | "
        "Redis / task |",
        "|---|---|---|---|---|---|---|",
    ]
    for coros in COROUTINES:
        for label in ("ztq (asyncio)", "arq (asyncio)"):
            if (label, coros) not in res.runs:
                continue
            ratio = res.ratio(label, "arq (asyncio)", coros)
            lines.append(
                f"| {coros} coroutine{'s' if coros > 1 else ''} | {label} | "
                f"{res.span(label, coros)} | {ratio:.2f}× | "
                f"{res.med(label, coros, 'p50'):.3f} / {res.med(label, coros, 'p99'):.3f} ms"
                f" | {res.med(label, coros, 'cpu'):.0f} µs | "
                f"{res.med(label, coros, 'redis'):.1f} µs |"
            )
    lines += [
        "",
        f"ztq's Python work per `delay()` with the script call answered at once (no Redis, "
        f"no socket): {res.python:.1f} µs of CPU (median of 3 × 20,000 calls).",
        "",
        *NOTES,
        "",
    ]
    return "\n".join(lines)


# what the figures mean: from the profiles of issue 26's change (bench/producers.py)
NOTES = [
    "**How ztq shares round trips.** Concurrent `delay()` calls of one process to one "
    "Redis are coalesced (`core/client/coalesce.py`): a caller that finds nothing in flight "
    "sends its own call at once, from its own thread; callers that arrive meanwhile queue, "
    "and when the flight ends the first of them sends them all in one round trip (one "
    "`FCALL` each, pipelined) and wakes each with its own reply. asyncio does the same per "
    "event loop (`AsyncCoalescer`, prebuilt `FCALL` commands on one connection).",
    "",
    "**Where the time goes.** Per one-by-one enqueue ztq's Python work is the figure above "
    "(argument check, JSON, the id's MD5, framing the command, the handle); the rest of the "
    "CPU column is the socket calls and, with threads, the wake-ups. In Redis an enqueue is "
    "one `FCALL` of ~8 inner commands (`TIME`, two `HMGET`, `GET`, `HSET`, `RPUSH`, `LLEN` "
    "and `LPUSH` of a wake token): against huey's one `LPUSH` it costs Redis 10–20× more "
    "(the Redis column; an empty function with the same 18 keys costs a fifth of it, so the "
    "rest is the script's own work). With threads, a coalesced batch carries about half the "
    "threads (the others make their next call while it flies), so the rate is one batch per "
    "round trip plus one wake-up of the thread that sends the next batch.",
    "",
    "**The floor of a script.** The Redis column counts the commands a script runs twice "
    "(in the script's time and as their own). Called one by one, as a lone thread calls it, "
    "on this machine (Redis 7.0, median of 5 × 3,000 calls): an empty function with the "
    "enqueue's 18 keys and 9 arguments costs 7.5 µs, a 4-command enqueue (`TIME`, `HMGET`, "
    "`HSET`, `RPUSH`) 18 µs, ztq's enqueue 29 µs; without its waiter read and wake token "
    "27 µs. huey's `LPUSH` costs about 1 µs. So a one-thread producer stays behind a "
    "one-command enqueue while each enqueue is one script (the atomic state move that dedup, "
    "limits, the hand-over and the record need): the gap in per-call p50 is the gap in that "
    "column.",
    "",
    "**On a loaded machine** (load average well above the core count, as here) a woken "
    "thread waits for a CPU, and the batches of one process form a chain: each waits for "
    "the thread that sends it to be scheduled, while eight huey threads wait in parallel. "
    "The thread rows above are from such a machine; side-by-side runs in the same hour "
    "varied by 2–4× from one run to the next, for every library. A `py-spy --gil` profile "
    "of 8 coalescing threads there: of the time a ztq thread held the GIL, ~85 % went to "
    "`Lock.release()`, waking the callers of the batch just answered and the next batch's "
    "sender (a futex wake made while holding the GIL, slow when the machine is "
    "oversubscribed), ~10 % to the enqueue's own Python work. huey's threads are woken by "
    "the kernel when their reply arrives, outside the GIL. The asyncio rows have no such "
    "wake-ups: a batch's replies resolve futures on the one loop.",
    "",
    "arq's connection pool is raised to one connection per coroutine for these runs: arq "
    "takes a connection per enqueue in flight, and redis-py's async pool stops at 100 "
    '("Too many connections" at 1,000 coroutines otherwise).',
]


def write(out: Path, text: str) -> None:
    """Replace the section in ``out``, or insert it before "Where the time goes"."""
    write_section(out, HEADING, text, before="## Where the time goes")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m bench.producers", description=__doc__)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=8000)
    ap.add_argument("--quick", action="store_true", help="1 repetition, 2,000 tasks")
    ap.add_argument("--threads-only", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args(argv)
    if not env.inside():
        env.ensure_venv()
        os.execv(str(env.PYTHON), [str(env.PYTHON), "-m", "bench.producers", *argv])
    if args.quick:
        args.reps, args.tasks = 1, 2000
    from ztq.worker.embedded import RedisProcess

    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    server = RedisProcess().start()
    url = f"redis://127.0.0.1:{server.port}"
    os.environ["BENCH_REDIS"] = url
    res = Results()
    try:
        peers = thread_peers()
        for rep in range(args.reps):
            print(f"bench.producers: repetition {rep + 1} of {args.reps}", flush=True)
            for threads in THREADS:
                labels = list(peers)
                k = rep % len(labels)
                labels = labels[k:] + labels[:k]
                slices: dict[str, list[Sample]] = {label: [] for label in labels}
                for _ in range(SLICES):  # the libraries take turns, a slice each
                    for label in labels:
                        send, db = peers[label]
                        n = args.tasks // 2 if label == "rq" else args.tasks  # RQ: ~4k/s
                        slices[label].append(run_threads(send, db, threads, n // SLICES, url))
                for label in labels:
                    res.add(label, threads, merged(slices[label]))
            if args.threads_only:
                continue
            for coros in COROUTINES:
                labels = ["ztq", "arq"] if rep % 2 == 0 else ["arq", "ztq"]
                slices = {label: [] for label in labels}
                for _ in range(SLICES):
                    for label in labels:
                        n = min(args.tasks, 2000) if coros == 1 else args.tasks
                        share = max(coros, n // SLICES)  # a call per coroutine at least
                        slices[label].append(run_coroutines(label, coros, share, url))
                for label in labels:
                    res.add(f"{label} (asyncio)", coros, merged(slices[label]))
        info = redis.Redis.from_url(url).info("server")
        res.python = median([python_cost() for _ in range(3)])
        print(f"  ztq Python work per delay() without Redis: {res.python:.1f} µs", flush=True)
        text = section(res, args, load, env.machine(str(info["redis_version"])))
    finally:
        server.cleanup()
    print(text)
    if not args.no_write:
        write(Path(args.out), text)
        print(f"bench.producers: wrote the section to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
