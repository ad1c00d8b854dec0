"""Errors grouped by error type and top frame, over the newest errors (a bounded window)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

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


def group_errors(rows: list[Row]) -> list[ErrorGroup]:
    """Rows of an errors page (newest first) grouped; the biggest group first."""
    groups: dict[tuple[str, str, str], ErrorGroup] = {}
    for row in rows:
        rec = row.record
        if rec is None:
            continue
        error, traceback = str(rec.get("error") or ""), str(rec.get("traceback") or "")
        # died: the type is unknown, the groups are still per what happened (WorkerLost, ...)
        key = (error_type(error, traceback), top_frame(traceback) or "", error_kind(error))
        at = int(row.score or 0)
        g = groups.get(key)
        if g is None:
            g = groups[key] = ErrorGroup(*key[:2], first=at, last=at, message=error[:300])
            g.sample = (row.queue, row.id)
        g.count += 1
        g.first, g.last = min(g.first, at), max(g.last, at)
        g.tasks[rec.task] = g.tasks.get(rec.task, 0) + 1
        g.queues[row.queue] = g.queues.get(row.queue, 0) + 1
    return sorted(groups.values(), key=lambda g: (-g.count, -g.last))
