"""dramatiq: ``actor.send()``; the ``dramatiq`` CLI with its default prefetch."""

from __future__ import annotations

import time

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker

from bench.common import peer_url, record_start
from bench.peers.base import Peer

broker = RedisBroker(url=peer_url("dramatiq"))
dramatiq.set_broker(broker)


@dramatiq.actor
def noop(i: int) -> None:
    pass


@dramatiq.actor
def stamp(i: int) -> None:
    record_start("dramatiq", i)


@dramatiq.actor(time_limit=900_000)
def hold(i: int) -> None:
    record_start("dramatiq", i)
    time.sleep(600)


class DramatiqPeer(Peer):
    name = label = "dramatiq"
    module = __name__
    setting_1 = "`--processes 1 --threads 1`, default prefetch (2 x threads = 2)"
    setting_2 = "`--processes 2 --threads 1`"

    def __init__(self, prefetch: int = 0) -> None:
        self.prefetch = prefetch
        if prefetch:
            self.label = f"dramatiq p{prefetch}"
            self.setting_1 = f"`--processes 1 --threads 1`, `dramatiq_queue_prefetch={prefetch}`"
            self.setting_2 = f"`--processes 2 --threads 1`, prefetch {prefetch}"

    def enqueue_noop(self, i: int) -> None:
        noop.send(i)

    def enqueue_stamp(self, i: int, eta: float | None = None) -> None:
        if eta is None:
            stamp.send(i)
        else:  # dramatiq takes a delay in ms, counted from its own clock reading in send
            stamp.send_with_options(args=(i,), delay=max(0, round((eta - time.time()) * 1000)))

    def enqueue_hold(self, i: int) -> None:
        hold.send(i)

    def worker_commands(self, procs: int, *, scheduler: bool = False) -> list[list[str]]:
        return [
            [
                self.python,
                "-m",
                "dramatiq",
                self.module,
                "--processes",
                str(procs),
                "--threads",
                "1",
            ]
        ]

    def worker_env(self) -> dict[str, str]:
        return {"dramatiq_queue_prefetch": str(self.prefetch)} if self.prefetch else {}

    def remaining(self, client: redis.Redis, total: int) -> int:
        # a message stays in the .msgs hash until its ack
        return int(client.hlen("dramatiq:default.msgs"))


PEER = DramatiqPeer()
PREFETCH_64 = DramatiqPeer(prefetch=64)
