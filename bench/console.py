"""Point 7: the console at scale — fill Redis in ztq's stored format, time every GET route.

The filler writes records the way the Lua scripts do (``<meta JSON>\\n<payload JSON>`` in a
queue's ``tasks`` hash, ids in ``ready:normal``, failures in ``errors``, heartbeats in
``workers`` + ``seen``; see docs/design.md) with pipelined raw writes, so a million tasks
take seconds. A thread keeps the 100 workers heartbeating (every 3 s) while pages are
timed in-process through WebTest.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from bench.common import percentile
from ztq.core.engine.keys import Keys
from ztq.core.engine.record import payload_list, stored_record

QUEUES = {"default": 600_000, "mail": 300_000, "pdf": 100_000}
ERRORS = {"default": 70_000, "mail": 30_000}
ERROR_KINDS = ("ValueError: bad address", "TimeoutError: smtp", "KeyError: 'user'", "OSError: disk")
CHUNK = 1000
TRACEBACK = "Traceback (most recent call last):\n" + '  File "app/mail.py", line 10\n' * 20


def _id(queue: str, i: int) -> str:
    return hashlib.md5(f"{queue}:{i}".encode(), usedforsecurity=False).hexdigest()


def _record(meta: dict[str, Any], i: int) -> str:
    payload = payload_list("app.mail.send", [i, f"user{i}@example.org"])
    return stored_record(meta, json.dumps(payload, separators=(",", ":")))


def heartbeat(i: int, now: float, queues: list[str]) -> str:
    """One worker's heartbeat JSON, as ``Worker.describe`` + ``SysInfo.sample`` write it."""
    return json.dumps(
        {
            "name": f"bench-host-{i // 10}.{1000 + i}",
            "host": f"bench-host-{i // 10}",
            "ip": f"10.0.{i // 10}.{i % 10 + 1}",
            "pid": 1000 + i,
            "cpu_percent": 12.5,
            "mem_total": 8 << 30,
            "mem_percent": 40.0,
            "rss": 80 << 20,
            "started": now - 3600,
            "status": "running",
            "pool": ["thread"],
            "threads": {q: 2 for q in queues},
            "config_editable": True,
            "current": {
                f"{queues[0]}-0": {
                    "id": _id("running", i),
                    "queue": queues[0],
                    "task": "app.mail.send",
                    "started": now - 1,
                }
            },
            "done": 1000 * i,
            "failed": i,
        },
        separators=(",", ":"),
    )


def fill_queue(
    pipe: Any, queue: str, queued: int, errors: int, now_ms: int, prefix: str = "ztq"
) -> None:
    """Add ``queued`` ready tasks and ``errors`` failed ones to ``queue`` through ``pipe`` (a
    non-transactional pipeline), in the stored format; executes it every 40 chunks."""
    k = Keys(prefix)
    pipe.sadd(k.queues, queue)
    for start in range(0, queued, CHUNK):
        ids = [_id(queue, i) for i in range(start, min(queued, start + CHUNK))]
        meta = {"state": "queued", "enqueued": now_ms}
        mapping = {tid: _record(meta, start + n) for n, tid in enumerate(ids)}
        pipe.hset(k.tasks(queue), mapping=mapping)
        pipe.rpush(k.ready(queue, "normal"), *ids)
        if len(pipe) >= 40:
            pipe.execute()
    for start in range(0, errors, CHUNK):
        mapping, scores = {}, {}
        for i in range(start, min(errors, start + CHUNK)):
            tid, failed = _id(f"err-{queue}", i), now_ms - (errors - i) * 1000
            meta = {
                "state": "error",
                "enqueued": failed - 500,
                "attempts": 1,
                "started": failed - 100,
                "ended": failed,
                "failed": failed,
                "error": ERROR_KINDS[i % len(ERROR_KINDS)],
                "traceback": TRACEBACK,
                "failed_worker": f"bench-host-{i % 10}.{1000 + i % 100}",
            }
            mapping[tid], scores[tid] = _record(meta, i), failed
        pipe.hset(k.tasks(queue), mapping=mapping)
        pipe.zadd(k.errors(queue), scores)
        if len(pipe) >= 40:
            pipe.execute()


