"""Logging for workers: the running task on every log line, JSON lines on request, and a
handler that does not pay a write per line.

:class:`TaskContextFilter` copies the task that the current thread (or asyncio task) runs
onto each record (``task_id``, ``task``, ``queue``, ``attempt``; empty outside a run), so
the task code's own ``logging`` calls carry its id. :class:`JsonFormatter` writes one JSON
object per line with those fields, and the fields a record brings in ``extra={"ztq":
{...}}`` (the end line of each run: ``event``, ``outcome``, ``started``, ``duration_ms``).
``ztq --log-format json`` (or ``ZTQ_LOG_FORMAT=json``) installs both; see docs/worker.md.
``ztq --log-config FILE`` (:func:`configure_file`) installs the user's own configuration
instead and puts the filter on each of its handlers, so that its formatters see the fields.

:class:`BufferedHandler` keeps INFO and DEBUG lines in memory and writes them together
every ``FLUSH_EVERY`` seconds (a thread), when ``MAX_PENDING`` are waiting, at a WARNING or
worse record (with everything before it, in order), and at exit (``logging.shutdown``, which
the interpreter runs at a normal exit and after SIGTERM's graceful stop). A SIGKILL loses
at most the last ``FLUSH_EVERY`` seconds of INFO lines. A drain at INFO ran 30-40% slower
than at WARNING with one ``write`` per line (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import sys
import threading
import time
from collections import deque
from datetime import datetime, timezone
from typing import Any, NamedTuple, TextIO

from ztq.core.middleware.policies import LogRuns, RunLine
from ztq.core.settings.logfile import load_logging_file
from ztq.worker.context import current_run

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s%(task_tag)s %(message)s"
TASK_FIELDS = ("task_id", "task", "queue", "attempt")
HANDLER = "ztq"  # the name of the handler configure() installs (and replaces)
FLUSH_EVERY = 0.1  # seconds an INFO line may wait in memory
MAX_PENDING = 10_000  # lines kept before the emitting thread writes them itself
# a run line of LogRuns as it waits for the writer: (time, level, the line, the running task)
Queued = tuple[float, int, RunLine, Any]
CHUNK = 4096  # most characters per write: a pipe writes up to PIPE_BUF whole (lines stay whole)


class TaskContextFilter(logging.Filter):
    """Adds the running task's fields to every record (never drops one): those of the run
    of this thread (or asyncio task); else those a run line carries (``extra["ztq"]``: a
    task that could not start has no run), or empty, where the record has none of its own
    (a caller's ``extra``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = current_run()
        if ctx is not None:
            record.task_id, record.task, record.queue = ctx.task_id, ctx.task, ctx.queue
            record.attempt = ctx.attempt
            record.task_tag = f" [{ctx.task_id}]"
            return True
        line = getattr(record, "ztq", None)  # a run line without a run: its own fields
        got = _Fields()
        if isinstance(line, dict) and all(name in line for name in TASK_FIELDS):
            got = _Fields(*(line[name] for name in TASK_FIELDS))
        for name, value in zip(TASK_FIELDS, got, strict=True):
            if not hasattr(record, name):  # a caller's extra={"queue": ...} stays
                setattr(record, name, value)
        record.task_tag = ""  # as the run line that ztq's handler formats without a record
        return True


class _Fields(NamedTuple):
    """The task's fields of a record made outside a run (empty, or a run line's)."""

    task_id: str = ""
    task: str = ""
    queue: str = ""
    attempt: int = 0


class TextFormatter(logging.Formatter):
    """``logging.Formatter`` with the date part of ``asctime`` built once per second."""

    def __init__(self, fmt: str = TEXT_FORMAT) -> None:
        super().__init__(fmt)
        self._second = -1
        self._stamp = ""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        return self.clock(record.created)

    def clock(self, created: float) -> str:
        """``asctime`` of a record made at ``created`` (what ``logging.Formatter`` gives)."""
        second = int(created)
        if second != self._second:  # a race between threads only rebuilds the same text
            self._stamp = time.strftime(self.default_time_format, self.converter(created))
            self._second = second
        return f"{self._stamp},{int((created - second) * 1000):03d}"


def _json_default(value: Any) -> Any:
    iso = getattr(value, "iso", None)  # a lazy timestamp (ztq.core.middleware.policies.Clock)
    return iso() if callable(iso) else str(value)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the task's fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": _iso(record.created),
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
        return json.dumps(out, ensure_ascii=False, default=_json_default)

    def format_run(
        self, created: float, level: int, message: str, fields: dict[str, Any], ctx: Any
    ) -> str:
        """A run line of ``LogRuns`` (no record), as :meth:`format` writes its record."""
        out: dict[str, Any] = {"ts": _iso(created), "level": logging.getLevelName(level),
                               "logger": LogRuns.log.name, "message": message}  # fmt: skip
        for name in TASK_FIELDS:  # first, as format() puts them (from TaskContextFilter)
            value = getattr(ctx, name, None) if ctx is not None else fields.get(name)
            if value:
                out[name] = value
        out.update(fields)
        return json.dumps(out, ensure_ascii=False, default=_json_default)


def _iso(created: float) -> str:
    return datetime.fromtimestamp(created, timezone.utc).isoformat(timespec="milliseconds")


class BufferedHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler that writes INFO and DEBUG lines in batches (see the module header).

    Lines keep their order and are written in chunks of whole lines. A record is formatted
    when it is logged (a later change to an argument does not show). The run lines of
    ``LogRuns`` come through :meth:`take_run` without a record while this handler alone
    handles them (:meth:`alone`): their arguments never change, so the writing thread
    formats them, exactly as the formatter would. ``buffered=False`` writes each line at
    once, as ``logging.StreamHandler`` does. Appending takes no lock (a deque); writing
    holds the handler's lock, so a WARNING line waits for the lines before it.
    """

    def __init__(self, stream: TextIO, *, buffered: bool = True) -> None:
        super().__init__(stream)
        self.buffered = buffered
        self._pending: deque[str | logging.LogRecord | Queued] = deque()
        self._wake = threading.Event()  # set when a line waits for the flush thread
        self._closing = threading.Event()
        self._pid = 0  # the process whose flush thread runs (0: none yet)
        self.context = TaskContextFilter()
        self.addFilter(self.context)

    def handle(self, record: logging.LogRecord) -> Any:
        got = self.filter(record)
        if not got:
            return got
        if isinstance(got, logging.LogRecord):  # Python 3.12: a filter may return a record
            record = got
        self.emit(record)
        return got

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING or not self.buffered:
            self._pending.append(record)  # formatted by flush(), after the lines before it
            self.flush()
            return
        try:
            line = self.format(record) + self.terminator
        except Exception:
            self.handleError(record)
            return
        self._queue(line)

    def _queue(self, item: str | Queued) -> None:
        pending = self._pending
        pending.append(item)
        if len(pending) >= MAX_PENDING:
            self.flush()
        elif not self._wake.is_set():  # the flush thread writes it within FLUSH_EVERY
            if self._pid != os.getpid():  # the first line (of this process, after a fork)
                self._start_thread()
            self._wake.set()

    def alone(self, logger: logging.Logger, level: int) -> bool:
        """True when a record of ``logger`` at ``level`` would reach this handler only, as
        it is set up by :func:`configure` (its filter and formatter, no other handler or
        filter on the way, the standard record factory): what it writes for a run line
        is then exactly what the record would have given."""
        formatter = self.formatter
        if type(formatter) is TextFormatter:
            if formatter._fmt != TEXT_FORMAT:
                return False
        elif type(formatter) is not JsonFormatter:
            return False
        if not self.buffered or level < self.level or self.filters != [self.context]:
            return False
        node = logger
        while node.parent is not None:
            if node.filters or node.handlers or not node.propagate:
                return False
            node = node.parent
        if node.filters or node.handlers != [self]:  # the root: this handler alone
            return False
        return logging.getLogRecordFactory() is logging.LogRecord

    def take_run(self, level: int, created: float, line: RunLine) -> bool:
        """Queue a run line of ``LogRuns`` (see :attr:`ztq.core.middleware.policies.LogRuns.sink`);
        False, and nothing done, when a record must be made instead."""
        if not self.alone(LogRuns.log, level):
            return False
        self._queue((created, level, line, current_run()))
        return True

    def flush(self) -> None:
        """Write every pending line, in chunks of whole lines."""
        self.acquire()
        try:
            self._write()
        finally:
            self.release()

    def _write(self) -> None:
        pending, stream = self._pending, self.stream
        if not pending or stream is None:
            return
        chunk: list[str] = []
        size = 0
        try:
            while pending:
                item = pending.popleft()
                if not isinstance(item, str):
                    try:
                        item = self._format_item(item) + self.terminator
                    except Exception:
                        if isinstance(item, logging.LogRecord):
                            self.handleError(item)
                        continue
                if chunk and size + len(item) > CHUNK:
                    stream.write("".join(chunk))
                    chunk, size = [], 0
                chunk.append(item)
                size += len(item)
            stream.write("".join(chunk))
            if hasattr(stream, "flush"):
                stream.flush()
        except Exception:  # a closed or broken stream: said on stderr, as logging does
            self.handleError(logging.makeLogRecord({"msg": "".join(chunk)}))

    def _format_item(self, item: logging.LogRecord | Queued) -> str:
        if isinstance(item, logging.LogRecord):
            return self.format(item)
        created, level, line, ctx = item
        msg, args = LogRuns.message(line)
        formatter = self.formatter
        if isinstance(formatter, JsonFormatter):
            return formatter.format_run(created, level, msg % args, LogRuns.fields(line), ctx)
        assert isinstance(formatter, TextFormatter)  # alone() checked it
        tag = f" [{ctx.task_id}]" if ctx is not None else ""
        when = formatter.clock(created)
        return f"{when} {logging.getLevelName(level)} {LogRuns.log.name}{tag} {msg % args}"

    def close(self) -> None:
        if LogRuns.sink == self.take_run:
            LogRuns.sink = None
        self._closing.set()
        self._wake.set()
        self.flush()
        super().close()

    def _start_thread(self) -> None:
        self._pid = os.getpid()
        threading.Thread(target=self._loop, name="ztq-log-flush", daemon=True).start()

    def _loop(self) -> None:
        """Sleep until a line waits, let more come for FLUSH_EVERY, write them all."""
        while not self._closing.is_set():
            self._wake.wait()
            self._closing.wait(FLUSH_EVERY)
            self._wake.clear()  # a line logged from here on is written below or wakes us
            self.flush()


def configure(level: str = "INFO", fmt: str = "text", stream: TextIO | None = None) -> None:
    """Log to ``stream`` (stderr) in ``fmt`` ('text' or 'json') at ``level``, every record
    with the running task's fields. Lines are written in batches (:class:`BufferedHandler`),
    except in a process slot's child, which its worker may SIGKILL at any time."""
    global _FILE
    child = multiprocessing.parent_process() is not None
    handler = BufferedHandler(stream or sys.stderr, buffered=not child)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.set_name(HANDLER)
    root = _without_ours()
    root.addHandler(handler)
    LogRuns.sink = handler.take_run
    root.setLevel(getattr(logging, str(level).upper(), logging.INFO))
    _FILE = None


def configure_file(path: str) -> None:
    """``--log-config FILE``: the user's logging configuration instead of ztq's handler
    (:func:`ztq.core.settings.logfile.load_logging_file`: a .json dictConfig or an .ini
    fileConfig), and the task's fields on the records every handler it made sees: each
    gets a :class:`TaskContextFilter`, so a formatter of the file may use ``%(task_id)s``,
    ``%(task)s``, ``%(queue)s``, ``%(attempt)s`` and ``%(task_tag)s``. Run lines are
    records again (no handler of ztq's is left to take them)."""
    global _FILE
    load_logging_file(path)  # first: a file that fails leaves the logging as it was
    _without_ours()  # (dictConfig closed it already, but an incremental one keeps handlers)
    for handler in _all_handlers():
        if not any(isinstance(f, TaskContextFilter) for f in handler.filters):
            handler.addFilter(TaskContextFilter())
    _FILE = os.path.abspath(path)


_FILE: str | None = None  # the file configure_file read, for a process slot's child


def _without_ours() -> logging.Logger:
    """The root logger, without the handler :func:`configure` installed (closed)."""
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == HANDLER]:  # ours only
        root.removeHandler(old)
        old.close()
    return root


def _all_handlers() -> list[logging.Handler]:
    """The handlers of the root logger and of every logger made so far."""
    loggers: list[Any] = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    found: dict[int, logging.Handler] = {}
    for logger in loggers:
        for handler in getattr(logger, "handlers", ()):  # a PlaceHolder has none
            found[id(handler)] = handler
    return list(found.values())


def in_use() -> tuple[str, str] | None:
    """(level, format) that :func:`configure` set in this process, ("file", path) after
    :func:`configure_file`, or None: what a process slot's child configures (through
    :func:`configure_like`) so that its lines go where the worker's go."""
    if _FILE is not None:
        return "file", _FILE
    root = logging.getLogger()
    for handler in root.handlers:
        if handler.get_name() == HANDLER:
            fmt = "json" if isinstance(handler.formatter, JsonFormatter) else "text"
            return logging.getLevelName(root.level), fmt
    return None


def configure_like(spec: tuple[str, str]) -> None:
    """Configure logging as :func:`in_use` said another process does."""
    if spec[0] == "file":
        configure_file(spec[1])
    else:
        configure(*spec)
