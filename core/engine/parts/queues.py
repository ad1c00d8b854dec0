"""Queues: what a queue is beside its tasks: its registration (and the shards of a sharded
one), forgetting it, its pause flag, its limits (``configure``), and the reads of those and
of its length (``pending_count``).

The part of :class:`~ztq.core.engine.storage.Storage` for a queue's settings
(``storage.queues``): the operator's and the producer's, which change how the scripts treat
every later task of the queue (the limits are refused on a sharded queue, where no count
holds queue-wide in one slot). None of the reads writes to Redis.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from ztq.core.engine import queue_limits
from ztq.core.engine.keys import (
    check_physical,
    check_queue,
    forget_checked,
    forget_deleted,
    shard_names,
    split_shard,
)
from ztq.core.engine.queue_limits import KEEP, Keep, QueueLimits, Rate
from ztq.core.engine.transport import Transport
from ztq.core.errors import InvalidOption
from ztq.core.states import Priority


class Queues:
    """A queue's registration, pause flag and limits: the writes, then the reads."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.keys = transport.keys
        self._known: set[str] = set()  # the queues this process registered (once each)

    def register_queue(self, queue: str) -> None:
        """Record the queue name in the global set (once per process and queue)."""
        if queue not in self._known:
            with self.transport.guard():
                self.transport.client.sadd(self.keys.queues, queue)
            self._known.add(queue)

    def register_shards(self, queue: str, shards: int) -> None:
        """Record every shard of a sharded queue at once, so that workers fetch from all of
        them and the console counts them before a task landed in each."""
        names = [n for n in shard_names(queue, shards) if n not in self._known]
        if names:
            with self.transport.guard():
                self.transport.client.sadd(self.keys.queues, *names)
            self._known.update(names)

    def forget_registrations(self) -> None:
        """Forget which queues this process registered, so that the next
        :meth:`register_queue` writes again: Redis came back without its data."""
        self._known.clear()

    def forget_queue(self, queue: str) -> None:
        with self.transport.guard():
            self.transport.client.srem(self.keys.queues, queue)
        self._known.discard(queue)

    def forget_idle_queue(self, queue: str, now_s: float | None = None) -> str:
        """Remove a queue that holds nothing, with its settings, stats and finished records
        (``ztq queue forget``: a queue a typo made stays in every list otherwise); the
        caller has checked that no live worker serves it (monitor.workers.forget_queue).
        Returns "" when it is forgotten, else why not, in one line. The check and the
        delete are one script call (forget_queue.lua): a task enqueued meanwhile keeps its
        queue."""
        check_queue(queue)
        shards = self.shards_of(queue)
        if len(shards) > 1:
            return f"{queue} has {len(shards)} shards: forget is for an unsharded queue"
        checked = forget_checked(self.keys, queue)
        deleted = forget_deleted(self.keys, queue, time.time() if now_s is None else now_s)
        keys, words = [k for k, _ in checked] + deleted, [w for _, w in checked]
        held = self.transport.call("forget_queue", keys, [len(checked), *words])
        if held:
            return f"{queue} holds {held}"
        with self.transport.guard():
            self.transport.client.srem(self.keys.queues, queue)
        self._known.discard(queue)
        return ""

    def pause(self, queue: str) -> None:
        """Workers stop taking tasks of this queue, every shard of it (running ones finish);
        a shard's name (``mail~2``) pauses that shard alone."""
        check_physical(queue)
        for q in self.shards_of(queue):
            self.transport.call("pause", [self.keys.paused(q), self.keys.wake(q)], ["1"])

    def resume(self, queue: str) -> None:
        """Workers take tasks of this queue (every shard) again, woken at once."""
        check_physical(queue)
        for q in self.shards_of(queue):
            self.transport.call("pause", [self.keys.paused(q), self.keys.wake(q)], ["0"])

    def configure(
        self,
        queue: str,
        *,
        max_running: int | None | Keep = KEEP,
        max_pending: int | None | Keep = KEEP,
        when_full: str | Keep = KEEP,
        block_timeout: float | Keep = KEEP,
        rate_limit: str | None | Keep = KEEP,
        key_concurrency: int | None | Keep = KEEP,
    ) -> int:
        """Set (None clears) the queue's limits, enforced by the scripts for every producer
        and worker: tasks running at once (``max_running``), tasks waiting in the ready lists
        (``max_pending``) and what an enqueue does when that is reached (``when_full``:
        raise, block up to ``block_timeout`` s, or buffer), and tasks started per second,
        minute or hour across the fleet (``rate_limit``: ``"N/s"``, ``"N/m"``, ``"N/h"``,
        optionally followed by ``" burst B"``). Settings not given are kept. A
        sharded queue has no queue-wide count in one slot, so it is refused. Returns how
        many buffered tasks a raised or lifted ``max_pending`` moved in."""
        check_physical(queue)
        argv = queue_limits.fields(max_running=max_running, max_pending=max_pending,
                                   when_full=when_full, block_timeout=block_timeout,
                                   rate_limit=rate_limit,
                                   key_concurrency=key_concurrency)  # fmt: skip
        if len(self.shards_of(queue)) > 1:
            raise InvalidOption(
                f"queue {queue} is sharded: queue limits are counted in one slot, so a "
                "sharded queue cannot have one (see docs/scaling.md)"
            )
        k = self.keys
        keys = [k.config(queue), k.wake(queue), *k.ready_all(queue), k.tasks(queue),
                k.overflow(queue), k.room(queue), k.rate(queue)]  # fmt: skip
        return int(self.transport.call("configure", keys, argv))

    def task_rates(self, queue: str, rates: Mapping[str, Rate | None]) -> None:
        """Write the task-level rate limits of ``queue``'s tasks into its config (a worker
        serving it does, at start, for the tasks it registered): ``rate:<task>`` = ``N/u B``
        (None: the field is dropped); fetch.lua enforces them (docs/queue-controls.md)."""
        if not rates:
            return
        argv: list[str] = []
        for name, rate in sorted(rates.items()):
            argv += [f"rate:{name}", "" if rate is None else f"{rate.spec} {rate.burst}"]
        k = self.keys
        keys = [k.config(queue), k.wake(queue), *k.ready_all(queue), k.tasks(queue),
                k.overflow(queue), k.room(queue), k.rate(queue)]  # fmt: skip
        self.transport.call("configure", keys, argv)

    def rate_leave(self, queue: str, worker: str, thread: str) -> bool:
        """The executor (``worker``, ``thread``) registered for ``queue``'s next rate-limit
        token took other work: it leaves the registration and an idle executor is woken
        to take it (see rate_leave.lua). False when the registration was not its own."""
        keys = [self.keys.rate(queue), self.keys.wake(queue)]
        return bool(int(self.transport.call("rate_leave", keys, [worker, thread])))

    def names(self) -> list[str]:
        """The known queues, each shard of a sharded queue by its own name (``mail~2``)."""
        with self.transport.guard():
            return sorted(self.transport.client.smembers(self.keys.queues))

    def shards_of(self, queue: str, known: Sequence[str] | None = None) -> list[str]:
        """``queue`` and its known shards (``queue~1``, ...) in shard order; ``known``: the
        names of :meth:`names`, when already read."""
        names = self.names() if known is None else known
        found = {split_shard(n)[1]: n for n in names if split_shard(n)[0] == queue}
        found[0] = queue
        return [found[i] for i in sorted(found)]

    def queue_config(self, queue: str) -> dict[str, Any]:
        """The queue-wide settings in force (``{"max_running": 1}``; {} when none)."""
        return self.queue_limits(queue).as_dict()

    def queue_limits(self, queue: str) -> QueueLimits:
        with self.transport.guard():
            return QueueLimits.from_hash(self.transport.client.hgetall(self.keys.config(queue)))

    def is_paused(self, queue: str) -> bool:
        with self.transport.guard():
            return bool(self.transport.client.exists(self.keys.paused(queue)))

    def paused_flags(self, queues: Sequence[str]) -> list[bool]:
        """:meth:`is_paused` of each queue, in one round trip (a pipeline)."""
        with self.transport.guard():
            pipe = self.transport.client.pipeline(transaction=False)
            for q in queues:
                pipe.exists(self.keys.paused(q))
            return [bool(p) for p in pipe.execute()]

    def pending_count(self, queue: str) -> int:
        """Ready (all levels) plus delayed tasks of a queue, in one round trip (the ready
        lists' leftovers, counted in the tasks hash, are not tasks: see _lib.lua)."""
        k = self.keys
        with self.transport.guard():
            pipe = self.transport.client.pipeline(transaction=False)
            for key in k.ready_all(queue):
                pipe.llen(key)
            pipe.zcard(k.delayed(queue))
            pipe.hmget(k.tasks(queue), [*(f"#{p.value}" for p in Priority), "#keyed"])
            *counts, left = pipe.execute()  # and the tasks waiting in keyed lists (_keyed.lua)
            return (
                sum(int(n) for n in counts) - sum(int(n or 0) for n in left[:3]) + int(left[3] or 0)
            )
