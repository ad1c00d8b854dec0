"""Celery: ``task.delay()``; ``celery worker`` solo (one process) and prefork (two)."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import redis
from celery import Celery

from bench.common import peer_url, record_start
from bench.peers.base import Peer

app = Celery("bench", broker=peer_url("celery"))
app.conf.broker_connection_retry_on_startup = True


@app.task
def noop(i: int) -> None:
    pass


@app.task
def stamp(i: int) -> None:
    record_start("celery", i)


@app.task
def hold(i: int) -> None:
    record_start("celery", i)
    time.sleep(600)


class CeleryPeer(Peer):
    name = label = "celery"
    module = __name__
    setting_1 = "`-P solo` (prefetch multiplier 4, early ack: defaults)"
    setting_2 = "`-P prefork -c 2`"

    def enqueue_noop(self, i: int) -> None:
        noop.delay(i)

    def enqueue_stamp(self, i: int, eta: float | None = None) -> None:
        if eta is None:
            stamp.delay(i)
        else:
            stamp.apply_async((i,), eta=datetime.fromtimestamp(eta, timezone.utc))

    def enqueue_hold(self, i: int) -> None:
        hold.delay(i)

    def worker_commands(self, procs: int, *, scheduler: bool = False) -> list[list[str]]:
        pool = ["-P", "solo"] if procs == 1 else ["-P", "prefork", "-c", str(procs)]
        return [[self.python, "-m", "celery", "-A", self.module, "worker", *pool]]

    def remaining(self, client: redis.Redis, total: int) -> int:
        # prefetched messages wait in 'unacked' until acked, just before they run (early ack)
        pipe = client.pipeline(transaction=False)
        pipe.llen("celery")
        pipe.hlen("unacked")
        return sum(int(x) for x in pipe.execute())


PEER = CeleryPeer()
