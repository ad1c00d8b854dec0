"""Reads: what :class:`~ztq.core.engine.storage.Storage` tells without changing anything:
the known queues and their shards, task records, a queue's limits, pause flag and length.

Separate from the moves and the administration so that the console's and the monitor's
needs (listings, counts, lookups) read in one place, and so that it is plain that none of
these calls writes to Redis.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ztq.core.engine.keys import split_shard
from ztq.core.engine.queue_limits import QueueLimits
from ztq.core.engine.record import TaskRecord
from ztq.core.engine.transport import Transport
from ztq.core.states import Priority


class Reads(Transport):
    """Queue listings, records, limits and lengths, read from Redis."""

    # -- queues ------------------------------------------------------------------------------
    def queues(self) -> list[str]:
        """The known queues, each shard of a sharded queue by its own name (``mail~2``)."""
        with self.guard():
            return sorted(self.client.smembers(self.keys.queues))

    def shards_of(self, queue: str, known: Sequence[str] | None = None) -> list[str]:
        """``queue`` and its known shards (``queue~1``, ...) in shard order; ``known``: the
        names of :meth:`queues`, when already read."""
        names = self.queues() if known is None else known
        found = {split_shard(n)[1]: n for n in names if split_shard(n)[0] == queue}
        found[0] = queue
        return [found[i] for i in sorted(found)]

    def queue_config(self, queue: str) -> dict[str, Any]:
        """The queue-wide settings in force (``{"max_running": 1}``; {} when none)."""
        return self.queue_limits(queue).as_dict()

    def queue_limits(self, queue: str) -> QueueLimits:
        with self.guard():
            return QueueLimits.from_hash(self.client.hgetall(self.keys.config(queue)))

    def is_paused(self, queue: str) -> bool:
        with self.guard():
            return bool(self.client.exists(self.keys.paused(queue)))

    def paused_flags(self, queues: Sequence[str]) -> list[bool]:
        """:meth:`is_paused` of each queue, in one round trip (a pipeline)."""
        with self.guard():
            pipe = self.client.pipeline(transaction=False)
            for q in queues:
                pipe.exists(self.keys.paused(q))
            return [bool(p) for p in pipe.execute()]

    def pending_count(self, queue: str) -> int:
        """Ready (all levels) plus delayed tasks of a queue, in one round trip (the ready
        lists' leftovers, counted in the tasks hash, are not tasks: see _lib.lua)."""
        k = self.keys
        with self.guard():
            pipe = self.client.pipeline(transaction=False)
            for key in k.ready_all(queue):
                pipe.llen(key)
            pipe.zcard(k.delayed(queue))
            pipe.hmget(k.tasks(queue), [*(f"#{p.value}" for p in Priority), "#keyed"])
            *counts, left = pipe.execute()  # and the tasks waiting in keyed lists (_keyed.lua)
            return (
                sum(int(n) for n in counts) - sum(int(n or 0) for n in left[:3]) + int(left[3] or 0)
            )

    # -- records -----------------------------------------------------------------------------
    def record(self, queue: str, task_id: str) -> TaskRecord | None:
        with self.guard():
            raw = self.client.hget(self.keys.tasks(queue), task_id)
        return None if raw is None else TaskRecord.from_raw(queue, task_id, raw)

    def records(self, queue: str, ids: Sequence[str]) -> list[TaskRecord | None]:
        if not ids:
            return []
        with self.guard():
            raws = self.client.hmget(self.keys.tasks(queue), list(ids))
        return [
            None if raw is None else TaskRecord.from_raw(queue, i, raw)
            for i, raw in zip(ids, raws, strict=True)
        ]

    def locate(self, task_id: str, queues: Sequence[str] | None = None) -> str | None:
        """The queue (or shard) holding a record with this id: one round trip over
        ``queues``, by default every known queue."""
        queues = self.queues() if queues is None else list(queues)
        if not queues:
            return None
        with self.guard():
            pipe = self.client.pipeline(transaction=False)
            for q in queues:
                pipe.hexists(self.keys.tasks(q), task_id)
            found = pipe.execute()
        for q, hit in zip(queues, found, strict=True):
            if hit:
                return q
        return None
