"""The task of ``bench.shards`` (imported by its worker processes)."""

from __future__ import annotations

from ztq.core import task


@task(name="bench.shard_tasks.nothing", queue="hot")
def nothing(i: int) -> None:
    """Does nothing: the drain measures the queue, not the work."""