def fill(client: Any, workers: int = 100, prefix: str = "ztq") -> dict[str, int]:
    """Write the point-7 data set; returns what was written.

    ``client`` is a ``redis.Redis`` made with ``decode_responses=True``.
    """
    k = Keys(prefix)
    now_ms = int(time.time() * 1000)
    pipe = client.pipeline(transaction=False)
    for queue in QUEUES:
        fill_queue(pipe, queue, QUEUES[queue], ERRORS.get(queue, 0), now_ms, prefix)
    for queue in QUEUES:
        for i in range(10_000):
            pipe.xadd(
                k.history(queue),
                {"id": _id(queue, i), "task": "app.mail.send", "status": "done",
                 "worker": "bench-host-0.1000", "thread": f"{queue}-0", "enqueued": now_ms,
                 "started": now_ms, "ended": now_ms, "runtime_ms": 3, "summary": ""},
            )  # fmt: skip
            if len(pipe) >= 2000:
                pipe.execute()
        for minute in range(now_ms // 60_000 - 59, now_ms // 60_000 + 1):
            pipe.hset(k.stats(queue, minute), mapping={"done": 6000, "failed": 20})
    for i in range(workers):
        tid = _id("running", i)
        meta = {"state": "running", "enqueued": now_ms, "attempts": 1, "started": now_ms,
                "worker": f"bench-host-{i // 10}.{1000 + i}", "thread": "default-0"}  # fmt: skip
        pipe.hset(k.tasks("default"), tid, _record(meta, i))
        pipe.zadd(k.running("default"), {tid: now_ms + 15_000})
    for i in range(10_000):
        pipe.xadd(k.events, {"kind": "start", "worker": f"bench-host-0.{1000 + i % 100}",
                             "message": "pid 1000 serving default"})  # fmt: skip
    pipe.execute()
    beat(client, workers, prefix)
    return {"queued": sum(QUEUES.values()), "errors": sum(ERRORS.values()), "workers": workers}


def beat(client: Any, workers: int, prefix: str = "ztq") -> None:
    k = Keys(prefix)
    now = time.time()
    pipe = client.pipeline(transaction=False)
    for i in range(workers):
        wid = f"bench-host-{i // 10}.{1000 + i}"
        pipe.hset(k.workers, wid, heartbeat(i, now, list(QUEUES)))
        pipe.zadd(k.seen, {wid: int(now * 1000)})
    pipe.execute()


@dataclass
class RouteTimes:
    path: str
    status: int
    ms: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return percentile(self.ms, 50)

    @property
    def p99(self) -> float:
        return percentile(self.ms, 99)


def paths(client: Any, prefix: str = "ztq", queue: str = "default") -> list[str]:
    """The GET routes timed: every page and API of the console, a task from the middle of
    ``queue``'s ready list and its oldest error (when it has them)."""
    k = Keys(prefix)
    worker = sorted(client.hkeys(k.workers))[0]
    ready = k.ready(queue, "normal")
    task = client.lindex(ready, min(500_000, client.llen(ready) // 2))
    error = next(iter(client.zrange(k.errors(queue), 0, 0)), None)
    tasks = [f"/tasks/{task}", f"/api/tasks/{task}"] if task else []
    return [
        "/workers", f"/workers/{worker}", "/queues", f"/queues/{queue}", "/errors",
        "/errors/groups", "/running", "/scheduled", "/history", "/log", "/audit",
        *tasks[:1], *([f"/tasks/{error}?queue={queue}"] if error else []),
        "/search?q=user77%40example.org", "/search?state=error", "/api/workers", "/api/queues",
        "/api/errors", "/api/history", "/api/running", "/api/scheduled", "/api/log",
        *tasks[1:], "/metrics",
    ]  # fmt: skip


def time_routes(
    url: str, reps: int, workers: int = 100, queue: str = "default"
) -> list[RouteTimes]:
    """Build the console app on ``url``, log in, GET every route ``reps`` times."""
    from webtest import TestApp

    from ztq.console import main
    from ztq.core.auth.passwords import hash_password

    settings = {
        "ztq.redis_url": url,
        "ztq.console.secret": "bench-" + hashlib.sha256(url.encode()).hexdigest(),
        "ztq.console.users": f"bench operator {hash_password('bench-password-1')}",
    }
    app = TestApp(main({}, **settings))
    forms = app.get("/login").forms.values()
    form = next(f for f in forms if "username" in f.fields)
    form["username"], form["password"] = "bench", "bench-password-1"
    form.submit(status=303)
    client = redis.Redis.from_url(url, decode_responses=True)
    stop = threading.Event()

    def keep_beating() -> None:
        while not stop.wait(3.0):
            beat(client, workers)

    thread = threading.Thread(target=keep_beating, daemon=True)
    thread.start()
    out = []
    try:
        for path in paths(client, queue=queue):
            try:
                res = app.get(path, expect_errors=True)  # warm: templates compiled
            except Exception as exc:  # the console is young: report the route, go on
                out.append(RouteTimes(f"{path} ({type(exc).__name__})", 500))
                continue
            row = RouteTimes(path, res.status_int)
            if res.status_int < 400:
                for _ in range(reps):
                    t0 = time.perf_counter()
                    app.get(path)
                    row.ms.append((time.perf_counter() - t0) * 1000)
            out.append(row)
    finally:
        stop.set()
        thread.join()
        client.close()
    return out


def main(argv: list[str]) -> int:
    """``python -m bench.console URL REPS OUT.json``: fill, time, write the rows as JSON.

    ``run.py`` calls this in a fresh process, so the console is imported as the tree is now.
    """
    url, reps, out = argv[0], int(argv[1]), Path(argv[2])
    with redis.Redis.from_url(url, decode_responses=True) as client:
        fill(client)
    gc.collect()  # the fill's garbage is not the console's (see bench/growth.py)
    rows = time_routes(url, reps)
    out.write_text(json.dumps([dataclasses.asdict(r) for r in rows]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
