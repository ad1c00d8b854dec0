"""What a running task may tell about itself: progress, a comment, the pid of a child.

``report_progress(**data)`` stores the data on the task record (the console shows it) and
enqueues the task's ``on_progress`` callback with ``progress=data``. ``report_job(pid=...,
comment=...)`` publishes a child process the task runs, so an operator can kill it.
Outside a worker both are no-ops, so task functions stay callable inline.
"""

from __future__ import annotations

import contextvars
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ztq.core.calls import TaskCall
from ztq.core.handle import app_or_default
from ztq.core.storage import Storage

if TYPE_CHECKING:
    from ztq.core.app import App

log = logging.getLogger(__name__)


@dataclass
class RunContext:
    storage: Storage
    queue: str
    task_id: str
    token: int  # the fencing token of this run's lease
    worker: str  # the worker holding the lease (reports are checked against both)
    task: str
    on_progress: TaskCall | None = None
    child_pid: int | None = None
    comment: str = ""
    app: App | None = None  # whose middleware hears of the progress (None: the default app)
    attempt: int = 1  # the run's number in its series (failures before it + 1), for logs


_current: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar(
    "ztq_run", default=None
)


def current_run() -> RunContext | None:
    """The task this thread is running, or None outside a worker."""
    return _current.get()


def set_current(ctx: RunContext | None) -> contextvars.Token[RunContext | None]:
    return _current.set(ctx)


def reset_current(token: contextvars.Token[RunContext | None]) -> None:
    _current.reset(token)


def report_progress(**data: Any) -> bool:
    """Store progress data (JSON-serialisable) for the running task; True if stored."""
    ctx = _current.get()
    if ctx is None:
        return False
    text = json.dumps(data, separators=(",", ":"), default=str)
    stored = ctx.storage.set_run_info(
        ctx.queue, ctx.task_id, ctx.token, ctx.worker, "progress", text
    )
    if stored:
        try:
            app_or_default(ctx.app).middleware.notify("on_progress", ctx, data)
        except Exception:  # the progress callback (Callbacks) must not fail the task
            log.exception("progress hooks of %s failed", ctx.task_id)
    return stored


def report_job(pid: int | None = None, comment: str | None = None) -> bool:
    """Publish the pid of a child process the task runs (so it can be killed) and/or a comment."""
    ctx = _current.get()
    if ctx is None:
        return False
    ok = True
    if pid is not None:
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 1:
            raise ValueError(f"pid must be an int > 1, not {pid!r}")
        ctx.child_pid = pid
        ok = (
            ctx.storage.set_run_info(ctx.queue, ctx.task_id, ctx.token, ctx.worker, "pid", str(pid))
            and ok
        )
    if comment is not None:
        ctx.comment = str(comment)[:500]
        ok = (
            ctx.storage.set_run_info(
                ctx.queue, ctx.task_id, ctx.token, ctx.worker, "comment", ctx.comment
            )
            and ok
        )
    return ok
