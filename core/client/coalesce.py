"""Coalesced enqueues: concurrent one-by-one enqueues of one process to one Redis share
round trips (what ioredis and Lettuce call auto-pipelining).

A leader/follower combiner per connection. A caller that finds nothing in flight sends its
own call at once, in its own thread (no hand-off: a lone caller pays two lock operations).
Callers that arrive while a call is in flight queue up; when the flight ends, the first of
them is woken to lead the next batch: every queued call in one round trip (one script call
each, pipelined), then each caller is woken with its own reply, or its own error (a script's
error is that call's reply; a connection lost fails each call of the batch, each caller
raising its own copy). Arrival order is kept within a batch and a thread waits for its call
before it makes the next, so each thread's enqueues reach Redis in the order it made them.

Only the write is shared: serialization, middleware, dedup ids, the queue's registration
and the wait for room in a full queue stay in each caller's thread (``enqueue.send``), and a
transaction's batch, or an enqueue that waits for replicas, is sent as before.

The asyncio twin (:class:`AsyncCoalescer`) does the same for the coroutines of one event
loop: a lone caller awaits its own call; a batch that queued meanwhile is sent by a task.
"""

from __future__ import annotations

import asyncio
import copy
import os
import threading
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ztq.core.engine.connection import ResponseError
from ztq.core.engine.scripts import Op

if TYPE_CHECKING:
    from ztq.core.engine.aio.transport import AsyncStorage
    from ztq.core.engine.storage import Storage

MOST = 500  # calls in one batch at most (a few ms of Redis time), as a transaction's chunk
_ALL: weakref.WeakSet[Coalescer] = weakref.WeakSet()


def _own(exc: BaseException) -> BaseException:
    """A copy of a batch's shared error for one more of its callers (each raises its own
    object: tracebacks are set per raise), with the same ``__cause__``."""
    try:
        mine = copy.copy(exc)
    except Exception:  # an exception that does not copy: the shared one
        return exc
    mine.__cause__ = exc.__cause__
    return mine


def answers(storage: Storage, ops: list[Op], execute: Any) -> list[Any]:
    """Each op's reply (or error) from one round trip: the one-by-one enqueues of a queue
    go as one script call (``Storage.merge_enqueues``), which ``execute`` sends."""
    sent, parts = storage.merge_enqueues(ops)
    return split(execute(sent), parts, len(ops))


def split(replies: Sequence[Any], parts: list[list[tuple[int, int]]], n: int) -> list[Any]:
    """The replies of merged calls, handed back to the calls they merged: each its tasks'
    share of the reply (two entries per task), or the merged call's error (each caller after
    the first gets its own copy)."""
    out: list[Any] = [None] * n
    for reply, part in zip(replies, parts, strict=True):
        start = 0
        for k, (pos, tasks) in enumerate(part):
            if isinstance(reply, BaseException):
                out[pos] = reply if k == 0 else _own(reply)
            elif tasks < 0:
                out[pos] = reply
            else:
                out[pos] = reply[start : start + 2 * tasks]
                start += 2 * tasks
    return out


class _Slot:
    """One queued call: its operation, and what its caller waits for."""

    __slots__ = ("batch", "error", "gate", "op", "reply")

    def __init__(self, op: Op) -> None:
        self.op = op
        self.reply: Any = None
        self.error: BaseException | None = None
        self.batch: list[_Slot] | None = None  # set when this caller leads the next batch
        self.gate = threading.Lock()
        self.gate.acquire()  # released by whoever answers (or picks) this call


