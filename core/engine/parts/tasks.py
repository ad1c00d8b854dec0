"""Tasks: a task's life outside its runs, each move one Lua script (``scripts/*.lua``): the
producer's enqueue, the promotion of due delayed tasks, the operator's redo (``requeue``)
and delete (``remove``), and the task records read back (:meth:`Tasks.record`); with the
values an enqueue takes (:class:`EnqueueEntry`) and a promotion returns (:class:`Promoted`).

The part of :class:`~ztq.core.engine.storage.Storage` a producer runs (``storage.tasks``);
an enqueue is an :data:`Op` (``enqueue_op``) sent by its caller alone or with others in one
round trip (a transaction, the coalescer). Its runs (fetch, ack, fail) are
``ztq.core.engine.parts.leases``.

An enqueue carries a request id: sent again after a lost reply it is answered as the first
time and changes nothing (docs/design.md, "Lost replies").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from ztq.core.engine.parts.queues import Queues
from ztq.core.engine.record import TaskRecord
from ztq.core.engine.scripts import Op
from ztq.core.engine.transport import Transport
from ztq.core.engine.wire.framing import KeyList, TailedKeys
from ztq.core.states import Priority

# leftovers one purge call drops at most (about 3 commands each): a call stays short behind
# a long run of them, and Tasks.remove calls again
PURGE_DROPS = 1000


class EnqueueEntry(NamedTuple):
    """One task for :meth:`Tasks.enqueue_op`."""

    id: str
    payload: str
    priority: Priority | str = Priority.NORMAL
    delay_ms: int = 0
    first: bool = False
    cron_name: str = ""
    cron_tick_ms: int = 0
    expires_ms: int = 0  # ms from the enqueue after which it never starts (0: never)
    batch: str = ""  # the batch the task is a member of ('' = none; docs/batches.md)


# An EnqueueEntry's fields as a plain tuple, in its order (enqueue_op reads either); the
# last two (expires_ms, batch) may be left out
EnqueueArgs = tuple[Any, ...]


class Promoted(NamedTuple):
    moved: int
    next_due: int | None  # epoch ms on Redis's clock, None when nothing is delayed
    now: int  # Redis's clock when it answered (ms)

    @property
    def wait(self) -> float | None:
        """Seconds until the next delayed task is due, or None."""
        return None if self.next_due is None else max(0.0, (self.next_due - self.now) / 1000)


class Tasks:
    """The script calls that enqueue, promote, redo and delete tasks, and the records."""

    def __init__(self, transport: Transport, queues: Queues) -> None:
        self.transport = transport
        self.keys = transport.keys  # one Keys per Storage: read on every call, kept here
        self.queues = queues  # the queue names, where a lookup spans every queue
        self._key_lists: dict[str, KeyList] = {}  # enqueue.lua's KEYS, once per queue
        self._request_heads: dict[str, str] = {}  # a queue's request key but the id

    def _enqueue_keys(self, queue: str) -> KeyList:
        """KEYS of enqueue.lua but the request's, built once per queue (the hot path)."""
        keys = self._key_lists.get(queue)
        if keys is None:
            k = self.keys
            keys = self._key_lists[queue] = KeyList(
                queue,
                [k.tasks(queue), *k.ready_all(queue), k.delayed(queue), k.errors(queue),
                 k.done(queue), k.wake(queue), k.cronlast(queue), k.schedule(queue),
                 k.config(queue), k.overflow(queue), k.totals(queue), k.paused(queue),
                 k.running(queue), k.fence(queue), k.waiter(queue), k.hand(queue),
                 k.rate(queue)],
            )  # fmt: skip
        return keys

    def enqueue_op(
        self,
        queue: str,
        entries: Sequence[EnqueueArgs],
        *,
        once: tuple[str, int] | None = None,
        request: str | None = None,
    ) -> Op:
        """One script call that enqueues ``entries`` (all of ``queue``) in order.

        The reply is ``[id, outcome, id, outcome, ...]``; see ``scripts/enqueue.lua``.
        ``once=(call id, ttl ms)``: a once-guard (a batch callback): the entries are written
        only if this call id was not enqueued in the queue within the TTL (else the reply
        is ``[id, 'once']``).

        The call carries a request id (``request``, or a new one): this op sent again, by
        the client's retries after a lost reply or by its caller, gets the answer the first
        send got, within ``request_window`` seconds, and changes nothing (docs/design.md,
        "Lost replies"). A new op is a new request.
        """
        keys = self._enqueue_keys(queue)
        args: list[Any] = []
        for e in entries:
            if len(e) == 8:  # one-by-one enqueue's entry: unpacked, not sliced
                tid, payload, prio, delay_ms, first, cron_name, cron_tick_ms, expires = e
                batch = ""
            else:
                tid, payload, prio, delay_ms, first, cron_name, cron_tick_ms = e[:7]
                expires = e[7] if len(e) > 7 else 0
                batch = e[8] if len(e) > 8 else ""
            level = prio.value if isinstance(prio, Priority) else prio
            args += [tid, payload, level, max(0, int(delay_ms)), int(first), cron_name,
                     int(cron_tick_ms), max(0, int(expires)), batch]  # fmt: skip
        head = self._request_heads.get(queue)
        if head is None:  # the request key without its id, once per queue
            head = self._request_heads[queue] = self.keys.request(queue, "")
        tail = [head + (request or self.transport.request_id())]
        args.append(self.transport.request_window_ms)
        if once is not None:
            tail.append(self.keys.once(queue, once[0]))
            args.append(int(once[1]))
        return ("enqueue", TailedKeys(keys, tail), args)

    def promote(self, queue: str, limit: int = 1000) -> Promoted:
        """Move due delayed tasks to ready; say when the next one is due (Redis clock, ms)."""
        k = self.keys
        keys = [k.tasks(queue), k.delayed(queue), *k.ready_all(queue), k.wake(queue)]
        moved, nxt, now = self.transport.call("promote", keys, [int(limit)])
        return Promoted(int(moved), None if int(nxt) < 0 else int(nxt), int(now))

    def requeue(self, queue: str, state: str, ids: Sequence[str] = (), *, oldest: int = 0) -> int:
        """Move tasks from errors (``state='error'``) or delayed back to ready."""
        k = self.keys
        source = k.errors(queue) if state == "error" else k.delayed(queue)
        keys = [k.tasks(queue), source, *k.ready_all(queue), k.wake(queue)]
        mode = "oldest" if oldest else "ids"
        if mode == "ids" and not ids:
            return 0
        return int(self.transport.call("requeue", keys, [state, mode, max(oldest, 1), *ids]))

    def remove(
        self,
        queue: str,
        ids: Sequence[str] = (),
        *,
        purge: str = "",
        limit: int = 1000,
        cancel: bool = False,
    ) -> tuple[int, int]:
        """Delete tasks by id (with ``cancel``: only those still queued or delayed), or purge
        a batch of up to ``limit`` tasks of 'ready', 'delayed' or 'errors'.

        Returns (records deleted, ids given or tasks taken); a purge loops until taken is 0.
        A purge of 'ready' takes each waiting task once, whatever its entry looks like, and
        drops the leftovers it meets (docs/design.md, "Deleting a waiting task") without
        counting them: taken compares with the counts (``pending_count``, the console's).
        """
        k = self.keys
        keys = [
            k.tasks(queue),
            *k.ready_all(queue),
            k.delayed(queue),
            k.errors(queue),
            k.done(queue),
            k.config(queue),
            k.overflow(queue),
            k.room(queue),
            k.wake(queue),
            k.batch_out(queue),
        ]
        if purge:
            if purge not in ("ready", "delayed", "errors"):
                raise ValueError(f"cannot purge {purge!r}")
            args: list[Any] = [purge, int(limit), PURGE_DROPS]
        else:
            if not ids:
                return 0, 0
            args = ["cancel" if cancel else "ids", 0, *ids]
        while True:
            deleted, taken, dropped = self.transport.call("remove", keys, args)
            # a call stopped on a run of leftovers before any task: not done, call again
            # (each call stays short; taken = 0 must mean the lists are empty)
            if int(taken) or int(dropped) < PURGE_DROPS or not purge:
                return int(deleted), int(taken)

    # -- records ----------------------------------------------------------------------------
    def record(self, queue: str, task_id: str) -> TaskRecord | None:
        with self.transport.guard():
            raw = self.transport.client.hget(self.keys.tasks(queue), task_id)
        return None if raw is None else TaskRecord.from_raw(queue, task_id, raw)

    def records(self, queue: str, ids: Sequence[str]) -> list[TaskRecord | None]:
        if not ids:
            return []
        with self.transport.guard():
            raws = self.transport.client.hmget(self.keys.tasks(queue), list(ids))
        return [
            None if raw is None else TaskRecord.from_raw(queue, i, raw)
            for i, raw in zip(ids, raws, strict=True)
        ]

    def locate(self, task_id: str, queues: Sequence[str] | None = None) -> str | None:
        """The queue (or shard) holding a record with this id: one round trip over
        ``queues``, by default every known queue."""
        queues = self.queues.names() if queues is None else list(queues)
        if not queues:
            return None
        with self.transport.guard():
            pipe = self.transport.client.pipeline(transaction=False)
            for q in queues:
                pipe.hexists(self.keys.tasks(q), task_id)
            found = pipe.execute()
        for q, hit in zip(queues, found, strict=True):
            if hit:
                return q
        return None
