"""The tasks of ``bench.autoscale`` (imported by its worker processes): each notes when it
started and ended next to when it was sent, in the list ``BENCH_STAMPS`` names."""

from __future__ import annotations

import os
import time

import redis

from ztq.core import task

_client: redis.Redis | None = None


def _stamp(queue: str, sent: float, started: float) -> None:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(os.environ["BENCH_STAMPS_URL"])
    pipe = _client.pipeline(transaction=False)
    pipe.rpush("bench:autoscale:stamps", f"{queue} {sent:.6f} {started:.6f} {time.time():.6f}")
    pipe.hincrby("bench:autoscale:done", queue, 1)
    pipe.execute()


@task(name="bench.autoscale.io", queue="burst")
def io(ms: float, sent: float, queue: str) -> None:
    """I/O-bound: waits ``ms`` milliseconds (a call to another service)."""
    started = time.time()
    time.sleep(ms / 1000)
    _stamp(queue, sent, started)


@task(name="bench.autoscale.cpu", queue="cpu")
def cpu(ms: float, sent: float, queue: str) -> None:
    """CPU-bound: computes for ``ms`` milliseconds of this thread's CPU time."""
    started = time.time()
    end = time.thread_time() + ms / 1000
    n = 0
    while time.thread_time() < end:
        for i in range(2000):
            n += i * i
    _stamp(queue, sent, started)
