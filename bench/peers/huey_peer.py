"""huey: calling a task enqueues it; ``huey_consumer`` with thread workers."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import redis
from huey import RedisHuey

from bench.common import peer_url, record_start
from bench.peers.base import Peer

huey = RedisHuey("bench", url=peer_url("huey"))


@huey.task()
def noop(i: int) -> None:
    pass


@huey.task()
def stamp(i: int) -> None:
    record_start("huey", i)


@huey.task()
def hold(i: int) -> None:
    record_start("huey", i)
    time.sleep(600)


class HueyPeer(Peer):
    name = label = "huey"
    module = __name__
    setting_1 = "`huey_consumer -k thread -w 1` (blocking BRPOP storage, default)"
    setting_2 = "`huey_consumer -k process -w 2`"

    def enqueue_noop(self, i: int) -> None:
        noop(i)

    def enqueue_stamp(self, i: int, eta: float | None = None) -> None:
        if eta is None:
            stamp(i)
        else:
            stamp.schedule(args=(i,), eta=datetime.fromtimestamp(eta, timezone.utc))

    def enqueue_hold(self, i: int) -> None:
        hold(i)

    def worker_commands(self, procs: int, *, scheduler: bool = False) -> list[list[str]]:
        kind = "thread" if procs == 1 else "process"
        cmd = [self.python, "-m", "huey.bin.huey_consumer", f"{self.module}.huey"]
        return [[*cmd, "-k", kind, "-w", str(procs)]]

    def remaining(self, client: redis.Redis, total: int) -> int:
        # a dequeued task is run at once by the only thread: at most one is in flight unseen
        return int(client.llen(huey.storage.queue_key))


PEER = HueyPeer()
