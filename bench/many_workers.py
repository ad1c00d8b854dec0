"""Many workers: 500 simulated workers heartbeating every 3 s against one Redis.

    python -m bench.many_workers [--workers 500] [--every 3] [--window 30] [--rounds 20]

Starts a private redis-server. A separate process plays the workers: one heartbeat (the
``heartbeat`` script, through ``ztq.core.engine.workers.write_heartbeat``) per worker every
``--every`` seconds, spread evenly, with the JSON a worker writes (host figures, four threads
over two queues, the tasks running now, which change from beat to beat). A few workers are
paused or stopping, a few stopped and a few went silent (lost: the console here counts a
worker lost after 10 s). Then:

1. for ``--window`` seconds only the heartbeats run: the Redis CPU share (``used_cpu_sys`` +
   ``used_cpu_user`` delta over wall time) and the heartbeat's cost (``INFO commandstats`` of
   EVALSHA: calls per second and microseconds of Redis time per call);
2. with the heartbeats still going, the console pages are timed in this process through
   WebTest against that Redis: median and p95 of ``--rounds`` requests each (server time).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import time
from collections.abc import Sequence
from typing import Any

from bench.common import percentile
from ztq.core.engine.record import payload_list, stored_record

QUEUES = ("default", "mail", "pdf", "reports")
LOST_AFTER = 10  # seconds (console setting of this run)


def worker_id(i: int) -> str:
    return f"host-{i // 8:03d}.{2000 + i}"


def role(i: int) -> str:
    """What worker ``i`` plays: most run; per hundred 5 paused, 2 stopping, 4 stopped, 5 lost."""
    n = i % 100
    if n < 5:
        return "paused"
    if n < 7:
        return "stopping"
    if n < 11:
        return "stopped"
    if n < 16:
        return "lost"
    return "running"


def task_id(i: int, j: int) -> str:
    return f"run-{i:05d}-{j}"


def queues_of(i: int) -> tuple[str, str]:
    return QUEUES[i % len(QUEUES)], QUEUES[(i + 1) % len(QUEUES)]


def heartbeat(i: int, beat: int, started: float, rng: random.Random) -> dict[str, Any]:
    """Worker ``i``'s heartbeat JSON, shaped like ``Worker.describe`` + ``SysInfo.sample``."""
    now = time.time()
    qa, qb = queues_of(i)
    status = {"lost": "running"}.get(role(i), role(i))
    current = {}
    for j, q in enumerate((qa, qa, qb, qb)):
        if status != "stopped" and rng.random() < 0.7:
            current[f"{q}-{j}"] = {
                "id": task_id(i, j),
                "queue": q,
                "task": "app.jobs.convert" if j % 2 else "app.mail.send",
                "started": now - rng.random() * 30,
            }
    return {
        "name": worker_id(i),
        "host": f"host-{i // 8:03d}",
        "ip": f"10.0.{i // 250}.{i % 250 + 1}",
        "pid": 2000 + i,
        "cpu_percent": round(rng.random() * 100, 1),
        "mem_total": 64 * 2**30,
        "mem_percent": round(40 + rng.random() * 20, 1),
        "rss": int((200 + rng.random() * 100) * 2**20),
        "started": started,
        "status": status,
        "pool": ["thread"],
        "threads": {} if status == "stopped" else {qa: 2, qb: 2},
        "config_editable": True,
        "current": current,
        "done": 1000 + beat * 3,
        "failed": beat // 10,
    }


def simulate(url: str, workers: int, every: float, ready: Any, stop: Any, calls: Any) -> None:
    """The worker fleet (runs in its own process): every worker beats once, then the ones
    that keep running beat every ``every`` seconds, spread evenly, until ``stop`` is set."""
    import ztq.core as ztq
    from ztq.core.engine.workers import write_heartbeat

    storage = ztq.connect(url)
    rng = random.Random(7)
    started = time.time() - 3600
    for i in range(workers):
        write_heartbeat(storage, worker_id(i), heartbeat(i, 0, started, rng))
    ready.set()
    beating = [i for i in range(workers) if role(i) not in ("stopped", "lost")]
    gap = every / max(1, len(beating))
    t0, beat, done = time.monotonic(), 1, 0
    while not stop.is_set():
        for n, i in enumerate(beating):
            due = t0 + (beat - 1) * every + n * gap
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if stop.is_set():
                break
            write_heartbeat(storage, worker_id(i), heartbeat(i, beat, started, rng))
            done += 1
            calls.value = done
        beat += 1


