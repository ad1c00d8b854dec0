"""The tasks of ``bench.past``, imported by the drivers and by the workers they start.

Copied with the driver into the run's folder (its ``bench/past/`` holds only these two
modules) and run by each tree's own venv, so it uses only what every ztq has had:
``ztq.core.task`` and redis-py. ``stamp`` notes when it started (``ZTQ_PAST_STAMPS``, a
Redis URL of the side's own server) for the latency figure.
"""

from __future__ import annotations

import os
import time

import redis

from ztq.core import task

STAMPS = "ztq-past:stamps"
_client: redis.Redis | None = None


@task
def noop(i: int) -> None:
    pass


@task
def stamp(i: int) -> None:
    global _client
    now = time.time()
    if _client is None:
        _client = redis.Redis.from_url(os.environ["ZTQ_PAST_STAMPS"])
    _client.rpush(STAMPS, f"{i} {now:.6f}")


@task(queue="boom")
def boom(i: int) -> None:
    """A failure for the console's errors page (no retries: ztq's default)."""
    raise ValueError(f"bench failure {i}")
