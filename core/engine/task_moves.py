"""Task moves: every state change of a task, each one Lua script (``scripts/*.lua``): enqueue,
fetch, ack, fail, renew, release, reap, promote, and the operator's redo (``requeue``) and
delete (``remove``); with the values they take and return (:class:`Leased`,
:class:`Finished`, :class:`EnqueueEntry`, ...).

Separate because this is the state machine itself, the part the worker's hot loop runs:
write methods come in two forms, ``x(...)`` that runs now and ``x_op(...)`` that returns an
operation for :meth:`Storage.execute`, so callers batch several moves into one round trip
(transactions, a worker's ack + next fetch).

A reply lost on its way back (a timeout, a reset connection, while Redis applied the call)
does no harm when the call is sent again, by the client's retries or by the worker's next
round trip (docs/design.md, "Lost replies"): a fetch carries a request id, and the same
request gets the same leases; an ack, a failure or a renewal presents the run's token, and
one that already went through is answered as the first time, never refused.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ztq.core.engine.scripts import Op
from ztq.core.engine.transport import Transport
from ztq.core.engine.wire.framing import KeyList, TailedKeys
from ztq.core.states import Priority

DEFAULT_RESULT_TTL_MS = 3_600_000
DEFAULT_HISTORY_MAXLEN = 10_000
# leftovers one purge call drops at most (about 3 commands each): a call stays short behind
# a long run of them, and Storage.remove calls again
PURGE_DROPS = 1000
# a fetch's first reply field from here on: held back by the queue's rate limit (fetch.lua)
THROTTLED = 2


@dataclass(frozen=True)
class Leased:
    """A task handed to a worker: run it, then ack or fail it presenting ``token``.

    ``token`` is unique to this lease and larger than any earlier one of the queue, so a
    write that presents it after the lease was lost is refused. ``failures`` counts the
    failed runs before this one in the series (what a task's ``retries`` limits; lost
    leases are counted apart, against ``max_lost``).
    """

    id: str
    queue: str
    token: int
    payload: str
    failures: int = 0
    # when the task expires (``expires=``), on this process's ``time.monotonic()``: a task
    # held past it before it starts is given back, not run (docs/queue-controls.md)
    expires_at: float | None = None

    def expired(self, now: float | None = None) -> bool:
        """Has its expiry passed (a task that waited in a leased batch)?"""
        at = self.expires_at
        return at is not None and (time.monotonic() if now is None else now) >= at


class EnqueueEntry(NamedTuple):
    """One task for :meth:`Storage.enqueue_op`."""

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
BATCH_FLAG = "#batch"  # ack's last reply element when a batch member ended (no id has '#')


class Reaped(NamedTuple):
    items: list[tuple[str, str, str]]  # (id, worker that lost it, 'ready' or 'error')
    next_deadline: int | None  # the earliest lease deadline left (Redis clock, ms)
    now: int

    @property
    def wait(self) -> float | None:
        """Seconds until the next lease may expire, or None when nothing runs."""
        if self.next_deadline is None:
            return None
        return max(0.0, (self.next_deadline - self.now) / 1000)


class Promoted(NamedTuple):
    moved: int
    next_due: int | None  # epoch ms on Redis's clock, None when nothing is delayed
    now: int  # Redis's clock when it answered (ms)

    @property
    def wait(self) -> float | None:
        """Seconds until the next delayed task is due, or None."""
        return None if self.next_due is None else max(0.0, (self.next_due - self.now) / 1000)


@dataclass(frozen=True)
class Finished:
    """One successful run to acknowledge."""

    id: str
    token: int
    task: str
    result: str = ""  # JSON text, '' when the result is not kept
    ttl_ms: int | None = None  # how long the finished record is kept; None: the ack's default


class TaskMoves(Transport):
    """The script calls that move tasks between ready, delayed, running, done and errors."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # the request id of each executor's (queue, worker, thread) fetch until its reply
        # is read: a fetch sent again after a lost reply keeps it (see fetch_op)
        self._fetch_ids: dict[tuple[str, str, str], str] = {}
        self._fetch_of: dict[str, tuple[str, str, str]] = {}  # request id -> its executor
        self._fetch_keys: dict[tuple[str, str, str], list[str]] = {}

    def _key_list(self, script: str, queue: str) -> list[str]:
        """KEYS of the hot-path scripts (enqueue, fetch), built once per queue."""
        keys = self._key_lists.get((script, queue))
        if keys is None:
            k = self.keys
            if script == "enqueue":
                keys = [
                    k.tasks(queue),
                    *k.ready_all(queue),
                    k.delayed(queue),
                    k.errors(queue),
                    k.done(queue),
                    k.wake(queue),
                    k.cronlast(queue),
                    k.schedule(queue),
                    k.config(queue),
                    k.overflow(queue),
                    k.totals(queue),
                    k.paused(queue),
                    k.running(queue),
                    k.fence(queue),
                    k.waiter(queue),
                    k.hand(queue),
                    k.rate(queue),
                ]
            else:
                keys = [
                    k.tasks(queue),
                    *k.ready_all(queue),
                    k.running(queue),
                    k.paused(queue),
                    k.wake(queue),
                    k.fence(queue),
                    k.config(queue),
                    k.overflow(queue),
                    k.room(queue),
                    k.waiter(queue),
                    k.hand(queue),
                ]
            keys = self._key_lists[(script, queue)] = KeyList(keys)
            keys.queue = queue
        return keys

    # -- enqueue -----------------------------------------------------------------------------
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
        keys = self._key_list("enqueue", queue)
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
        tail = [head + (request or self.request_id())]
        args.append(self.request_window_ms)
        if once is not None:
            tail.append(self.keys.once(queue, once[0]))
            args.append(int(once[1]))
        return ("enqueue", TailedKeys(keys, tail), args)

    # -- worker side -------------------------------------------------------------------------
    def fetch_op(
        self,
        queue: str,
        worker: str,
        thread: str,
        lease_ms: int,
        limit: int,
        wait_ms: int = 0,
        *,
        result_ttl_ms: int = DEFAULT_RESULT_TTL_MS,
        history_maxlen: int = DEFAULT_HISTORY_MAXLEN,
    ) -> Op:
        """The fetch script call; ``wait_ms`` > 0 registers the caller as the queue's waiting
        executor when it takes nothing (see :meth:`handed`).

        It carries a request id, the same for every fetch of this executor (``queue``,
        ``worker``, ``thread``) until :meth:`parse_fetch` reads a reply to it: a fetch whose
        reply was lost, sent again, gets the leases the first one took (not new ones, while
        those would idle until their lease ran out). ``result_ttl_ms`` and
        ``history_maxlen`` are for the expired tasks the fetch meets (they end there)."""
        executor = (queue, worker, thread)
        rid = self._fetch_ids.get(executor)
        if rid is None:
            rid = self._fetch_ids[executor] = os.urandom(8).hex()
            self._fetch_of[rid] = executor
        keys = self._fetch_keys.get(executor)
        if keys is None:
            k = self.keys
            mine = k.fetched(queue, f"{worker}/{thread}")
            keys = [*self._key_list("fetch", queue), mine]
            self._fetch_keys[executor] = keys
        k, at = self.keys, time.time()
        keys = [*keys, k.done(queue), k.history(queue), k.stats(queue, int(at // 60)),
                k.stats5(queue, int(at // 300)), k.totals(queue), k.batch_out(queue),
                k.rate(queue), k.delayed(queue), k.schedule(queue)]  # fmt: skip
        args = [worker, thread, int(lease_ms), int(limit), int(wait_ms), rid,
                int(result_ttl_ms), int(history_maxlen)]  # fmt: skip
        return ("fetch", keys, args)

    def parse_fetch(self, queue: str, reply: Sequence[Any]) -> list[Leased]:
        """The leases of a fetch's reply; its request is answered (the executor's next
        fetch is a new one)."""
        executor = self._fetch_of.pop(str(reply[1]), None) if len(reply) > 1 else None
        if executor is not None:
            self._fetch_ids.pop(executor, None)
        if reply and int(reply[0]) >= THROTTLED:
            return []
        now = time.monotonic()
        return [
            Leased(str(reply[i]), queue, int(reply[i + 1]), str(reply[i + 3]), int(reply[i + 2]),
                   None if int(reply[i + 4]) < 0 else now + int(reply[i + 4]) / 1000)
            for i in range(2, len(reply), 5)
        ]  # fmt: skip

    @staticmethod
    def fetch_registered(reply: Sequence[Any]) -> bool:
        """Did this fetch make the caller the queue's waiter (it took nothing)?"""
        return bool(reply) and int(reply[0]) == 1

    @staticmethod
    def fetch_throttled(reply: Sequence[Any]) -> float | None:
        """The queue's rate limit held this fetch back (tasks are ready, no token is): the
        seconds until the next token when the caller is the executor registered to fetch
        it then (it sleeps until that instant), ``math.inf`` when another one is (it waits
        as when idle, until woken); None when the fetch was not throttled."""
        if not reply or int(reply[0]) < THROTTLED:
            return None
        if int(reply[0]) == THROTTLED:
            return math.inf
        return int(reply[2]) / 1000

    def fetch(
        self, queue: str, worker: str, thread: str, lease_ms: int, limit: int = 1
    ) -> list[Leased]:
        name, keys, args = self.fetch_op(queue, worker, thread, lease_ms, limit)
        return self.parse_fetch(queue, self.call(name, keys, args))

    def _finish_keys(self, queue: str, now: float | None) -> list[str]:
        """KEYS of ack.lua and fail.lua (one layout for both)."""
        k = self.keys
        at = time.time() if now is None else now
        minute = int(at // 60)
        return [
            k.tasks(queue),
            k.running(queue),
            k.done(queue),
            k.errors(queue),
            k.delayed(queue),
            k.history(queue),
            k.stats(queue, minute),
            *k.ready_all(queue),
            k.wake(queue),
            k.schedule(queue),
            k.stats5(queue, int(at // 300)),
            k.totals(queue),
            k.config(queue),
            k.batch_out(queue),
        ]

    def ack_op(
        self,
        queue: str,
        worker: str,
        items: Iterable[Finished],
        *,
        result_ttl_ms: int = DEFAULT_RESULT_TTL_MS,
        history_maxlen: int = DEFAULT_HISTORY_MAXLEN,
        now: float | None = None,
        compact: bool = False,
    ) -> Op:
        """``compact``: the finished records keep state and times only (ack.lua, ARGV 2)."""
        keys = self._finish_keys(queue, now)
        ttl = f"c{int(result_ttl_ms)}" if compact else int(result_ttl_ms)
        args: list[Any] = [worker, ttl, int(history_maxlen)]
        for it in items:
            args += [it.id, it.token, it.task, it.result]
        return ("ack", keys, args)

    def ack(self, queue: str, worker: str, items: Iterable[Finished], **kw: Any) -> list[str]:
        """Acknowledge finished runs; returns the ids whose ack was refused: their run lost
        its lease (reaped, handed on). A run acknowledged already (the same ack sent again)
        and a record that is gone are not refused."""
        name, keys, args = self.ack_op(queue, worker, items, **kw)
        return [str(x) for x in self.call(name, keys, args) if x != BATCH_FLAG]

    def fail_op(
        self,
        queue: str,
        worker: str,
        task_id: str,
        token: int,
        task: str,
        error: str,
        traceback: str,
        *,
        retry_delay_ms: int = -1,
        history_maxlen: int = DEFAULT_HISTORY_MAXLEN,
        now: float | None = None,
    ) -> Op:
        keys = self._finish_keys(queue, now)
        args = [worker, task_id, token, task, error, traceback, int(retry_delay_ms), history_maxlen]
        return ("fail", keys, args)

    def fail(
        self,
        queue: str,
        worker: str,
        task_id: str,
        token: int,
        task: str,
        error: str,
        traceback: str,
        **kw: Any,
    ) -> str:
        """Record a failed run: returns 'error', 'retry', 'rerun', 'refused' (the run lost
        its lease), or 'gone' (no record). The same failure sent again gets the first one's
        answer."""
        name, keys, args = self.fail_op(queue, worker, task_id, token, task, error, traceback, **kw)
        return str(self.call(name, keys, args))

    def renew(
        self, queue: str, worker: str, lease_ms: int, held: Iterable[tuple[str, int]]
    ) -> list[str]:
        """Extend leases; returns the ids this worker does not hold any more (not those
        whose run it acknowledged or failed meanwhile)."""
        args: list[Any] = [worker, int(lease_ms)]
        for task_id, token in held:
            args += [task_id, token]
        if len(args) == 2:
            return []
        reply = self.call("renew", [self.keys.tasks(queue), self.keys.running(queue)], args)
        return [str(x) for x in reply]

    def release(self, queue: str, worker: str, held: Sequence[tuple[str, int]]) -> int:
        """Put leased tasks back at the head of ready (in their order); returns how many."""
        if not held:
            return 0
        k = self.keys
        keys = [k.tasks(queue), k.running(queue), *k.ready_all(queue), k.wake(queue)]
        args: list[Any] = [worker]
        for task_id, token in held:
            args += [task_id, token]
        return int(self.call("release", keys, args))

    def set_run_info(
        self, queue: str, task_id: str, token: int, worker: str, field: str, value: str
    ) -> bool:
        """Store progress / comment / pid of a running task; False (nothing stored) when
        this run (``token``, ``worker``) does not hold the task's lease any more."""
        return bool(self.call(*self.run_info_op(queue, task_id, token, worker, field, value)))

    def run_info_op(
        self, queue: str, task_id: str, token: int, worker: str, field: str, value: str
    ) -> Op:
        if field not in ("progress", "comment", "pid"):
            raise ValueError(f"unknown run info field {field!r}")
        return ("progress", [self.keys.tasks(queue)], [task_id, token, worker, field, value])

    def reap(self, queue: str, max_lost: int, limit: int = 100) -> Reaped:
        """Return expired leases to ready (or errors); say when the next lease expires."""
        k = self.keys
        keys = [
            k.tasks(queue),
            k.running(queue),
            k.errors(queue),
            *k.ready_all(queue),
            k.wake(queue),
            k.config(queue),
            k.hand(queue),
            k.batch_out(queue),
        ]
        flat, nxt, now = self.call("reap", keys, [int(max_lost), int(limit)])
        items = [(str(flat[i]), str(flat[i + 1]), str(flat[i + 2])) for i in range(0, len(flat), 3)]
        return Reaped(items, None if int(nxt) < 0 else int(nxt), int(now))

    def promote(self, queue: str, limit: int = 1000) -> Promoted:
        """Move due delayed tasks to ready; say when the next one is due (Redis clock, ms)."""
        k = self.keys
        keys = [k.tasks(queue), k.delayed(queue), *k.ready_all(queue), k.wake(queue)]
        moved, nxt, now = self.call("promote", keys, [int(limit)])
        return Promoted(int(moved), None if int(nxt) < 0 else int(nxt), int(now))

    # -- operator moves ----------------------------------------------------------------------
    def requeue(self, queue: str, state: str, ids: Sequence[str] = (), *, oldest: int = 0) -> int:
        """Move tasks from errors (``state='error'``) or delayed back to ready."""
        k = self.keys
        source = k.errors(queue) if state == "error" else k.delayed(queue)
        keys = [k.tasks(queue), source, *k.ready_all(queue), k.wake(queue)]
        mode = "oldest" if oldest else "ids"
        if mode == "ids" and not ids:
            return 0
        return int(self.call("requeue", keys, [state, mode, max(oldest, 1), *ids]))

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
            deleted, taken, dropped = self.call("remove", keys, args)
            # a call stopped on a run of leftovers before any task: not done, call again
            # (each call stays short; taken = 0 must mean the lists are empty)
            if int(taken) or int(dropped) < PURGE_DROPS or not purge:
                return int(deleted), int(taken)
