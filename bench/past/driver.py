"""One measurement of one tree, run by that tree's own venv: ``python -m bench.past.driver``.

The orchestrator (``python -m bench.past``) copies this module and ``tasks.py`` into a folder
of their own and runs them with each side's python, so everything here works with the ztq of
the oldest ref compared: only ``connect``, ``task``, ``transaction``, ``delay``/``adelay``,
``python -m ztq.worker`` and the console's WSGI app, plus the key names of the tree's own
``Keys`` class (found at either of the paths it has lived at) to count what is left in a
queue. Of the rest of ``bench`` only ``bench/common.py`` is copied with it (it needs no more
than redis-py).

argv[1] is a JSON object: ``what`` (the measure), ``url`` (the side's private redis-server,
``redis://127.0.0.1:PORT``; ztq uses database 1, the stamps database 0) and the measure's
sizes. The last line printed is a JSON object: ``values`` (figure -> number), and ``na``
(figure or ``*`` -> why it could not be measured on this tree).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from bench.common import percentile

TASKS = "bench.past.tasks"
POLL = 0.005  # seconds between progress polls of a draining queue
WAIT = 120.0  # the most a worker may take to start, or a queue to drain


class Unsupported(Exception):
    """This tree lacks what the measure needs: its figures are n/a, the run goes on."""


def ztq_url(a: dict[str, Any]) -> str:
    return f"{a['url']}/1"


def setup(a: dict[str, Any]) -> redis.Redis:
    """Connect ztq to the side's server and empty it; a plain client for the figures."""
    from ztq.core import connect

    admin = redis.Redis.from_url(a["url"] + "/0", decode_responses=True)
    admin.flushall()
    connect(ztq_url(a))
    return admin


def keys() -> Any:
    for module in ("ztq.core.engine.keys", "ztq.core.keys"):
        try:
            return importlib.import_module(module).Keys("ztq")
        except ImportError:
            continue
    raise Unsupported("no Keys class to count a queue with")


def left(client: redis.Redis, queue: str) -> int:
    """Tasks of ``queue`` not finished: ready at any priority, or running."""
    from ztq.core.states import PRIORITIES

    k = keys()
    pipe = client.pipeline(transaction=False)
    for p in PRIORITIES:
        pipe.llen(k.ready(queue, p))
    pipe.zcard(k.running(queue))
    return sum(int(x) for x in pipe.execute())


def fill(fn: Any, start: int, n: int) -> None:
    """Queue ``fn(start..start+n-1)`` in transactions of 5,000 (one pipeline each)."""
    from ztq.core import transaction

    for chunk in range(start, start + n, 5000):
        with transaction():
            for i in range(chunk, min(start + n, chunk + 5000)):
                fn.delay(i)


def worker(a: dict[str, Any], queue: str) -> subprocess.Popen[bytes]:
    """``python -m ztq.worker`` of this tree, its output appended to ``a['log']``."""
    cmd = [
        sys.executable,
        "-m",
        "ztq.worker",
        "--redis",
        ztq_url(a),
        "--queue",
        queue,
        "--import",
        TASKS,
    ]
    env = {**os.environ, "ZTQ_PAST_STAMPS": a["url"] + "/0"}
    with open(a["log"], "ab") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, and SIGKILL after half a second: the figure is taken, and an idle worker with
    several threads may take seconds to stop (the next measure empties Redis anyway)."""
    proc.terminate()
    try:
        proc.wait(timeout=0.5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_until(check: Callable[[], bool], proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        if proc.poll() is not None:
            raise RuntimeError(f"the worker exited ({proc.returncode}) {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out {what}")
        time.sleep(POLL)


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


# -- the measures ----------------------------------------------------------------------------
def probe(a: dict[str, Any]) -> dict[str, Any]:
    """Where this side's ztq comes from, and the versions that weigh on the figures."""
    import ztq.core

    versions = {}
    for name in ("redis", "hiredis"):
        try:
            versions[name] = importlib.import_module(name).__version__
        except (ImportError, AttributeError):
            versions[name] = "not installed"
    return {"ztq": os.path.dirname(ztq.core.__file__), **versions}


