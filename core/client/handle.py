"""What ``enqueue`` returns, and ``ping``: ask Redis where a task is now."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ztq.core.client.aio import astorage
from ztq.core.client.apps import app_or_default
from ztq.core.client.buffer import block_buffer
from ztq.core.engine.record import TaskRecord
from ztq.core.engine.storage import Storage
from ztq.core.errors import NotFound, ResultTimeout, TaskExpired, TaskFailed
from ztq.core.states import TaskState

if TYPE_CHECKING:
    from ztq.core.client.app import App


R = TypeVar("R")
FINISHED = ("done", "failed", "expired")  # history statuses that may end a wait ('retry' does not)


@dataclass(frozen=True)
class TaskHandle(Generic[R]):
    """A reference to an enqueued task; ``R`` is its function's return type. ``outcome``
    says what the enqueue did: 'added', 'exists', 'moved', 'rerun', 'skipped' or
    'buffered' (inside a transaction). ``queue`` is where the task lives: its queue, or
    for a sharded queue the shard its id hashes to (``mail~2``)."""

    id: str
    queue: str
    connection: str = "default"
    outcome: str = "added"
    app: App | None = field(default=None, repr=False, compare=False)  # None: the default app

    @property
    def storage(self) -> Storage:
        return app_or_default(self.app).connections.get(self.connection)

    def record(self) -> TaskRecord | None:
        return self.storage.tasks.record(self.queue, self.id)

    @property
    def state(self) -> TaskState:
        rec = self.record()
        return TaskState.NONE if rec is None else rec.state

    @property
    def result(self) -> Any:
        """The return value, while the finished record is kept (``result_ttl``); None when
        not finished (see :meth:`get` to tell the two apart)."""
        rec = self.record()
        return None if rec is None else rec.result

    def cancel(self) -> bool:
        """Take the task back before it runs: True when it was queued, buffered (overflow) or
        delayed and is gone now (its record too); False when it is running (kill it from the
        console or the ``ztq`` command), finished, or unknown. Atomic: a worker cannot lease
        it meanwhile."""
        deleted, _ = self.storage.tasks.remove(self.queue, [self.id], cancel=True)
        return deleted == 1

    def ready(self) -> bool:
        """True once the task finished: done, in the error list, or expired."""
        return self.state in (TaskState.DONE, TaskState.ERROR, TaskState.EXPIRED)

    def get(self, timeout: float | None = None) -> R:
        """Wait for the task to finish and return its result (``None`` is a result).

        Raises :class:`TaskFailed` with the remote error when it ends in the error list
        (retries are waited for), :class:`TaskExpired` when it was not started before its
        expiry (``expires=``: it never runs), :class:`ResultTimeout` when ``timeout`` seconds pass
        first, :class:`NotFound` when there is no such task (never enqueued, deleted, or
        its record expired). The wait blocks on the queue's history stream, where every
        finished run is written: no polling, no cost to the workers.
        """
        storage, wait = self.storage, Wait(self, timeout)
        after = storage.waits.history_tail(self.queue)  # before the record: no lost wake-up
        while True:
            rec = storage.tasks.record(self.queue, self.id)
            last = None if rec is not None else storage.waits.finished_lately(self.queue, self.id)
            if wait.settled(rec, last):
                return wait.value  # type: ignore[no-any-return]
            while not wait.finished:
                entries = storage.waits.wait_history(self.queue, after, wait.left())
                if not entries:
                    break  # look at the record again now and then (a trimmed stream)
                after = wait.saw(entries)

    wait = get  # Celery's and RQ's name for the same

    async def await_result(self, timeout: float | None = None) -> R:
        """:meth:`get` from a coroutine: blocks only the awaiting coroutine."""
        return await await_result(self, timeout)  # type: ignore[no-any-return]

    @property
    def progress(self) -> Any:
        rec = self.record()
        return None if rec is None else rec.progress

    def __str__(self) -> str:
        return self.id


class Wait:
    """One wait for a handle's result, shared by :meth:`TaskHandle.get` and its asyncio
    twin: what a record says, what history entries say, and the time left."""

    def __init__(self, handle: TaskHandle[Any], timeout: float | None) -> None:
        self.handle, self.timeout = handle, timeout
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.finished = False  # the task's run was seen finishing since the last look
        self.seen: str | None = None  # how it finished then (a history status)
        self.value: Any = None

    def settled(self, rec: TaskRecord | None, last: str | None) -> bool:
        """True when ``rec`` ends the wait (``value`` is the result); raises for a failure,
        an expiry or no such task; False while the task is pending. ``last``: the status of
        the task's latest history entry when it has no record."""
        h = self.handle
        if rec is None:
            if "expired" in (last, self.seen):  # expired, its record not kept
                raise TaskExpired(h.id)
            if self.finished or last == "done":  # finished, its record not kept
                return True
            raise NotFound(
                f"no task {h.id} in queue {h.queue}: never enqueued, deleted, "
                "or its finished record expired (result_ttl)"
            )
        if rec.state == TaskState.DONE:
            self.value = rec.result
            return True
        if rec.state == TaskState.EXPIRED:
            exp = rec.get("exp")
            raise TaskExpired(h.id, int(exp) if isinstance(exp, (int, float)) else None)
        if rec.state == TaskState.ERROR:
            kind, _, message = str(rec.get("error") or "").partition(": ")
            raise TaskFailed(h.id, kind, message, str(rec.get("traceback") or ""))
        self.finished = False
        return False

    def left(self) -> float:
        """Seconds to block next (8 at most), or ResultTimeout when time is up."""
        if self.deadline is None:
            return 8.0
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise ResultTimeout(f"task {self.handle.id} had not finished after {self.timeout}s")
        return left

    def saw(self, entries: list[tuple[str, dict[str, str]]]) -> str:
        """Note whether the task's run finished among ``entries``; the id to read after."""
        mine = [f.get("status") for _, f in entries
                if f.get("id") == self.handle.id and f.get("status") in FINISHED]  # fmt: skip
        self.finished, self.seen = bool(mine), (mine[-1] if mine else None)
        return entries[-1][0]


