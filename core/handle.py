"""What ``enqueue`` returns, and ``ping``: ask Redis where a task is now."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

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


@dataclass(frozen=True)
class TaskHandle:
    """A reference to an enqueued task. ``outcome`` says what the enqueue did:
    'added', 'exists', 'moved', 'rerun', 'skipped' or 'buffered' (inside a transaction)."""

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
        """The return value, while the finished record is kept (``result_ttl``)."""
        rec = self.record()
        return None if rec is None else rec.result

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
