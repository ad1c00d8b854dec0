"""What a running task may tell about itself: progress, a comment, the pid of a child.

``report_progress(**data)`` stores the data on the task record (the console shows it) and
enqueues the task's ``on_progress`` callback with ``progress=data``. ``report_job(pid=...,
comment=...)`` publishes a child process the task runs, so an operator can kill it.
``async def`` tasks await ``areport_progress`` / ``areport_job``, which do not block the
event loop. Outside a worker all are no-ops, so task functions stay callable inline.
"""

from __future__ import annotations

import contextvars
import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ztq.core.client import batch as _batch
from ztq.core.client.apps import app_or_default
from ztq.core.client.calls import TaskCall
from ztq.core.engine.fault_kinds import describe, kind
from ztq.core.engine.storage import Leased, Storage

if TYPE_CHECKING:
    from ztq.core.client.app import App

log = logging.getLogger(__name__)


@dataclass
class Running:
    """What the heartbeat shows for an executor's thread, and what kill/timeouts act on."""

    lease: Leased
    task: str
    started: float
    deadline: float | None = None
    ctx: RunContext | None = None
    timed_out: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


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
    astorage: Any = None  # an async pool's AsyncStorage: what areport_* write through


_current: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar(
    "ztq_run", default=None
)


def current_run() -> RunContext | None:
    """The task this thread is running, or None outside a worker."""
    return _current.get()


def _where_running() -> tuple[Storage, str, str] | None:
    ctx = _current.get()
    return None if ctx is None else (ctx.storage, ctx.queue, ctx.task_id)


_batch.run_locator = _where_running  # a batch opened in a member task is a child batch


def set_current(ctx: RunContext | None) -> contextvars.Token[RunContext | None]:
    return _current.set(ctx)


def reset_current(token: contextvars.Token[RunContext | None]) -> None:
    _current.reset(token)


def report_progress(**data: Any) -> bool:
    """Store progress data (JSON-serialisable) for the running task; True if stored."""
    ctx = _current.get()
    if ctx is None:
        return False
    field, value = _progress(data)
    return _progressed(ctx, data, _store(ctx, field, value))


async def areport_progress(**data: Any) -> bool:
    """:func:`report_progress` for ``async def`` tasks: the write does not block the loop."""
    ctx = _current.get()
    if ctx is None:
        return False
    field, value = _progress(data)
    if ctx.astorage is None:  # an async task run by a drain or a process slot: its own loop
        stored = _store(ctx, field, value)
    else:
        try:
            stored = await ctx.astorage.leases.set_run_info(*_where(ctx), field, value)
        except Exception as exc:
            stored = _refused(ctx, exc)
    return _progressed(ctx, data, stored)


def report_job(pid: int | None = None, comment: str | None = None) -> bool:
    """Publish the pid of a child process the task runs (so it can be killed) and/or a comment."""
    ctx = _current.get()
    if ctx is None:
        return False
    return all([_store(ctx, f, v) for f, v in _job(ctx, pid, comment)])


async def areport_job(pid: int | None = None, comment: str | None = None) -> bool:
    """:func:`report_job` for ``async def`` tasks (e.g. the pid of an
    ``asyncio.create_subprocess_exec`` child)."""
    ctx = _current.get()
    if ctx is None:
        return False
    if ctx.astorage is None:
        return report_job(pid, comment)
    stored = []
    for f, v in _job(ctx, pid, comment):
        try:
            stored.append(await ctx.astorage.leases.set_run_info(*_where(ctx), f, v))
        except Exception as exc:
            stored.append(_refused(ctx, exc))
    return all(stored)


def _store(ctx: RunContext, field: str, value: str) -> bool:
    try:
        return ctx.storage.leases.set_run_info(*_where(ctx), field, value)
    except Exception as exc:
        return _refused(ctx, exc)


def _refused(ctx: RunContext, exc: Exception) -> bool:
    """A progress or job report Redis refused (full, read-only) or did not take (down): not
    stored, and no reason to fail the task; any other error is raised."""
    if kind(exc) is None:
        raise exc
    log.debug("progress of %s not stored: %s", ctx.task_id, describe(exc))
    return False


def _where(ctx: RunContext) -> tuple[str, str, int, str]:
    return ctx.queue, ctx.task_id, ctx.token, ctx.worker


def _progress(data: dict[str, Any]) -> tuple[str, str]:
    return "progress", json.dumps(data, separators=(",", ":"), default=str)


def _progressed(ctx: RunContext, data: dict[str, Any], stored: bool) -> bool:
    if stored:
        try:
            app_or_default(ctx.app).middleware.notify("on_progress", ctx, data)
        except Exception:  # the progress callback (Callbacks) must not fail the task
            log.exception("progress hooks of %s failed", ctx.task_id)
    return stored


def _job(ctx: RunContext, pid: int | None, comment: str | None) -> list[tuple[str, str]]:
    """The run-info writes of report_job, checked; keeps them on ``ctx`` for the heartbeat."""
    writes: list[tuple[str, str]] = []
    if pid is not None:
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 1:
            raise ValueError(f"pid must be an int > 1, not {pid!r}")
        ctx.child_pid = pid
        writes.append(("pid", str(pid)))
    if comment is not None:
        ctx.comment = str(comment)[:500]
        writes.append(("comment", ctx.comment))
    return writes
