"""arq (asyncio): ``enqueue_job``; the ``arq`` CLI with its defaults (max_jobs 10, poll 0.5 s)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Any

import redis
from arq import create_pool
from arq.connections import ArqRedis, RedisSettings

from bench.common import SLEEP_CONCURRENCY, peer_url, record_start
from bench.peers.base import Peer

SETTINGS = RedisSettings.from_dsn(peer_url("arq"))


async def noop(ctx: dict[str, Any], i: int) -> None:
    pass


async def stamp(ctx: dict[str, Any], i: int) -> None:
    record_start("arq", i)


async def hold(ctx: dict[str, Any], i: int) -> None:
    record_start("arq", i)
    await asyncio.sleep(600)


async def asleep(ctx: dict[str, Any], i: int, seconds: float) -> None:
    await asyncio.sleep(seconds)


class WorkerSettings:
    functions = [noop, stamp, hold]
    redis_settings = SETTINGS


class SleepSettings:  # the asyncio sleep measure: as many jobs at once as ztq's pools
    functions = [asleep]
    redis_settings = SETTINGS
    max_jobs = SLEEP_CONCURRENCY


class ArqPeer(Peer):
    name = label = "arq"
    module = __name__
    setting_1 = "`arq` CLI, defaults (asyncio, max_jobs 10, poll_delay 0.5 s)"
    setting_2 = "2 `arq` processes"
    sleep_pools = {
        "arq": f"`arq` CLI, `max_jobs = {SLEEP_CONCURRENCY}` (other settings default), "
        "`async def` that does `await asyncio.sleep(0.1)`"
    }

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._pool: ArqRedis | None = None

    @property
    def pool(self) -> ArqRedis:
        if self._pool is None:
            self._pool = self.loop.run_until_complete(create_pool(SETTINGS))
        return self._pool

    def enqueue_noop(self, i: int) -> None:
        self.loop.run_until_complete(self.pool.enqueue_job("noop", i))

    def enqueue_serial(self, start: int, n: int) -> None:
        pool = self.pool

        async def go() -> None:
            for i in range(start, start + n):
                await pool.enqueue_job("noop", i)

        self.loop.run_until_complete(go())

    def enqueue_stamp(self, i: int, eta: float | None = None) -> None:
        when = None if eta is None else datetime.fromtimestamp(eta, timezone.utc)
        self.loop.run_until_complete(self.pool.enqueue_job("stamp", i, _defer_until=when))

    def enqueue_hold(self, i: int) -> None:
        self.loop.run_until_complete(self.pool.enqueue_job("hold", i))

    def fill_sleeps(self, label: str, n: int, seconds: float) -> None:
        pool = self.pool

        async def go() -> None:
            for i in range(n):
                await pool.enqueue_job("asleep", i, seconds)

        self.loop.run_until_complete(go())

    def sleep_command(self, label: str) -> list[str]:
        return [self.python, "-m", "arq", f"{self.module}.SleepSettings"]

    def sleeps_left(self, label: str, client: redis.Redis) -> int:
        return self.remaining(client, 0)

    def worker_commands(self, procs: int, *, scheduler: bool = False) -> list[list[str]]:
        return [[self.python, "-m", "arq", f"{self.module}.WorkerSettings"] for _ in range(procs)]

    def remaining(self, client: redis.Redis, total: int) -> int:
        return int(client.zcard("arq:queue"))


PEER = ArqPeer()
