"""ztq: ``fn.delay()`` one by one, ``transaction()`` in bulk, ``python -m ztq.worker``."""

from __future__ import annotations

import asyncio
import time

import redis

from bench.common import SLEEP_CONCURRENCY, peer_url, record_start
from bench.peers.base import Peer
from ztq.core import connect, task, transaction
from ztq.core.engine.keys import Keys
from ztq.core.states import PRIORITIES


@task
def noop(i: int) -> None:
    pass


@task(unique=False)
def noop_any(i: int) -> None:
    """``noop`` with a random id per call (no dedup: no canonical JSON, no MD5)."""


@task
def stamp(i: int) -> None:
    record_start("ztq", i)


@task
def hold(i: int) -> None:
    record_start("ztq", i)
    time.sleep(600)


@task(queue="sleep-async")
async def asleep(i: int, seconds: float) -> None:
    await asyncio.sleep(seconds)


@task(queue="sleep-threads")
def tsleep(i: int, seconds: float) -> None:
    time.sleep(seconds)


SLEEPS = {"ztq async": (asleep, "async"), "ztq threads": (tsleep, "thread")}


class ZtqPeer(Peer):
    name = label = "ztq"
    module = __name__
    setting_1 = "1 process, 1 thread (`--queue default:1`), default prefetch 32, INFO log"
    setting_2 = "2 processes, 1 thread each"
    bulk_api = "`with transaction():` (one pipeline)"
    sleep_pools = {
        "ztq async": f"`--queue sleep-async:{SLEEP_CONCURRENCY}:async`: one event loop, "
        "`async def` that does `await asyncio.sleep(0.1)`",
        "ztq threads": f"`--queue sleep-threads:{SLEEP_CONCURRENCY}`: {SLEEP_CONCURRENCY} "
        "threads, `def` that does `time.sleep(0.1)`",
    }

    def __init__(self, log_level: str = "", unique: bool = True) -> None:
        """``log_level``: the workers' ``--log-level`` ('' = the default, INFO); another
        level makes a variant labelled ``ztq LEVEL``; ``unique=False`` one that enqueues
        ``noop_any`` (references, not peers)."""
        self.keys = Keys("ztq")
        self._connected = False
        self.log_level = log_level
        self.noop = noop if unique else noop_any
        if log_level:
            self.label = f"ztq {log_level.upper()}"
        if not unique:
            self.label = "ztq unique=False"

    def _connect(self) -> None:
        if not self._connected:
            connect(peer_url("ztq"))
            self._connected = True

    def enqueue_noop(self, i: int) -> None:
        self._connect()
        self.noop.delay(i)

    def ids(self, start: int, n: int) -> list[str]:
        """The ids ``enqueue_bulk(start, n)`` gives its tasks."""
        template = noop.template()
        return [template.call((i,), {}).resolve_id() for i in range(start, start + n)]

    def enqueue_bulk(self, start: int, n: int) -> None:
        self._connect()
        with transaction():
            for i in range(start, start + n):
                noop.delay(i)

    def fill(self, n: int) -> None:
        for start in range(0, n, 5000):
            self.enqueue_bulk(start, min(5000, n - start))

    def enqueue_stamp(self, i: int, eta: float | None = None) -> None:
        self._connect()
        if eta is None:
            stamp.delay(i)
        else:
            stamp.enqueue((i,), eta=eta)

    def enqueue_hold(self, i: int) -> None:
        self._connect()
        hold.delay(i)

    def worker_commands(self, procs: int, *, scheduler: bool = False) -> list[list[str]]:
        cmd = [self.python, "-m", "ztq.worker", "--redis", self.url, "--queue", "default:1"]
        if self.log_level:
            cmd += ["--log-level", self.log_level]
        return [[*cmd, "--import", self.module] for _ in range(procs)]

    def remaining(self, client: redis.Redis, total: int) -> int:
        return self._left(client, "default")

    def _left(self, client: redis.Redis, queue: str) -> int:
        pipe = client.pipeline(transaction=False)
        for p in PRIORITIES:
            pipe.llen(self.keys.ready(queue, p))
        pipe.zcard(self.keys.running(queue))
        return sum(int(x) for x in pipe.execute())

    def fill_sleeps(self, label: str, n: int, seconds: float) -> None:
        self._connect()
        fn = SLEEPS[label][0]
        for start in range(0, n, 5000):
            with transaction():
                for i in range(start, min(n, start + 5000)):
                    fn.delay(i, seconds)

    def sleep_command(self, label: str) -> list[str]:
        fn, pool = SLEEPS[label]
        queue = f"{fn.queue}:{SLEEP_CONCURRENCY}:{pool}"
        cmd = [self.python, "-m", "ztq.worker", "--redis", self.url, "--queue", queue]
        return [*cmd, "--import", self.module]

    def sleeps_left(self, label: str, client: redis.Redis) -> int:
        return self._left(client, SLEEPS[label][0].queue)

    def version(self) -> str:
        from importlib.metadata import version

        return version("ztq")


PEER = ZtqPeer()
AT_WARNING = ZtqPeer(log_level="warning")  # the drain with the per-run INFO line off
NOT_UNIQUE = ZtqPeer(unique=False)  # one-by-one enqueue without dedup
