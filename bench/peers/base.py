"""What every peer adapter provides; the measurements in ``bench.measures`` use only this."""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from typing import ClassVar

import redis

from bench.common import DB, clear_stamps, peer_url


class Peer(ABC):
    """One library driven through its own public API, with one stated worker setting."""

    name: str = ""
    label: str = ""  # as printed in the report; variants of one library differ here
    module: str = ""  # the module its workers import
    setting_1: str = ""  # worker setting for one process, as printed in the report
    setting_2: str = ""  # ... and for two processes
    bulk_api: str = ""  # the bulk enqueue API, '' when the library has none
    # configurations of the asyncio sleep measure: label -> its worker, as printed
    sleep_pools: ClassVar[dict[str, str]] = {}
    python = sys.executable

    @property
    def db(self) -> int:
        return DB[self.name]

    @property
    def url(self) -> str:
        return peer_url(self.name)

    def client(self) -> redis.Redis:
        """A plain client on this peer's database, for flushing and polling."""
        return redis.Redis.from_url(self.url, decode_responses=True)

    def reset(self) -> None:
        """Empty this peer's database and its start stamps."""
        with self.client() as c:
            c.flushdb()
        clear_stamps(self.name)

    def version(self) -> str:
        from importlib.metadata import version

        return version(self.name)

    # -- producer side ---------------------------------------------------------------------------
    @abstractmethod
    def enqueue_noop(self, i: int) -> None:
        """Enqueue ``noop(i)``: one call, one task."""

    def enqueue_bulk(self, start: int, n: int) -> None:
        """Enqueue ``noop(start..start+n-1)`` with the library's bulk API."""
        raise NotImplementedError

    def enqueue_serial(self, start: int, n: int) -> None:
        """Enqueue ``noop(start..start+n-1)`` one call per task."""
        for i in range(start, start + n):
            self.enqueue_noop(i)

    def fill(self, n: int) -> None:
        """Put ``n`` no-op tasks in the queue as fast as the public API allows."""
        if self.bulk_api:
            for start in range(0, n, 1000):
                self.enqueue_bulk(start, min(1000, n - start))
        else:
            self.enqueue_serial(0, n)

    @abstractmethod
    def enqueue_stamp(self, i: int, eta: float | None = None) -> None:
        """Enqueue ``stamp(i)`` (records its start), now or due at epoch ``eta``."""

    @abstractmethod
    def enqueue_hold(self, i: int) -> None:
        """Enqueue ``hold(i)``: records its start, then sleeps for minutes."""

    # -- worker side -----------------------------------------------------------------------------
    @abstractmethod
    def worker_commands(self, procs: int, *, scheduler: bool = False) -> list[list[str]]:
        """Commands that start ``procs`` worker processes of one thread/slot each."""

    @abstractmethod
    def remaining(self, client: redis.Redis, total: int) -> int:
        """How many of ``total`` queued no-ops have not finished yet (cheap: O(1) calls)."""

    def worker_env(self) -> dict[str, str]:
        return {}

    # -- the asyncio sleep measure: tasks that sleep, one worker process -------------------------
    def fill_sleeps(self, label: str, n: int, seconds: float) -> None:
        """Queue ``n`` tasks that each sleep ``seconds``, for the configuration ``label``."""
        raise NotImplementedError

    def sleep_command(self, label: str) -> list[str]:
        """The one worker process of ``label``, running ``SLEEP_CONCURRENCY`` tasks at once."""
        raise NotImplementedError

    def sleeps_left(self, label: str, client: redis.Redis) -> int:
        """How many of the tasks of ``label`` have not finished yet."""
        raise NotImplementedError
