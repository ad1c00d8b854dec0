"""What ``enqueue`` returns, and ``ping``: ask Redis where a task is now."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ztq.core.errors import NotFound, ResultTimeout, TaskFailed
from ztq.core.record import TaskRecord
from ztq.core.states import TaskState
from ztq.core.storage import Storage

if TYPE_CHECKING:
    from ztq.core.app import App


def app_or_default(app: App | None) -> App:
    """``app``, or the default app when None."""
    if app is not None:
        return app
    from ztq.core.app import default_app

    return default_app()


R = TypeVar("R")
FINISHED = ("done", "failed")  # history statuses that may end a wait ('retry' does not)


@dataclass(frozen=True)
class TaskHandle(Generic[R]):
    """A reference to an enqueued task; ``R`` is its function's return type. ``outcome``
    says what the enqueue did: 'added', 'exists', 'moved', 'rerun', 'skipped' or
    'buffered' (inside a transaction)."""

    id: str
    queue: str
    connection: str = "default"
    outcome: str = "added"
    app: App | None = field(default=None, repr=False, compare=False)  # None: the default app

    @property
    def storage(self) -> Storage:
        return app_or_default(self.app).connections.get(self.connection)

    def record(self) -> TaskRecord | None:
        return self.storage.record(self.queue, self.id)

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

    def ready(self) -> bool:
        """True once the task finished: done, or in the error list."""
        return self.state in (TaskState.DONE, TaskState.ERROR)

    def get(self, timeout: float | None = None) -> R:
        """Wait for the task to finish and return its result (``None`` is a result).

        Raises :class:`TaskFailed` with the remote error when it ends in the error list
        (retries are waited for), :class:`ResultTimeout` when ``timeout`` seconds pass
        first, :class:`NotFound` when there is no such task (never enqueued, deleted, or
        its record expired). The wait blocks on the queue's history stream, where every
        finished run is written: no polling, no cost to the workers.
        """
        storage = self.storage
        deadline = None if timeout is None else time.monotonic() + timeout
        after = storage.history_tail(self.queue)  # before the record: no lost wake-up
        seen_finish = False
        while True:
            rec = storage.record(self.queue, self.id)
            if rec is None:
                # finished, and its record was not kept (result_ttl 0), maybe before we looked
                if seen_finish or storage.finished_lately(self.queue, self.id) == "done":
                    return None  # type: ignore[return-value]
                raise NotFound(
                    f"no task {self.id} in queue {self.queue}: never enqueued, deleted, "
                    "or its finished record expired (result_ttl)"
                )
            if rec.state == TaskState.DONE:
                return rec.result  # type: ignore[no-any-return]
            if rec.state == TaskState.ERROR:
                error = str(rec.get("error") or "")
                kind, _, message = error.partition(": ")
                raise TaskFailed(self.id, kind, message, str(rec.get("traceback") or ""))
            seen_finish = False
            while not seen_finish:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise ResultTimeout(f"task {self.id} had not finished after {timeout}s")
                entries = storage.wait_history(self.queue, after, 8.0 if left is None else left)
                if not entries:
                    break  # look at the record again now and then (a trimmed stream)
                after = entries[-1][0]
                seen_finish = any(
                    f.get("id") == self.id and f.get("status") in FINISHED for _, f in entries
                )

    wait = get  # Celery's and RQ's name for the same

    @property
    def progress(self) -> Any:
        rec = self.record()
        return None if rec is None else rec.progress

    def __str__(self) -> str:
        return self.id


def ping(
    task: TaskHandle | str,
    queue: str | None = None,
    *,
    connection: str = "default",
    app: App | None = None,
) -> str:
    """The state of a task: queued, delayed, running, error, done or none.

    With a bare id and no ``queue``, every known queue of ``app`` (default: the default app)
    is searched (one round trip).
    """
    if isinstance(task, TaskHandle):
        return task.state.value
    storage = app_or_default(app).connections.get(connection)
    queue = queue or storage.locate(task)
    if queue is None:
        return TaskState.NONE.value
    rec = storage.record(queue, task)
    return TaskState.NONE.value if rec is None else rec.state.value
