"""Logging for workers: the running task on every log line, and JSON lines on request.

:class:`TaskContextFilter` copies the task that the current thread (or asyncio task) runs
onto each record (``task_id``, ``task``, ``queue``, ``attempt``; empty outside a run), so
the task code's own ``logging`` calls carry its id. :class:`JsonFormatter` writes one JSON
object per line with those fields, and the fields a record brings in ``extra={"ztq":
{...}}`` (the start and end lines of each run: ``event``, ``duration_ms``, ``outcome``).
``ztq --log-format json`` (or ``ZTQ_LOG_FORMAT=json``) installs both; see docs/worker.md.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone
from typing import Any, TextIO

from ztq.worker.context import current_run

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s%(task_tag)s %(message)s"
TASK_FIELDS = ("task_id", "task", "queue", "attempt")
HANDLER = "ztq"  # the name of the handler configure() installs (and replaces)


class TaskContextFilter(logging.Filter):
    """Adds the running task's fields to every record (never drops one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = current_run()
        if ctx is None:
            record.task_id = record.task = record.queue = ""
            record.attempt = 0
            record.task_tag = ""
        else:
            record.task_id, record.task, record.queue = ctx.task_id, ctx.task, ctx.queue
            record.attempt = ctx.attempt
            record.task_tag = f" [{ctx.task_id}]"
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the task's fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in TASK_FIELDS:
            value = getattr(record, name, None)
            if value:
                out[name] = value
        extra = getattr(record, "ztq", None)
        if isinstance(extra, dict):
            out.update(extra)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def configure(level: str = "INFO", fmt: str = "text", stream: TextIO | None = None) -> None:
    """Log to ``stream`` (stderr) in ``fmt`` ('text' or 'json') at ``level``, every record
    with the running task's fields."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(TaskContextFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    handler.set_name(HANDLER)
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == HANDLER]:  # ours only
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, str(level).upper(), logging.INFO))


def in_use() -> tuple[str, str] | None:
    """(level, format) that :func:`configure` set in this process, or None: what a process
    slot's child configures so that its lines look like the worker's."""
    root = logging.getLogger()
    for handler in root.handlers:
        if handler.get_name() == HANDLER:
            fmt = "json" if isinstance(handler.formatter, JsonFormatter) else "text"
            return logging.getLevelName(root.level), fmt
    return None