def ping(
    task: TaskHandle | str,
    queue: str | None = None,
    *,
    connection: str = "default",
    app: App | None = None,
) -> str:
    """The state of a task: queued, delayed, running, error, done, expired or none.

    With a bare id and no ``queue``, every known queue of ``app`` (default: the default app)
    is searched (one round trip); with a sharded ``queue``, its shards are.
    """
    if isinstance(task, TaskHandle):
        state = task.state.value
        if state == "none" and task.outcome == "buffered" and block_buffer.get() is not None:
            raise NotFound(
                f"task {task.id} is written when the transaction or batch block ends: ping it "
                "after the with block (nothing of it is in Redis yet)"
            )
        return state
    storage = app_or_default(app).connections.get(connection)
    rec = storage.tasks.record(queue, task) if queue else None  # one round trip when it is there
    if rec is None:  # elsewhere: in another shard of ``queue``, or in any queue
        queue = storage.tasks.locate(task, storage.queues.shards_of(queue) if queue else None)
        rec = storage.tasks.record(queue, task) if queue else None
    return TaskState.NONE.value if rec is None else rec.state.value


async def aping(
    app: App, task: Any, queue: str | None = None, *, connection: str = "default"
) -> str:
    """The state of a task, from a coroutine (see :func:`ztq.core.client.handle.ping`)."""
    task_id = getattr(task, "id", task)
    queue = queue or getattr(task, "queue", None)
    storage = await astorage(app, connection)
    queue = queue or await storage.tasks.locate(task_id)
    if queue is None:
        return TaskState.NONE.value
    rec = await storage.tasks.record(queue, task_id)
    return TaskState.NONE.value if rec is None else rec.state.value


async def await_result(handle: TaskHandle[Any], timeout: float | None = None) -> Any:
    """:meth:`TaskHandle.get` for coroutines: the same results and errors, blocking only the
    awaiting coroutine (XREAD BLOCK on its own connection)."""
    storage = await astorage(app_or_default(handle.app), handle.connection)
    wait = Wait(handle, timeout)
    after = await storage.waits.history_tail(handle.queue)
    while True:
        rec = await storage.tasks.record(handle.queue, handle.id)
        last = (
            None
            if rec is not None
            else await storage.waits.finished_lately(handle.queue, handle.id)
        )
        if wait.settled(rec, last):
            return wait.value
        while not wait.finished:
            entries = await storage.waits.wait_history(handle.queue, after, wait.left())
            if not entries:
                break
            after = wait.saw(entries)
