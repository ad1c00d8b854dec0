"""The states a task record can be in (the ``state`` field of its hash)."""

from __future__ import annotations

from enum import Enum


class TaskState(str, Enum):
    QUEUED = "queued"
    OVERFLOW = "overflow"  # in a full queue's overflow buffer (``when_full = buffer``)
    DELAYED = "delayed"
    RUNNING = "running"
    ERROR = "error"
    DONE = "done"
    EXPIRED = "expired"  # not started before its expiry (``expires=``): it never ran
    NONE = "none"  # no record: never enqueued, deleted, or its finished record expired

    def __str__(self) -> str:
        return self.value


class Priority(str, Enum):
    """Ready lists are watched in this order; FIFO within a level."""

    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"

    def __str__(self) -> str:
        return self.value


PRIORITIES: tuple[Priority, ...] = (Priority.HIGH, Priority.NORMAL, Priority.LOW)
