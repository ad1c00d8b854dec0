"""Queue administration: registering queues (and the shards of a sharded one), forgetting
them, pausing and resuming, and setting the queue-wide limits (``configure``).

Separate because these are the operator's and the producer's settings on a queue, not
moves of its tasks: they change how the scripts treat every later task of the queue (the
limits are refused on a sharded queue, where no count holds queue-wide in one slot).
"""

from __future__ import annotations

from ztq.core.engine import queue_limits
from ztq.core.engine.keys import check_physical, shard_names
from ztq.core.engine.queue_limits import KEEP, Keep
from ztq.core.engine.reads import Reads
from ztq.core.errors import InvalidOption


class QueueAdmin(Reads):
    """Writes to a queue's registration, pause flag and limits (reads its shards first)."""

    def register_queue(self, queue: str) -> None:
        """Record the queue name in the global set (once per process and queue)."""
        if queue not in self._known_queues:
            with self.guard():
                self.client.sadd(self.keys.queues, queue)
            self._known_queues.add(queue)

    def register_shards(self, queue: str, shards: int) -> None:
        """Record every shard of a sharded queue at once, so that workers fetch from all of
        them and the console counts them before a task landed in each."""
        names = [n for n in shard_names(queue, shards) if n not in self._known_queues]
        if names:
            with self.guard():
                self.client.sadd(self.keys.queues, *names)
            self._known_queues.update(names)

    def forget_queue(self, queue: str) -> None:
        with self.guard():
            self.client.srem(self.keys.queues, queue)
        self._known_queues.discard(queue)

    def pause(self, queue: str) -> None:
        """Workers stop taking tasks of this queue, every shard of it (running ones finish);
        a shard's name (``mail~2``) pauses that shard alone."""
        check_physical(queue)
        for q in self.shards_of(queue):
            self.call("pause", [self.keys.paused(q), self.keys.wake(q)], ["1"])

    def resume(self, queue: str) -> None:
        """Workers take tasks of this queue (every shard) again, woken at once."""
        check_physical(queue)
        for q in self.shards_of(queue):
            self.call("pause", [self.keys.paused(q), self.keys.wake(q)], ["0"])

    def configure(
        self,
        queue: str,
        *,
        max_running: int | None | Keep = KEEP,
        max_pending: int | None | Keep = KEEP,
        when_full: str | Keep = KEEP,
        block_timeout: float | Keep = KEEP,
    ) -> int:
        """Set (None clears) the queue's limits, enforced by the scripts for every producer
        and worker: tasks running at once (``max_running``), tasks waiting in the ready lists
        (``max_pending``) and what an enqueue does when that is reached (``when_full``:
        raise, block up to ``block_timeout`` s, or buffer). Settings not given are kept. A
        sharded queue has no queue-wide count in one slot, so it is refused. Returns how
        many buffered tasks a raised or lifted ``max_pending`` moved in."""
        check_physical(queue)
        argv = queue_limits.fields(max_running=max_running, max_pending=max_pending,
                                   when_full=when_full, block_timeout=block_timeout)  # fmt: skip
        if len(self.shards_of(queue)) > 1:
            raise InvalidOption(
                f"queue {queue} is sharded: queue limits are counted in one slot, so a "
                "sharded queue cannot have one (see docs/scaling.md)"
            )
        k = self.keys
        keys = [k.config(queue), k.wake(queue), *k.ready_all(queue), k.tasks(queue),
                k.overflow(queue), k.room(queue)]  # fmt: skip
        return int(self.call("configure", keys, argv))
