"""RQ: ``Queue.enqueue`` one by one, ``enqueue_many`` in bulk, ``rq worker`` (SimpleWorker)."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import redis
from rq import Queue

from bench.common import peer_url, record_start
from bench.peers.base import Peer


def noop(i: int) -> None:
    pass


def stamp(i: int) -> None:
    record_start("rq", i)


def hold(i: int) -> None:
    record_start("rq", i)
    time.sleep(600)


class RqPeer(Peer):
    name = label = "rq"
    module = __name__
    setting_1 = "1 `SimpleWorker` (no fork per job); scheduler on for delayed tasks"
    setting_2 = "2 `SimpleWorker` processes"
    bulk_api = "`Queue.enqueue_many` (one pipeline)"

    def __init__(self) -> None:
        self._queue: Queue | None = None

    @property
    def queue(self) -> Queue:
        if self._queue is None:
            self._queue = Queue("default", connection=redis.Redis.from_url(peer_url("rq")))
        return self._queue

    def enqueue_noop(self, i: int) -> None:
        self.queue.enqueue(noop, i)

    def enqueue_bulk(self, start: int, n: int) -> None:
        self.queue.enqueue_many([Queue.prepare_data(noop, (i,)) for i in range(start, start + n)])

    def enqueue_stamp(self, i: int, eta: float | None = None) -> None:
        if eta is None:
            self.queue.enqueue(stamp, i)
        else:
            self.queue.enqueue_at(datetime.fromtimestamp(eta, timezone.utc), stamp, i)

    def enqueue_hold(self, i: int) -> None:
        self.queue.enqueue(hold, i, job_timeout=900)

    def worker_commands(self, procs: int, *, scheduler: bool = False) -> list[list[str]]:
        cmd = [self.python, "-m", "rq.cli", "worker", "--url", self.url]
        cmd += ["--worker-class", "rq.worker.SimpleWorker", "--path", "."]
        if scheduler:
            cmd.append("--with-scheduler")
        return [[*cmd, "default"] for _ in range(procs)]

    def remaining(self, client: redis.Redis, total: int) -> int:
        return total - int(client.zcard("rq:finished:default"))


PEER = RqPeer()
