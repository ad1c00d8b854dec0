"""What ``enqueue`` returns, and ``ping``: ask Redis where a task is now."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ztq.core.connection import get_storage
from ztq.core.record import TaskRecord
from ztq.core.states import TaskState


@dataclass(frozen=True)
class TaskHandle:
    """A reference to an enqueued task. ``outcome`` says what the enqueue did:
    'added', 'exists', 'moved', 'rerun', 'skipped' or 'buffered' (inside a transaction)."""

    id: str
    queue: str
    connection: str = "default"
    outcome: str = "added"

    def record(self) -> TaskRecord | None:
        return get_storage(self.connection).record(self.queue, self.id)

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


def ping(task: TaskHandle | str, queue: str | None = None, *, connection: str = "default") -> str:
    """The state of a task: queued, delayed, running, error, done or none.

    With a bare id and no ``queue``, every known queue is searched (one round trip).
    """
    if isinstance(task, TaskHandle):
        return task.state.value
    storage = get_storage(connection)
    queue = queue or storage.locate(task)
    if queue is None:
        return TaskState.NONE.value
    rec = storage.record(queue, task)
    return TaskState.NONE.value if rec is None else rec.state.value
