"""Console benchmark: fill Redis at scale fast, then time every page (server time, in process).

    python -m tests.console.bench [--tasks 1000000] [--errors 100000] [--workers 100]

starts a private redis-server, fills it with pipelined raw writes in ztq's record layout
(keys from ``ztq.core.engine.keys``, heartbeats through ``ztq.core.engine.workers``), and
prints the median and worst time of each page over a few requests. :func:`fill` and
:func:`time_pages` can be
called from ``bench/`` too.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from collections.abc import Sequence
from typing import Any

from ztq.core.engine.record import payload_list, stored_record
from ztq.core.engine.storage import Storage
from ztq.core.engine.workers import log_event, write_heartbeat

TRACEBACK = (
    'Traceback (most recent call last):\n  File "/srv/app/jobs.py", line {line}, in convert\n'
    "    raise ConversionError(path)\nConversionError: cannot convert /data/in/{n}.pdf\n"
)


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def fill(
    storage: Storage,
    *,
    tasks: int = 1_000_000,
    errors: int = 100_000,
    workers: int = 100,
    history: int = 10_000,
    queues: Sequence[str] = ("default", "mail", "pdf", "reports"),
    chunk: int = 5_000,
) -> dict[str, int]:
    """Write ``tasks`` ready tasks and ``errors`` failed ones spread over ``queues``, finished
    runs into each queue's history, and ``workers`` heartbeats. Returns what was written."""
    k, client = storage.keys, storage.client
    now = int(time.time() * 1000)
    for q in queues:
        storage.queues.register_queue(q)

    def write(kind: str, total: int) -> None:
        for start in range(0, total, chunk):
            pipe = client.pipeline(transaction=False)
            by_queue: dict[str, tuple[dict[str, str], list[str], dict[str, int]]] = {}
            for n in range(start, min(total, start + chunk)):
                q = queues[n % len(queues)]
                mapping, ids, scores = by_queue.setdefault(q, ({}, [], {}))
                tid = f"{kind}-{n:09d}"
                payload = _json(payload_list(
                    "app.jobs.convert", [f"/data/in/{n}.pdf", {"dpi": 300, "pages": [1, 2, 3]}],
                    {"owner": f"user-{n % 977}"},
                ))  # fmt: skip
                if kind == "t":
                    meta = dict(state="queued", enqueued=now - (total - n))
                    ids.append(tid)
                else:
                    at = now - (total - n) * 7
                    meta = dict(
                        state="error", enqueued=at - 900, started=at - 800, ended=at, failed=at,
                        attempts=1, failed_worker=f"worker-{n % workers:03d}",
                        error=f"ConversionError: cannot convert /data/in/{n}.pdf",
                        traceback=TRACEBACK.format(line=40 + n % 5, n=n),
                    )  # fmt: skip
                    scores[tid] = at
                mapping[tid] = stored_record(meta, payload)
            for q, (mapping, ids, scores) in by_queue.items():
                pipe.hset(k.tasks(q), mapping=mapping)
                if ids:
                    pipe.rpush(k.ready(q, "normal"), *ids)
                if scores:
                    pipe.zadd(k.errors(q), scores)
            pipe.execute()

    write("t", tasks)
    write("e", errors)
    for q in queues:
        pipe = client.pipeline(transaction=False)
        for n in range(history):
            ended = now - (history - n) * 50
            pipe.xadd(
                k.history(q),
                {"id": f"h-{n}", "task": "app.jobs.convert", "status": "done" if n % 10 else
                 "failed", "worker": f"worker-{n % workers:03d}", "thread": "t0",
                 "enqueued": ended - 900, "started": ended - 600, "ended": ended,
                 "runtime_ms": 600, "summary": "" if n % 10 else "ConversionError: ..."},
                maxlen=history, approximate=True,
            )  # fmt: skip
            if n % 1000 == 999:
                pipe.execute()
                pipe = client.pipeline(transaction=False)
        pipe.execute()
    for w in range(workers):
        wid = f"worker-{w:03d}"
        q = queues[w % len(queues)]
        data = {
            "name": wid, "host": f"host-{w // 4}", "ip": f"10.0.{w // 250}.{w % 250}",
            "pid": 1000 + w, "cpu_percent": 37.5, "mem_total": 64 * 2**30, "mem_percent": 55.0,
            "rss": 300 * 2**20, "started": time.time() - 86400, "status": "running",
            "pool": ["thread"], "threads": {q: 4}, "config_editable": True,
            "current": {f"{q}-{i}": {"id": f"t-{w * 4 + i:09d}", "queue": q,
                                     "task": "app.jobs.convert", "started": time.time() - i}
                        for i in range(4)},
        }  # fmt: skip
        write_heartbeat(storage, wid, data)
        log_event(storage, "start", wid, f"started with {q}:4")
    return {"tasks": tasks, "errors": errors, "workers": workers, "history": history}


PAGES = (
    "/", "/trash", "/bulk/confirm?action=redo&source=errors&text=999",
    "/workers", "/workers/worker-000", "/queues", "/queues/default",
    "/queues/default?start=200000", "/errors", "/errors?queue=pdf", "/errors/groups",
    "/errors?task=convert&q=999", "/running", "/scheduled", "/history",
    "/history?status=failed", "/log", "/audit", "/search?q=e-000000008",
    "/search?q=user-976", "/tasks/e-000000004?queue=default", "/api/queues", "/api/workers",
    "/api/errors", "/api/history", "/metrics",
)  # fmt: skip


def time_pages(app: Any, pages: Sequence[str] = PAGES, rounds: int = 5) -> dict[str, list[float]]:
    """Seconds per request of each page through a signed-in WebTest app, ``rounds`` times."""
    out: dict[str, list[float]] = {}
    for url in pages:
        app.get(url)  # warm up
        runs = []
        for _ in range(rounds):
            start = time.perf_counter()
            app.get(url)
            runs.append(time.perf_counter() - start)
        out[url] = runs
    return out


def main(argv: Sequence[str] | None = None) -> None:
    from webtest import TestApp

    import ztq.core as ztq
    from tests.console.conftest import login
    from ztq.console import main as console
    from ztq.core.auth.passwords import hash_password
    from ztq.worker.embedded import RedisProcess

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--errors", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    server = RedisProcess().start()
    try:
        storage = ztq.connect(server.url)
        began = time.perf_counter()
        fill(storage, tasks=args.tasks, errors=args.errors, workers=args.workers)
        used = storage.client.info("memory")["used_memory_human"]
        print(f"filled in {time.perf_counter() - began:.1f} s; Redis uses {used}")
        gc.collect()  # the fill's garbage is not the console's (see bench/growth.py)
        settings = {
            "ztq.redis_url": server.url,
            "ztq.console.secret": "benchmark-secret-0123456789",
            "ztq.console.users": f"bench operator {hash_password('bench', n=1024)}",
        }
        app = login(TestApp(console({}, **settings)), "bench", "bench")
        print(f"{'page':<42} {'median ms':>10} {'worst ms':>10}")
        for url, runs in time_pages(app, rounds=args.rounds).items():
            print(f"{url:<42} {statistics.median(runs) * 1000:>10.1f} {max(runs) * 1000:>10.1f}")
    finally:
        server.cleanup()


if __name__ == "__main__":
    main()
