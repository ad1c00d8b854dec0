"""Batches (docs/batches.md): a group of tasks with callbacks that run exactly once when all
of them ended (``on_complete``) and when all of them are done (``on_success``).

``with batch(...) as b:`` (or ``async with``) buffers the enqueues made in it, as
``transaction()`` does, and writes the batch and its members at exit in one round trip (one
``MULTI``/``EXEC`` on a single Redis: no reader sees it half made). The ends of members reach
the batch through the relay (:func:`relay`), which the worker runs after an ack or a failure
that ended a member, and in its periodic sweep; the relay also sends the callbacks, each
guarded by a once-key in its queue, so a replay never sends one twice.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ztq.core.client.apps import app_or_default
from ztq.core.client.buffer import BatchBuffer, block_buffer
from ztq.core.client.calls import TaskCall
from ztq.core.client.enqueue import entry, faults, placed
from ztq.core.client.handle import TaskHandle
from ztq.core.engine.keys import shard_for
from ztq.core.engine.parts.batches import BatchStatus
from ztq.core.engine.storage import Storage
from ztq.core.errors import ConfigError, InvalidOption, NotFound, QueueFull, ResultTimeout

if TYPE_CHECKING:
    from ztq.core.client.app import App

DEFAULT_BATCH_TTL = 7 * 24 * 3600.0  # seconds a finished batch is kept (``batch_ttl``)
CHUNK = 500  # members per enqueue call, as a transaction's
STATUS_CHUNK = 500  # members read per round trip (a chord's results)

# Where the running task is, if any: (storage, queue, task id). The worker sets it
# (ztq.worker.context) so that a batch opened inside a member task becomes its child.
run_locator: Callable[[], tuple[Storage, str, str] | None] = lambda: None  # noqa: E731


class Batch:
    """An open batch: a context manager that collects the enqueues made in it.

    After the block, ``id``, ``handles`` (the members' handles), :meth:`status` and
    :meth:`wait` describe it. See :func:`batch`."""

    def __init__(
        self,
        app: App | None = None,
        *,
        on_complete: TaskCall | None = None,
        on_success: TaskCall | None = None,
        description: str = "",
        pass_results: bool = False,
        connection: str = "default",
        ttl: float | None = None,
        batch_id: str | None = None,
    ) -> None:
        for name, value in (("on_complete", on_complete), ("on_success", on_success)):
            if value is not None and not isinstance(value, TaskCall):
                raise InvalidOption(f"{name} must be a prepared task (fn.prepare(...)), "
                                    f"not {value!r}")  # fmt: skip
        if not isinstance(description, str) or len(description) > 500:
            raise InvalidOption("description must be a str of at most 500 characters")
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float))
                                or ttl <= 0):  # fmt: skip
            raise InvalidOption(f"ttl must be a number of seconds > 0, not {ttl!r}")
        self.app = app_or_default(app)
        self.on_complete, self.on_success = on_complete, on_success
        self.description, self.pass_results = description, bool(pass_results)
        self.connection = connection
        self.ttl = float(ttl if ttl is not None else DEFAULT_BATCH_TTL)
        if batch_id is not None and (
            not batch_id or len(batch_id) > 200 or any(c.isspace() for c in batch_id)
        ):
            raise InvalidOption(
                f"batch_id must be 1 to 200 characters without spaces, tabs or newlines, not "
                f"{batch_id!r} (it is part of keys and of tab-separated outbox entries)"
            )
        self.id = batch_id or os.urandom(8).hex()
        self.handles: list[TaskHandle] = []
        self.parent = ""
        self.total = 0
        self._buffer: BatchBuffer | None = None
        self._token: Any = None

    def __repr__(self) -> str:
        return f"<Batch {self.id} {self.description!r}>"

    @property
    def storage(self) -> Storage:
        return self.app.connections.get(self.connection)

    # -- the block ---------------------------------------------------------------------------
    def __enter__(self) -> Batch:
        if type(block_buffer.get()) is BatchBuffer:
            raise ConfigError(
                "a batch inside a batch block: open the child batch inside a member task "
                "(it becomes a child of that task's batch), or close the first block"
            )
        if self._buffer is not None:
            raise ConfigError(f"batch {self.id} was opened already: make a new batch()")
        self._buffer = BatchBuffer(self.id)
        self._token = block_buffer.set(self._buffer)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        block_buffer.reset(self._token)
        self._buffer.closed = True  # type: ignore[union-attr]
        if kind is None:  # an exception writes nothing
            self._write()

    async def __aenter__(self) -> Batch:
        return self.__enter__()

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        block_buffer.reset(self._token)
        self._buffer.closed = True  # type: ignore[union-attr]
        if kind is None:
            await asyncio.to_thread(self._write)

    def _write(self) -> None:
        """The batch record and every member: one MULTI/EXEC on a single Redis; on a
        Cluster the record first, then the members (a reader sees them pending)."""
        assert self._buffer is not None
        items = list(self._buffer)
        storage = self.storage
        others = {c.connection for c, _ in items} - {self.connection}
        if others:
            raise ConfigError(f"batch {self.id}: every member must use the batch's connection "
                              f"{self.connection!r}, not {sorted(others)}")  # fmt: skip
        with faults(storage):
            self.parent = _parent_batch(storage)
            by_queue: dict[str, list[int]] = {}
            members: list[str] = []
            for pos, (call, task_id) in enumerate(items):
                queue = placed(self.app, call, task_id, storage)
                by_queue.setdefault(queue, []).append(pos)
                members.append(f"{queue}:{task_id}")
            given = (("complete", self.on_complete), ("success", self.on_success))
            # the shard count is fixed here: every relayer puts the callback (and its
            # once-guard) in the same shard, whatever its own app declares
            callbacks = {kind: {**c.to_dict(), "shards": c.shards or
                                self.app.registry.shards(c.queue)}
                         for kind, c in given if c is not None}  # fmt: skip
            create = storage.batches.batch_create_op(
                self.id, members, description=self.description, callbacks=json.dumps(callbacks),
                on_complete=self.on_complete is not None, on_success=self.on_success is not None,
                pass_results=self.pass_results, parent=self.parent, ttl_ms=int(self.ttl * 1000),
            )  # fmt: skip
            ops, chunks = [], []
            for queue, positions in by_queue.items():
                for start in range(0, len(positions), CHUNK):
                    chunk = positions[start : start + CHUNK]
                    ops.append(storage.tasks.enqueue_op(queue, [entry(*items[p], batch=self.id)
                                                          for p in chunk]))  # fmt: skip
                    chunks.append((queue, chunk))
            if storage.is_cluster:
                created, replies = storage.call(*create), storage.execute(ops)
            else:
                created, *replies = storage.batches.execute_atomic([create, *ops])
            self.total = int(created[1])
            refused: list[str] = []
            for (queue, chunk), reply in zip(chunks, replies, strict=True):
                for n in range(len(chunk)):
                    rid, outcome = str(reply[2 * n]), str(reply[2 * n + 1])
                    if outcome == "full":  # never written: it ends now, failed
                        storage.batches.batch_end(self.id, f"{queue}:{rid}", "failed", 0)
                        refused.append(rid)
                        continue
                    self.handles.append(TaskHandle(rid, queue, self.connection, outcome, self.app))
            if refused:
                send_callbacks(storage, self.app)
        if refused:
            raise QueueFull(
                chunks[0][0], None, f"{len(refused)} member(s) of batch {self.id} met a full "
                "queue: they count as failed", refused, list(self.handles),
            )  # fmt: skip
        if not items:
            send_callbacks(storage, self.app)  # an empty batch ended at once

    # -- after the block ---------------------------------------------------------------------
    def status(self) -> BatchStatus:
        """See :func:`batch_status`. Inside its block the batch is not written yet: a
        :class:`NotFound` says so (not "never made, or expired", issue 39)."""
        if self._buffer is not None and not self._buffer.closed:
            raise NotFound(
                f"batch {self.id} is written when its block ends: call status() after the "
                "with block (nothing of it is in Redis yet)"
            )
        return batch_status(self.storage, self.id)

    def callback(self, kind: str = "complete") -> TaskHandle:
        """The handle of the batch's ``on_complete`` (``kind="complete"``) or ``on_success``
        (``"success"``) task, once the relay sent it (its id is the batch's and the kind's:
        :func:`callback_id`); ``get()`` waits for its result."""
        call = {"complete": self.on_complete, "success": self.on_success}.get(kind)
        if call is None:
            raise InvalidOption(f"batch {self.id} has no on_{kind} callback")
        cid = callback_id(self.id, kind)
        shards = call.shards or self.app.registry.shards(call.queue)
        return TaskHandle(cid, shard_for(call.queue, cid, shards), self.connection,
                          "added", self.app)  # fmt: skip

    def wait(self, timeout: float | None = None, *, success: bool = False) -> BatchStatus:
        """Block until every member ended (``success=True``: until every member is done),
        then return the status; :class:`ResultTimeout` when ``timeout`` seconds pass first.
        A blocking read on the event the completing script pushes: no polling. The
        callbacks due are enqueued by then."""
        event = "success" if success else "complete"
        if not self.storage.batches.wait_batch(self.id, event, timeout):
            raise ResultTimeout(f"batch {self.id} did not {event} within {timeout} s")
        # the callbacks due are enqueued before this returns (once-guarded: whoever relays
        # first sends them), so that callback(kind).get() finds them
        send_callbacks(self.storage, self.app)
        return self.status()


def batch(
    *,
    on_complete: TaskCall | None = None,
    on_success: TaskCall | None = None,
    description: str = "",
    pass_results: bool = False,
    connection: str = "default",
    ttl: float | None = None,
    app: App | None = None,
) -> Batch:
    """A batch of the default app (or ``app``): ``with batch(...) as b:`` collects every
    task enqueued in the block (``delay``, ``enqueue``; ``await adelay`` in ``async with``)
    and writes them, with the batch, at exit. ``on_complete`` runs once when every member
    ended (done or in the error list), ``on_success`` once when every member is done (also
    after failed members were redone); ``pass_results=True`` gives the callbacks the
    members' results, in enqueue order, as their first argument. ``ttl``: seconds a
    finished batch is kept (default 7 days)."""
    return Batch(app, on_complete=on_complete, on_success=on_success, description=description,
                 pass_results=pass_results, connection=connection, ttl=ttl)  # fmt: skip


def _parent_batch(storage: Storage) -> str:
    """The batch of the task running here, if it is a member of one: the new batch is its
    child (the parent completes after it)."""
    where = run_locator()
    if where is None:
        return ""
    run_storage, queue, task_id = where
    return run_storage.batches.task_batch(queue, task_id)


def batch_status(storage: Storage, batch_id: str) -> BatchStatus:
    """See :meth:`Batches.batch_status` (:class:`NotFound` for an unknown batch)."""
    return storage.batches.batch_status(batch_id)


# -- the relay --------------------------------------------------------------------------------
def relay(
    storage: Storage, queues: list[str] | tuple[str, ...] = (), app: App | None = None
) -> int:
    """Apply the members' ends waiting in ``queues``' outboxes to their batches, then send
    the callbacks (and children's ends) that became due. Safe to run anywhere, any number
    of times at once: each end is applied once (by fence), each callback sent once (by its
    once-key). Returns how many ends were applied or replayed."""
    busy, sends = storage.batches.outboxes_waiting(list(queues))
    n = sum(storage.batches.relay_queue(q) for q in busy)
    if n or sends:
        send_callbacks(storage, app_or_default(app))
    return n


def send_callbacks(storage: Storage, app: App, rounds: int = 20) -> int:
    """Work off the global outbox: a child's end goes to its parent (which may complete in
    turn and add entries: up to ``rounds`` rounds here, the rest next time), a callback is
    enqueued with its once-guard. Each entry is removed after it was done (a callback its
    full queue refused stays, for the next relay)."""
    sent = 0
    for _ in range(rounds):
        entries = storage.batches.batch_sends()
        if not entries:
            break
        for text in entries:
            parts = text.split("\t")
            if parts[0] == "up" and len(parts) == 5:
                storage.batches.batch_end(parts[1], parts[2], parts[3], parts[4], send_entry=text)
                continue
            if parts[0] == "cb" and len(parts) == 3:
                got = _send_callback(storage, app, parts[1], parts[2])
                if got < 0:  # its queue is full: the entry stays, sent again next time
                    continue
                sent += got
            storage.batches.batch_sent(text)
    return sent


def callback_id(batch_id: str, kind: str) -> str:
    """The id of a batch's callback: the same for every relayer (the once-guard's key)."""
    return f"batch.{batch_id}.{kind}"


def _send_callback(storage: Storage, app: App, batch_id: str, kind: str) -> int:
    rec = storage.batches.batch_record(batch_id)
    data = json.loads(rec.get("callbacks") or "{}").get(kind) if rec else None
    if rec is None or not data:
        return 0
    call = TaskCall.from_dict(data, app)
    if rec.get("pass_results") == "1":
        call = call.with_options(args=(ordered_results(storage, batch_id), *call.args))
    cid = callback_id(batch_id, kind)
    call = call.with_options(id=cid)
    queue = placed(app, call, cid, storage)
    ttl_ms = int(rec.get("ttl") or DEFAULT_BATCH_TTL * 1000)
    reply = storage.call(*storage.tasks.enqueue_op(queue, [entry(call, cid)], once=(cid, ttl_ms)))
    return {"once": 0, "full": -1}.get(str(reply[1]), 1)


def ordered_results(storage: Storage, batch_id: str) -> list[Any]:
    """The members' results in enqueue order (None for a member without one)."""
    results = storage.batches.batch_results(batch_id)
    out: list[Any] = []
    offset = 0
    while True:
        page = storage.batches.batch_page(batch_id, offset, STATUS_CHUNK)
        if not page:
            return out
        offset += len(page)
        out += [json.loads(results[m]) if m in results else None for m, _ in page]
