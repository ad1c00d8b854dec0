"""Batches: the batch state in Redis (docs/batches.md), the part ``storage.batches`` of
:class:`~ztq.core.engine.storage.Storage`: creation, a member's end, the relay of the
outboxes, reads.

Every call here touches keys of one slot: the queue's outbox (``{queue}``) or the batch keys
(``{ztq}``); a member's end crosses from one to the other through the relay, read, apply
(idempotent by fence), then remove (docs/batches.md, "How an end reaches its batch").
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ResponseError

from ztq.core.engine.record import split_record
from ztq.core.engine.scripts import SCRIPTS, Op
from ztq.core.engine.transport import Transport
from ztq.core.errors import NotFound

RELAY_CHUNK = 100  # outbox entries one relay round reads at most
STATUS_CHUNK = 500  # members read per round trip by batch_status (for `running`)
WAIT_BLOCK = 8.0  # seconds a blocking read waits at most (below the socket timeout)


@dataclass(frozen=True)
class OutboxEntry:
    """A member's end as its queue's outbox holds it."""

    text: str  # the entry as stored (removed by its exact text)
    batch: str
    member: str  # ``queue:id``
    outcome: str  # 'done' or 'failed'
    fence: str
    result: str = ""

    @classmethod
    def parse(cls, queue: str, text: str) -> OutboxEntry:
        parts = text.split("\t", 4)
        result = parts[4] if len(parts) > 4 else ""
        return cls(text, parts[0], f"{queue}:{parts[1]}", parts[2], parts[3], result)


@dataclass(frozen=True)
class BatchStatus:
    """A batch as it stands: ``state`` is ``open`` (members to end), ``complete`` (every
    member ended, some failed) or ``success`` (every member done)."""

    id: str
    description: str
    total: int
    pending: int  # not started, or waiting for a retry
    running: int
    done: int
    failed: int
    state: str
    created: int  # ms
    parent: str = ""


class Batches:
    """Batch records, members' ends, the outboxes and the waits on a batch's end."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.keys = transport.keys

    def batch_keys(self, batch_id: str, parent: str = "") -> list[str]:
        """KEYS of ``batch.lua`` (its header lists them)."""
        k = self.keys
        own = [k.batch(batch_id), k.batch_members(batch_id), k.batch_order(batch_id)]
        up = [k.batch(parent), k.batch_members(parent), k.batch_order(parent)] if parent else own
        return [*own, k.batch_results(batch_id), k.batch_complete(batch_id),
                k.batch_success(batch_id), k.batches, k.batches_expiry, k.batch_send,
                *up]  # fmt: skip

    def batch_create_op(
        self,
        batch_id: str,
        members: Sequence[str],
        *,
        description: str = "",
        callbacks: str = "{}",
        on_complete: bool = False,
        on_success: bool = False,
        pass_results: bool = False,
        parent: str = "",
        ttl_ms: int,
    ) -> Op:
        """The call that writes a batch with its members (``queue:id``, enqueue order)."""
        args: list[Any] = ["create", batch_id, int(ttl_ms), description, callbacks,
                           int(on_complete), int(on_success), int(pass_results), parent,
                           *members]  # fmt: skip
        return ("batch", self.batch_keys(batch_id, parent), args)

    def batch_end(
        self,
        batch_id: str,
        member: str,
        outcome: str,
        fence: str | int,
        result: str = "",
        *,
        send_entry: str = "",
    ) -> str:
        """Apply one member's end to its batch: 'applied', 'stale', 'unknown' or 'gone'.
        ``send_entry``: the ``batches:send`` entry this came from, removed in the same call."""
        args = ["end", batch_id, 0, member, outcome, str(fence), result, send_entry]
        return str(self.transport.call("batch", self.batch_keys(batch_id), args))

    def execute_atomic(self, ops: Sequence[Op]) -> list[Any]:
        """Run scripts in one ``MULTI``/``EXEC`` (a single Redis, not a Cluster): no reader
        sees some of them applied and not the others. Sent as ``EVAL`` of the source, which
        cannot fail with NOSCRIPT halfway through (EVALSHA in a transaction could: the
        commands before it would stand)."""
        with self.transport.guard():
            pipe = self.transport.client.pipeline(transaction=True)
            for name, keys, args in ops:
                pipe.execute_command("EVAL", SCRIPTS.source[name], len(keys), *keys, *args)
            return list(pipe.execute())

    # -- the relay ---------------------------------------------------------------------------
    def relay_queue(self, queue: str) -> int:
        """Apply the ends waiting in ``queue``'s outbox to their batches, each then removed
        (a crash in between only applies it again, which changes nothing). Per chunk of up
        to ``RELAY_CHUNK`` ends: 3 round trips (read, apply, remove). Returns how many."""
        key = self.keys.batch_out(queue)
        n = 0
        while True:
            with self.transport.guard():
                raw = self.transport.client.lrange(key, 0, RELAY_CHUNK - 1)
            texts = [r.decode() if isinstance(r, bytes) else r for r in raw]
            ends = [OutboxEntry.parse(queue, text) for text in texts]
            self.transport.execute([("batch", self.batch_keys(e.batch),
                           ["end", e.batch, 0, e.member, e.outcome, e.fence, e.result, ""])
                          for e in ends])  # fmt: skip
            if texts:
                with self.transport.guard():
                    pipe = self.transport.client.pipeline(transaction=False)
                    for text in texts:
                        pipe.lrem(key, 1, text)
                    pipe.execute()
            n += len(texts)
            if len(texts) < RELAY_CHUNK:
                return n

    def outboxes_waiting(self, queues: Sequence[str]) -> tuple[list[str], bool]:
        """Which of ``queues`` have ends waiting in their outbox, and whether the global
        outbox holds anything: one round trip (a pipeline of ``LLEN``), so that a sweep of
        many idle queues costs one call."""
        k = self.keys
        with self.transport.guard():
            pipe = self.transport.client.pipeline(transaction=False)
            for queue in queues:
                pipe.llen(k.batch_out(queue))
            pipe.llen(k.batch_send)
            *lengths, sends = pipe.execute()
        return [q for q, n in zip(queues, lengths, strict=True) if n], bool(sends)

    def batch_sends(self, limit: int = RELAY_CHUNK) -> list[str]:
        """The global outbox's first entries: callbacks to send, children's ends to apply."""
        with self.transport.guard():
            raw = self.transport.client.lrange(self.keys.batch_send, 0, limit - 1)
        return [r.decode() if isinstance(r, bytes) else r for r in raw]

    def batch_sent(self, entry: str) -> None:
        with self.transport.guard():
            self.transport.client.lrem(self.keys.batch_send, 1, entry)

    # -- reads -------------------------------------------------------------------------------
    def batch_record(self, batch_id: str) -> dict[str, str] | None:
        with self.transport.guard():
            raw = self.transport.client.hgetall(self.keys.batch(batch_id))
        if not raw:
            return None
        return {_s(k): _s(v) for k, v in raw.items()}

    def batch_page(self, batch_id: str, offset: int, limit: int) -> list[tuple[str, str]]:
        """Members in enqueue order, a page: (member, ``outcome TAB fence`` or '')."""
        k = self.keys
        with self.transport.guard():
            names = [_s(m) for m in self.transport.client.lrange(k.batch_order(batch_id), offset,
                                                       offset + limit - 1)]  # fmt: skip
            if not names:
                return []
            got = self.transport.client.hmget(k.batch_members(batch_id), names)
        return [(m, _s(v) if v is not None else "") for m, v in zip(names, got, strict=True)]

    def batch_results(self, batch_id: str) -> dict[str, str]:
        with self.transport.guard():
            raw = self.transport.client.hgetall(self.keys.batch_results(batch_id))
        return {_s(k): _s(v) for k, v in raw.items()}

    def task_states(self, queue: str, ids: Sequence[str]) -> list[str]:
        """The state of each task (``none`` when it has no record), one HMGET."""
        if not ids:
            return []
        with self.transport.guard():
            raw = self.transport.client.hmget(self.keys.tasks(queue), list(ids))
        return [split_record(_s(r))[0].get("state", "none") if r else "none" for r in raw]

    def task_batch(self, queue: str, task_id: str) -> str:
        """The batch a task is a member of ('' when none, or no record)."""
        with self.transport.guard():
            raw = self.transport.client.hget(self.keys.tasks(queue), task_id)
        return str(split_record(_s(raw))[0].get("batch", "")) if raw else ""

    def batch_status(self, batch_id: str) -> BatchStatus:
        """Counters of the batch, and ``running``: its members not ended whose record says
        running, read in chunks of the members (one round trip per 500 members and queue)."""
        rec = self.batch_record(batch_id)
        if rec is None:
            raise NotFound(f"no batch {batch_id!r} (never made, or expired after it finished)")
        total, done, failed = int(rec["total"]), int(rec["done"]), int(rec["failed"])
        running = 0
        if done + failed < total:
            offset = 0
            while True:
                page = self.batch_page(batch_id, offset, STATUS_CHUNK)
                if not page:
                    break
                offset += len(page)
                by_queue: dict[str, list[str]] = {}
                for member, ended in page:
                    if not ended and not member.startswith("@"):
                        queue, _, task_id = member.partition(":")
                        by_queue.setdefault(queue, []).append(task_id)
                for queue, ids in by_queue.items():
                    running += self.task_states(queue, ids).count("running")
        state = "success" if rec.get("success") else "complete" if rec.get("complete") else "open"
        pending = total - done - failed - running
        return BatchStatus(batch_id, rec.get("description", ""), total, pending, running, done,
                           failed, state, int(rec.get("created", 0)),
                           rec.get("parent", ""))  # fmt: skip

    def list_batches(self, offset: int = 0, limit: int = 50) -> list[tuple[str, int]]:
        """Batch ids, newest first, with when each was made (ms)."""
        with self.transport.guard():
            raw = self.transport.client.zrevrange(self.keys.batches, offset, offset + limit - 1,
                                        withscores=True)  # fmt: skip
        return [(_s(m), int(s)) for m, s in raw]

    def count_batches(self) -> int:
        with self.transport.guard():
            return int(self.transport.client.zcard(self.keys.batches))

    def wait_batch(self, batch_id: str, event: str, timeout: float | None) -> bool:
        """Block until the batch's ``event`` ('complete' or 'success') happened, or
        ``timeout`` seconds passed (None: for ever); no polling: a blocking read of the
        batch's event list, which the script that completes it pushes to (in slices of
        WAIT_BLOCK, between which a batch gone, its ttl passed, raises NotFound)."""
        key = (self.keys.batch_success if event == "success" else self.keys.batch_complete)(
            batch_id
        )
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self.transport.guard():
                if self.transport.client.exists(key):
                    return True
                if not self.transport.client.exists(self.keys.batch(batch_id)):  # expired meanwhile
                    raise NotFound(f"no batch {batch_id!r} (never made, or expired after it "
                                   "finished)")  # fmt: skip
            left = WAIT_BLOCK if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                with self.transport.guard():  # the list rotated onto itself: nothing is taken
                    self.transport.client.blmove(key, key, min(left, WAIT_BLOCK), "RIGHT", "LEFT")
            except ResponseError:  # pragma: no cover - a server without BLMOVE
                time.sleep(min(left, 0.05))


def _s(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)
