"""ztq: ``fn.delay()`` one by one, ``transaction()`` in bulk, ``python -m ztq.worker``."""

from __future__ import annotations

import time

import redis

from bench.common import peer_url, record_start
from bench.peers.base import Peer
from ztq.core import connect, task, transaction
from ztq.core.keys import Keys
from ztq.core.states import PRIORITIES


@task
def noop(i: int) -> None:
    pass


@task
def stamp(i: int) -> None:
    record_start("ztq", i)


@task
def hold(i: int) -> None:
    record_start("ztq", i)
    time.sleep(600)


class ZtqPeer(Peer):
    name = label = "ztq"
    module = __name__
    setting_1 = "1 process, 1 thread (`--queue default:1`), default prefetch 32, INFO log"
    setting_2 = "2 processes, 1 thread each"
    bulk_api = "`with transaction():` (one pipeline)"

    def __init__(self) -> None:
        self.keys = Keys("ztq")
        self._connected = False

    def _connect(self) -> None:
        if not self._connected:
            connect(peer_url("ztq"))
            self._connected = True

    def enqueue_noop(self, i: int) -> None:
        self._connect()
        noop.delay(i)

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
        return [[*cmd, "--import", self.module] for _ in range(procs)]

    def remaining(self, client: redis.Redis, total: int) -> int:
        pipe = client.pipeline(transaction=False)
        for p in PRIORITIES:
            pipe.llen(self.keys.ready("default", p))
        pipe.zcard(self.keys.running("default"))
        return sum(int(x) for x in pipe.execute())

    def version(self) -> str:
        from importlib.metadata import version

        return version("ztq")


PEER = ZtqPeer()