class Coalescer:
    """The combiner of one :class:`Storage` (its ``coalescer`` slot, see :func:`coalescer`)."""

    def __init__(self, storage: Storage, most: int = MOST) -> None:
        self.storage = storage
        self.most = most
        self._lock = threading.Lock()
        self._busy = False  # a call or a batch is in flight
        self._waiting: list[_Slot] = []
        self.batches = 0  # batches sent by a queued caller (tests and the bench read it)
        _ALL.add(self)

    def call(self, op: Op) -> Any:
        """Run one script call, alone or in a batch with the calls that arrive meanwhile;
        returns its reply or raises its error."""
        with self._lock:
            alone = not self._busy
            if alone:
                self._busy = True
            else:
                slot = _Slot(op)
                self._waiting.append(slot)
        if alone:  # nothing in flight: send it now, from this thread
            try:
                return self.storage.call(*op)
            finally:
                self._next()
        try:
            slot.gate.acquire()  # answered, or chosen to lead the next batch
        except BaseException:  # interrupted (KeyboardInterrupt in the main thread)
            self._leave(slot)
            raise
        if slot.batch is not None:
            self._lead(slot.batch)
        if slot.error is not None:
            raise slot.error
        return slot.reply

    def _leave(self, slot: _Slot) -> None:
        """An interrupted caller: still queued, it leaves (its call is not sent); already
        in a batch, it waits for the batch and leads it if it was chosen to, so that the
        callers behind it are never left waiting."""
        with self._lock:
            if slot in self._waiting:
                self._waiting.remove(slot)
                return
        slot.gate.acquire()
        if slot.batch is not None:
            self._lead(slot.batch)

    def _next(self) -> None:
        """The flight ended: wake the first queued caller to lead the queued calls (or
        mark the connection idle)."""
        with self._lock:
            if not self._waiting:
                self._busy = False
                return
            batch, self._waiting = self._waiting[: self.most], self._waiting[self.most :]
        batch[0].batch = batch
        batch[0].gate.release()

    def _lead(self, batch: list[_Slot]) -> None:
        """Send a batch (this thread's call first), answer every caller, pass the lead on."""
        try:
            self.batches += 1
            replies = answers(self.storage, [s.op for s in batch], self.storage.execute_each)
            for s, reply in zip(batch, replies, strict=True):
                if isinstance(reply, ResponseError):
                    s.error = reply
                else:
                    s.reply = reply
        except BaseException as exc:
            batch[0].error = exc
            for s in batch[1:]:
                s.error = _own(exc)
        finally:
            self._next()  # the next batch's leader first: its round trip starts sooner
            for s in batch[1:]:
                s.gate.release()

    def _reset(self) -> None:
        """In a forked child: nothing is in flight there (the threads that waited are gone)."""
        self._lock = threading.Lock()
        self._busy, self._waiting = False, []


def _after_fork() -> None:
    for c in list(_ALL):
        c._reset()


os.register_at_fork(after_in_child=_after_fork)
_made = threading.Lock()


def coalescer(storage: Storage) -> Coalescer:
    """The combiner of ``storage``'s connection, made on first use."""
    found = storage.coalescer
    if found is None:
        with _made:
            found = storage.coalescer
            if found is None:
                found = storage.coalescer = Coalescer(storage)
    return found  # type: ignore[no-any-return]


class AsyncCoalescer:
    """:class:`Coalescer` for the coroutines of one event loop (one per
    :class:`AsyncStorage`, which belongs to one loop)."""

    def __init__(self, storage: AsyncStorage, most: int = MOST) -> None:
        self.storage = storage
        self.most = most
        self._busy = False
        self._waiting: list[tuple[Op, asyncio.Future[Any]]] = []
        self._leaders: set[asyncio.Task[None]] = set()  # held until done (the loop's are weak)
        self.batches = 0

    async def call(self, op: Op) -> Any:
        if self._busy:
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._waiting.append((op, future))
            return await future
        self._busy = True
        try:
            [reply] = await self.storage.execute_each([op])
        finally:
            self._next()
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    def _next(self) -> None:
        waiting = [w for w in self._waiting if not w[1].done()]  # a cancelled caller: dropped
        if not waiting:
            self._busy, self._waiting = False, []
            return
        batch, self._waiting = waiting[: self.most], waiting[self.most :]
        task = asyncio.get_running_loop().create_task(self._lead(batch))
        self._leaders.add(task)
        task.add_done_callback(self._leaders.discard)

    async def _lead(self, batch: Sequence[tuple[Op, asyncio.Future[Any]]]) -> None:
        try:
            self.batches += 1
            ops, parts = self.storage.ops.merge_enqueues([op for op, _ in batch])
            replies = split(await self.storage.execute_each(ops), parts, len(batch))
            for (_, future), reply in zip(batch, replies, strict=True):
                if future.done():
                    continue
                if isinstance(reply, ResponseError):
                    future.set_exception(reply)
                else:
                    future.set_result(reply)
        except BaseException as exc:
            for _, future in batch:
                if future.done():
                    continue
                if isinstance(exc, asyncio.CancelledError):
                    future.cancel()  # the loop is closing: its callers are cancelled too
                else:
                    future.set_exception(_own(exc))
            if not isinstance(exc, Exception):
                raise
        finally:
            self._next()


def acoalescer(storage: AsyncStorage) -> AsyncCoalescer:
    found = storage.coalescer
    if found is None:
        found = storage.coalescer = AsyncCoalescer(storage)
    return found
