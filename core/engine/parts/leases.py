"""Leases: the worker's side of a task's life, each move one Lua script (``scripts/*.lua``):
fetch (a lease), ack and fail (its end), renew, release, the run's progress, and the reap
of leases that ran out; with the values they take and return (:class:`Leased`,
:class:`Finished`, :class:`Reaped`).

The part of :class:`~ztq.core.engine.storage.Storage` the worker's hot loop runs
(``storage.leases``). A write comes as ``x_op(...)``, the :data:`Op` to send with others in
one round trip (``Storage.execute`` / ``Storage.submit``: a worker's acks and its next
fetch), and, where a caller runs it alone, as ``x(...)`` that sends it now and reads its
reply (see ``ztq.core.engine.storage``).

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
from ztq.core.engine.wire.framing import KeyList

DEFAULT_RESULT_TTL_MS = 3_600_000
DEFAULT_HISTORY_MAXLEN = 10_000
# a fetch's first reply field from here on: held back by the queue's rate limit (fetch.lua)
THROTTLED = 2
BATCH_FLAG = "#batch"  # ack's last reply element when a batch member ended (no id has '#')


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


@dataclass(frozen=True)
class Finished:
    """One successful run to acknowledge."""

    id: str
    token: int
    task: str
    result: str = ""  # JSON text, '' when the result is not kept
    ttl_ms: int | None = None  # how long the finished record is kept; None: the ack's default


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


class Leases:
    """The script calls that lease tasks to executors and end their runs."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.keys = transport.keys  # one Keys per Storage: read on every call, kept here
        self._key_lists: dict[str, KeyList] = {}  # fetch.lua's KEYS, once per queue
        # the request id of each executor's (queue, worker, thread) fetch until its reply
        # is read: a fetch sent again after a lost reply keeps it (see fetch_op)
        self._fetch_ids: dict[tuple[str, str, str], str] = {}
        self._fetch_of: dict[str, tuple[str, str, str]] = {}  # request id -> its executor
        self._fetch_keys: dict[tuple[str, str, str], list[str]] = {}

    def _fetch_key_list(self, queue: str) -> KeyList:
        """KEYS of fetch.lua but the executor's own, built once per queue (the hot path)."""
        keys = self._key_lists.get(queue)
        if keys is None:
            k = self.keys
            keys = self._key_lists[queue] = KeyList(
                queue,
                [k.tasks(queue), *k.ready_all(queue), k.running(queue), k.paused(queue),
                 k.wake(queue), k.fence(queue), k.config(queue), k.overflow(queue),
                 k.room(queue), k.waiter(queue), k.hand(queue)],
            )  # fmt: skip
        return keys

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
        executor when it takes nothing (see :meth:`Waits.wait_handed`).

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
            keys = [*self._fetch_key_list(queue), mine]
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
        return self.parse_fetch(queue, self.transport.call(name, keys, args))

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
        return [str(x) for x in self.transport.call(name, keys, args) if x != BATCH_FLAG]

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
        return str(self.transport.call(name, keys, args))

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
        reply = self.transport.call(
            "renew", [self.keys.tasks(queue), self.keys.running(queue)], args
        )
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
        return int(self.transport.call("release", keys, args))

    def set_run_info(
        self, queue: str, task_id: str, token: int, worker: str, field: str, value: str
    ) -> bool:
        """Store progress / comment / pid of a running task; False (nothing stored) when
        this run (``token``, ``worker``) does not hold the task's lease any more."""
        return bool(
            self.transport.call(*self.run_info_op(queue, task_id, token, worker, field, value))
        )

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
        flat, nxt, now = self.transport.call("reap", keys, [int(max_lost), int(limit)])
        items = [(str(flat[i]), str(flat[i + 1]), str(flat[i + 2])) for i in range(0, len(flat), 3)]
        return Reaped(items, None if int(nxt) < 0 else int(nxt), int(now))
