"""Errors grouped by error type and top frame, over the newest errors (a bounded window)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from ztq.core.engine.record import TaskRecord
from ztq.core.monitor.pages import Row

_FRAME = re.compile(r'^\s*File "([^"]*)", line (\d+), in (.+)$')
_KIND = re.compile(r"[A-Za-z_][\w.]{0,199}")


# the error type of a task that died without a Python exception of its own (no traceback):
# it lost its worker too often (WorkerLost), its process slot died or was killed (ChildDied,
# Killed, HardTimeout); what happened stays in the message
UNKNOWN = "unknown"


def died(error: str, traceback: str) -> bool:
    """Did a failure end the task without a Python exception? (An error and no traceback:
    every exception a task raises, and every bad payload, comes with one.)"""
    return bool(error) and not traceback


def error_type(error: str, traceback: str) -> str:
    """``ValueError`` for a task that raised one; :data:`UNKNOWN` when it died without an
    exception of its own (see :func:`died`)."""
    return UNKNOWN if died(error, traceback) else error_kind(error)


@dataclass
class ErrorGroup:
    kind: str
    frame: str
    count: int = 0
    first: int = 0
    last: int = 0
    message: str = ""
    sample: tuple[str, str] = ("", "")  # (queue, id) of the newest one
    tasks: dict[str, int] = field(default_factory=dict)
    queues: dict[str, int] = field(default_factory=dict)
    key: str = ""  # see group_key: what the console's links and actions name a group by
    again: int = 0  # of them, tasks that failed again after a redo
    trace: str = ""  # the newest one's traceback (the start of it)


def error_kind(error: str) -> str:
    """``ValueError`` of ``ValueError: boom``; the first words when it is not a type name."""
    head = (error or "").split(":", 1)[0].strip()
    return head if _KIND.fullmatch(head) else (head[:60] or "?")


def top_frame(traceback: str) -> str:
    """The innermost ``File ..., line N, in fn`` of a traceback as ``dir/file.py:N in fn``."""
    for line in reversed((traceback or "").splitlines()):
        m = _FRAME.match(line)
        if m:
            path = "/".join(m.group(1).replace("\\", "/").split("/")[-2:])
            return f"{path}:{m.group(2)} in {m.group(3).strip()}"
    return ""


TRACE_LIMIT = 4000  # characters of a group's example traceback the grouped views show
GROUP_KEY = re.compile(r"^[0-9a-f]{12}$")


def _parts(rec: TaskRecord) -> tuple[str, str, str]:
    error, traceback = str(rec.get("error") or ""), str(rec.get("traceback") or "")
    # died: the type is unknown, the groups are still per what happened (WorkerLost, ...)
    return error_type(error, traceback), top_frame(traceback) or "", error_kind(error)


def group_key(rec: TaskRecord) -> str:
    """The group of a failed task as 12 hex digits (error type, top frame, what happened):
    a link or an action names one group by it, never by its task name."""
    text = "\x00".join(_parts(rec))
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def failed_again(rec: TaskRecord) -> bool:
    """A failed task that an operator had redone (it failed again after the redo)."""
    redone = rec.get("redone")
    return isinstance(redone, int) and redone > 0


class GroupMatch:
    """A filter on records: in the error group ``key`` (and the task/text filter, if any)."""

    def __init__(self, key: str, also: object = None) -> None:
        self.key, self.also = key, also

    def __call__(self, rec: TaskRecord) -> bool:
        if self.also is not None and not self.also(rec):  # type: ignore[operator]
            return False
        return group_key(rec) == self.key

    def may_match(self, task_id: str, raw: str) -> bool:
        may = getattr(self.also, "may_match", None)
        return may is None or bool(may(task_id, raw))


def group_errors(rows: list[Row]) -> list[ErrorGroup]:
    """Rows of an errors page (newest first) grouped; the biggest group first."""
    groups: dict[tuple[str, str, str], ErrorGroup] = {}
    for row in rows:
        rec = row.record
        if rec is None:
            continue
        error = str(rec.get("error") or "")
        key = _parts(rec)
        at = int(row.score or 0)
        g = groups.get(key)
        if g is None:
            g = groups[key] = ErrorGroup(*key[:2], first=at, last=at, message=error[:300])
            g.sample = (row.queue, row.id)
            g.key = group_key(rec)
            g.trace = str(rec.get("traceback") or "")[:TRACE_LIMIT]
        g.count += 1
        g.again += failed_again(rec)
        g.first, g.last = min(g.first, at), max(g.last, at)
        g.tasks[rec.task] = g.tasks.get(rec.task, 0) + 1
        g.queues[row.queue] = g.queues.get(row.queue, 0) + 1
    return sorted(groups.values(), key=lambda g: (-g.count, -g.last))