def enqueue(a: dict[str, Any]) -> dict[str, Any]:
    """``noop.delay(i)`` from ``threads`` threads sharing ``n`` calls: tasks/s (wall), each
    call's time (p50, p99 ms); with ``memory``, the server's ``used_memory`` growth per task."""
    from bench.past import tasks

    admin = setup(a)
    threads, n = a["threads"], a["n"]
    share = n // threads
    times: list[list[float]] = [[] for _ in range(threads)]
    warmed, start = threading.Barrier(threads + 1), threading.Barrier(threads + 1)
    failed: list[BaseException] = []
    before = 0

    def producer(t: int) -> None:
        send, mine, clock = tasks.noop.delay, times[t], time.perf_counter
        try:
            for i in range(max(2, a["warm"] // threads)):  # connections made, scripts loaded
                send(-1 - t * 10_000 - i)
            warmed.wait()
            start.wait()
            for i in range(t * share, (t + 1) * share):
                t0 = clock()
                send(i)
                mine.append(clock() - t0)
        except BaseException as exc:  # the first error is the figure's; the others wait
            failed.append(exc)
            warmed.abort()
            start.abort()

    pool = [threading.Thread(target=producer, args=(t,)) for t in range(threads)]
    for p in pool:
        p.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        warmed.wait()
        time.sleep(0.1)
        before = used_memory(admin)
        start.wait()
    t0 = time.perf_counter()
    for p in pool:
        p.join()
    if failed:
        raise failed[0]
    wall = time.perf_counter() - t0
    calls = [x for ts in times for x in ts]
    out = {
        "rate": len(calls) / wall,
        "p50": percentile(calls, 50) * 1e3,
        "p99": percentile(calls, 99) * 1e3,
    }
    if a.get("memory"):
        out["bytes"] = (used_memory(admin) - before) / len(calls)
    return {"values": out}


def enqueue_async(a: dict[str, Any]) -> dict[str, Any]:
    """``await noop.adelay(i)`` from ``coros`` coroutines of one event loop sharing ``n``."""
    from bench.past import tasks

    if not hasattr(tasks.noop, "adelay"):
        raise Unsupported("no asyncio enqueue (adelay)")
    setup(a)
    coros, n = a["coros"], a["n"]
    share = n // coros
    times: list[float] = []

    async def producer(c: int) -> None:
        clock = time.perf_counter
        for i in range(c * share, (c + 1) * share):
            t0 = clock()
            await tasks.noop.adelay(i)
            times.append(clock() - t0)

    async def run() -> float:
        await asyncio.gather(*(tasks.noop.adelay(-1 - c) for c in range(min(coros, 20))))
        t0 = time.perf_counter()
        await asyncio.gather(*(producer(c) for c in range(coros)))
        return time.perf_counter() - t0

    wall = asyncio.run(run())
    values = {
        "rate": len(times) / wall,
        "p50": percentile(times, 50) * 1e3,
        "p99": percentile(times, 99) * 1e3,
    }
    return {"values": values}


def drain(a: dict[str, Any]) -> dict[str, Any]:
    """Tasks/s while one fresh worker process with ``threads`` threads empties ``n`` queued
    no-ops, from the first poll that sees at most 90% left to the first that sees none (its
    start-up is not counted)."""
    from bench.past import tasks

    admin = setup(a)
    ztq = redis.Redis.from_url(ztq_url(a))
    n = a["n"]
    fill(tasks.noop, 0, n)
    if (queued := left(ztq, "default")) != n:
        raise RuntimeError(f"filled {n} tasks but {queued} are queued")
    proc = worker(a, f"default:{a['threads']}")
    try:
        last, mark = (time.perf_counter(), n), None
        deadline = time.monotonic() + WAIT + n / 100
        while time.monotonic() < deadline:
            now_left, now = left(ztq, "default"), time.perf_counter()
            if mark is None and now_left <= 0.9 * n:
                # the clock starts at this poll, or at the one before when this one already
                # sees the queue empty (a run shorter than a poll: start-up may count)
                mark = (now, now_left) if now_left else last
            if now_left == 0 and mark is not None:
                return {"values": {"rate": mark[1] / (now - mark[0])}}
            if proc.poll() is not None:
                raise RuntimeError(f"the worker exited ({proc.returncode}), see {a['log']}")
            last = (now, now_left)
            time.sleep(POLL)
        raise RuntimeError(f"{n} tasks did not drain in time")
    finally:
        stop(proc)
        admin.close()


def latency(a: dict[str, Any]) -> dict[str, Any]:
    """Enqueue to start (ms) of ``n`` stamp tasks sent ``gap`` s apart to one worker (one
    thread) idle for ``idle`` s, the clock started just before the enqueue call."""
    from bench.past import tasks

    admin = setup(a)
    proc = worker(a, "default:1")
    try:
        tasks.stamp.delay(-1)  # warm: the worker is up
        wait_until(lambda: admin.llen(tasks.STAMPS) >= 1, proc, "starting the first task")
        admin.delete(tasks.STAMPS)
        time.sleep(a["idle"])  # idle: the worker waits on an empty queue
        origin: dict[int, float] = {}
        t0 = time.perf_counter()
        for i in range(a["n"]):
            pause = t0 + i * a["gap"] - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            origin[i] = time.time()
            tasks.stamp.delay(i)
        wait_until(lambda: admin.llen(tasks.STAMPS) >= a["n"], proc, "waiting for the stamps")
        starts: dict[int, float] = {}
        for line in admin.lrange(tasks.STAMPS, 0, -1):
            i, t = line.split()
            starts.setdefault(int(i), float(t))
        ms = [(starts[i] - sent) * 1e3 for i, sent in origin.items()]
        return {"values": {"p50": percentile(ms, 50), "p99": percentile(ms, 99)}}
    finally:
        stop(proc)


def _console_app(url: str) -> Any:
    """The console of this tree on ``url``, logged in as an operator (WebTest)."""
    from webtest import TestApp

    from ztq.console import main

    for module in ("ztq.core.auth.passwords", "ztq.core.passwords"):
        try:
            hash_password = importlib.import_module(module).hash_password
            break
        except ImportError:
            continue
    else:
        raise Unsupported("no hash_password to make a console user with")
    settings = {
        "ztq.redis_url": url,
        "ztq.console.secret": "bench-past-" + "x" * 40,
        "ztq.console.users": f"bench operator {hash_password('bench-password-1')}",
    }
    app = TestApp(main({}, **settings))
    form = next(f for f in app.get("/login").forms.values() if "username" in f.fields)
    form["username"], form["password"] = "bench", "bench-password-1"
    form.submit(status=303)
    return app


def console(a: dict[str, Any]) -> dict[str, Any]:
    """Median ms of a few key pages at a set size: ``queued`` no-ops waiting in ``default``,
    ``errors`` failed tasks in ``boom`` (run by a worker, then stopped; none and no worker
    when 0), through WebTest."""
    from bench.past import tasks

    admin = setup(a)
    ztq = redis.Redis.from_url(ztq_url(a))
    fill(tasks.noop, 0, a["queued"])
    handle = tasks.noop.delay(-1)
    fill(tasks.boom, 0, a["errors"])
    proc = worker(a, "boom:1") if a["errors"] else None
    try:
        app = _console_app(ztq_url(a))  # made while the worker starts
        if proc is not None:
            wait_until(lambda: left(ztq, "boom") == 0, proc, "running the failing tasks")
    finally:
        if proc is not None:
            stop(proc)
    values: dict[str, float] = {}
    na: dict[str, str] = {}
    for name, path in a["pages"].items():
        path = path.replace("{task}", str(handle.id))
        res = app.get(path, expect_errors=True)  # warm: templates compiled
        if res.status_int >= 300:  # a 3xx: that tree has no such page (728ce87's `/`
            # redirected to /workers), and timing a redirect against a page says nothing
            what = "a redirect" if res.status_int < 400 else "an error"
            na[name] = f"GET {path}: {res.status_int} ({what})"
            continue
        ms = []
        for _ in range(a["reps"]):
            t0 = time.perf_counter()
            app.get(path)
            ms.append((time.perf_counter() - t0) * 1e3)
        values[name] = percentile(ms, 50)
    admin.close()
    return {"values": values, "na": na}


MEASURES = {
    "probe": lambda a: {"values": probe(a)},
    "enqueue": enqueue,
    "enqueue_async": enqueue_async,
    "drain": drain,
    "latency": latency,
    "console": console,
}


def main(argv: list[str]) -> int:
    """Print the measure's JSON; a tree that cannot do it is n/a, a failure says why."""
    a = json.loads(argv[0])
    try:
        out = MEASURES[a["what"]](a)
    except Unsupported as exc:
        out = {"values": {}, "na": {"*": str(exc)}}
    except Exception as exc:
        import traceback

        traceback.print_exc()
        out = {"values": {}, "na": {"*": f"failed: {type(exc).__name__}: {exc}"}, "failed": True}
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