def plant(storage: Any, workers: int) -> None:
    """Records of the tasks the workers run (the pages show their progress), and a little
    of everything else a queue has."""
    k, client = storage.keys, storage.client
    now = int(time.time() * 1000)
    pipe = client.pipeline(transaction=False)
    for q in QUEUES:
        storage.queues.register_queue(q)
    for i in range(workers):
        qa, qb = queues_of(i)
        for j, q in enumerate((qa, qa, qb, qb)):
            meta = {"state": "running", "enqueued": now - 60_000, "started": now - 30_000,
                    "attempts": 1, "worker": worker_id(i), "thread": f"{q}-{j}",
                    "progress": json.dumps({"done": j * 10, "total": 100})}  # fmt: skip
            payload = json.dumps(
                payload_list("app.jobs.convert", [f"/data/{i}-{j}.pdf"]), separators=(",", ":")
            )
            record = stored_record(meta, payload)
            pipe.hset(k.tasks(q), task_id(i, j), record)
            pipe.zadd(k.running(q), {task_id(i, j): now + 600_000})
        if len(pipe) > 2000:
            pipe.execute()
    for q in QUEUES:
        ids = [f"ready-{q}-{n}" for n in range(1000)]
        record = stored_record({"state": "queued", "enqueued": now - 5000}, '["app.x",[]]')
        pipe.hset(k.tasks(q), mapping=dict.fromkeys(ids, record))
        pipe.rpush(k.ready(q, "normal"), *ids)
        for minute in range(now // 60_000 - 59, now // 60_000 + 1):
            pipe.hset(k.stats(q, minute), mapping={"done": 6000, "failed": 20})
    pipe.execute()


def redis_cost(client: Any, window: float, calls: Any) -> dict[str, float]:
    """Redis CPU share and the heartbeat script's cost over ``window`` seconds."""

    def sample() -> tuple[float, float, int, int, int]:
        cpu = client.info("cpu")
        stats = client.info("commandstats").get("cmdstat_evalsha", {})
        busy = float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])
        return time.monotonic(), busy, int(stats.get("calls", 0)), int(stats.get("usec", 0)), \
            int(calls.value)  # fmt: skip

    t0, cpu0, n0, us0, sim0 = sample()
    time.sleep(window)
    t1, cpu1, n1, us1, sim1 = sample()
    wall = t1 - t0
    n = max(1, n1 - n0)
    return {
        "window_s": wall,
        "redis_cpu_percent": 100 * (cpu1 - cpu0) / wall,
        "heartbeats_per_s": (sim1 - sim0) / wall,
        "evalsha_per_s": (n1 - n0) / wall,
        "us_per_heartbeat": (us1 - us0) / n,
    }


def pages(workers: int) -> list[str]:
    mid = worker_id(workers // 2)
    return [
        "/workers", "/workers?cursor=250", "/workers?status=lost", "/workers?status=running",
        f"/workers/{mid}", "/queues", "/api/workers", "/api/workers?cursor=250",
        "/api/queues", "/metrics",
    ]  # fmt: skip


def time_pages(app: Any, urls: Sequence[str], rounds: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for url in urls:
        app.get(url)  # templates compiled, connections open
        runs = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            app.get(url)
            runs.append((time.perf_counter() - t0) * 1000)
        out[url] = runs
    return out


def time_info(storage: Any, rounds: int) -> list[float]:
    """What ``ztq info --json`` computes: the queues and every worker (core/monitor/overview.py)."""
    from ztq.core.monitor import overview

    runs = []
    for _ in range(rounds + 1):
        t0 = time.perf_counter()
        overview.queues(storage, storage.queues.names(), LOST_AFTER)
        overview.workers(storage, LOST_AFTER)
        runs.append((time.perf_counter() - t0) * 1000)
    return runs[1:]


def main(argv: Sequence[str] | None = None) -> None:
    from webtest import TestApp

    import ztq.core as ztq
    from tests.console.conftest import login
    from ztq.console import main as console
    from ztq.core.auth.passwords import hash_password
    from ztq.worker.embedded import RedisProcess

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--workers", type=int, default=500)
    parser.add_argument("--every", type=float, default=3.0, help="heartbeat seconds")
    parser.add_argument("--window", type=float, default=30.0, help="seconds of CPU measure")
    parser.add_argument("--rounds", type=int, default=20, help="requests per page")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    server = RedisProcess().start()
    ctx = mp.get_context("spawn")
    ready, stop, calls = ctx.Event(), ctx.Event(), ctx.Value("q", 0)
    sim = ctx.Process(
        target=simulate, args=(server.url, args.workers, args.every, ready, stop, calls)
    )
    try:
        storage = ztq.connect(server.url)
        plant(storage, args.workers)
        sim.start()
        if not ready.wait(120):
            raise SystemExit("the simulated workers did not start")
        time.sleep(LOST_AFTER + 2)  # the silent ones are lost now
        cost = redis_cost(storage.client, args.window, calls)
        settings = {
            "ztq.redis_url": server.url,
            "ztq.console.secret": "benchmark-secret-0123456789",
            "ztq.console.users": f"bench operator {hash_password('bench', n=1024)}",
            "ztq.console.lost_after": str(LOST_AFTER),
        }
        app = login(TestApp(console({}, **settings)), "bench", "bench")
        times = time_pages(app, pages(args.workers), args.rounds)
        times["ztq info (data)"] = time_info(storage, args.rounds)
        used = storage.client.info("memory")["used_memory_human"]
    finally:
        stop.set()
        if sim.pid is not None:
            sim.join(10)
        server.cleanup()
    print(f"{args.workers} workers, a heartbeat every {args.every:g} s; Redis uses {used}")
    print(f"over {cost['window_s']:.1f} s: Redis CPU {cost['redis_cpu_percent']:.2f} % of a core,"
          f" {cost['heartbeats_per_s']:.1f} heartbeats/s ({cost['evalsha_per_s']:.1f} EVALSHA/s),"
          f" {cost['us_per_heartbeat']:.1f} µs of Redis time per heartbeat")  # fmt: skip
    print(f"{'page':<32} {'median ms':>10} {'p95 ms':>10}")
    for url, runs in times.items():
        print(f"{url:<32} {percentile(runs, 50):>10.1f} {percentile(runs, 95):>10.1f}")
    if args.json:
        figures = {url: {"median": percentile(r, 50), "p95": percentile(r, 95)}
                   for url, r in times.items()}  # fmt: skip
        with open(args.json, "w") as fh:
            json.dump({"workers": args.workers, **cost, "pages": figures}, fh, indent=1)


if __name__ == "__main__":
    main()
