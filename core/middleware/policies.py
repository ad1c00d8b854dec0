"""The built-in policies, each one middleware (see :mod:`ztq.core.middleware.base`).

Every app starts with :func:`default_middleware`, in this order: run logs, time limits,
retries, callbacks, result storage, batch commits. Replace the list (``App(middleware=[...])``),
add to it (``app.add_middleware``), or subclass one to change a policy.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, ClassVar

from ztq.core.client.calls import FAILURE_KWARGS, PROGRESS_KWARG, TaskCall
from ztq.core.errors import UnknownTask
from ztq.core.middleware.base import Middleware, Outcome, Run

log = logging.getLogger(__name__)

BACKOFF_CAP = 300.0  # seconds: the longest backoff between two runs
MAX_RETRY_RUNS = 25  # a task raising Retry forever goes to errors after this many failures


def backoff(failure: int, first: float = 1.0) -> float:
    """Exponential backoff with jitter: ~first, 2x, 4x ... capped at 5 minutes."""
    base = min(BACKOFF_CAP, first * 2 ** max(0, failure - 1))
    return base * random.uniform(0.5, 1.5)


class Clock:
    """A timestamp that is formatted only when a log line shows it: ``HH:MM:SS.mmm`` local
    time in text, ISO 8601 UTC in JSON lines (``iso()``)."""

    __slots__ = ("at",)
    _cache: tuple[int, str] = (-1, "")  # (second, its HH:MM:SS), shared: lines come in order

    def __init__(self, at: float) -> None:
        self.at = at

    def __str__(self) -> str:
        second = int(self.at)
        cached, text = Clock._cache
        if cached != second:
            text = time.strftime("%H:%M:%S", time.localtime(second))
            Clock._cache = (second, text)
        return f"{text}.{int((self.at - second) * 1000):03d}"

    def iso(self) -> str:
        return datetime.fromtimestamp(self.at, timezone.utc).isoformat(timespec="milliseconds")


# what LogRuns says of a run: (event 'start' or 'end', outcome, id, task, queue, attempt,
# started (epoch s), runtime ms, error type, why it could not run ('' if it ran)); see
# LogRuns.message and LogRuns.fields
RunLine = tuple[str, str, str, str, str, int, float, float, str, str]
DETAIL_MAX = 500  # characters of the message of a task that could not run, in its line
RunSink = Callable[[int, float, RunLine], bool]
START = "task start id=%s task=%s queue=%s attempt=%d"
END = "task %s id=%s task=%s queue=%s attempt=%d started=%s runtime_ms=%.1f"


class LogRuns(Middleware):
    """One line per run on the ``ztq.runs`` logger at INFO, when it ends: outcome, start
    time and duration (``task done id=... started=HH:MM:SS.mmm runtime_ms=...``), and a
    start line at DEBUG; the fields of the run ride along for JSON logs (``extra["ztq"]``).
    A run that could not start or be kept (a payload that is not JSON, an unknown task,
    wrong arguments, a task its pool cannot run, a result JSON cannot encode: permanent
    failures, straight to the error list) ends with a line too, ``task failed``, with its
    error type and ztq's message (``detail``): nothing ends without one. (A task's own
    exception gives its type only: its message is the task's data.)

    Nothing is built for a level that is off. A worker logs one line per task, so the line
    is cheap: ``sink`` (set by ``ztq.worker.logs.configure``) takes ``(level, time, line)``
    and queues it for its writer thread while ztq's handler is the only one on the
    logger's way (it returns False otherwise); else a record is made directly (no caller
    lookup) and handled as usual. Both give the same text and fields."""

    log = logging.getLogger("ztq.runs")
    sink: ClassVar[RunSink | None] = None

    @staticmethod
    def message(line: RunLine) -> tuple[str, tuple[Any, ...]]:
        """The message of a run line and its arguments (formatted only when shown)."""
        event, state, task_id, task, queue, attempt, started, ms, error, detail = line
        if event == "start":
            return START, (task_id, task, queue, attempt)
        args = (state, task_id, task, queue, attempt, Clock(started), ms)
        if detail:
            return END + " error=%s detail=%r", (*args, error, detail)
        return (END + " error=%s", (*args, error)) if error else (END, args)

    @staticmethod
    def fields(line: RunLine) -> dict[str, Any]:
        """The fields of a run line for JSON logs."""
        event, state, task_id, task, queue, attempt, started, ms, error, detail = line
        out: dict[str, Any] = {"event": event, "task_id": task_id, "task": task,
                               "queue": queue, "attempt": attempt}  # fmt: skip
        if event == "end":
            out |= {"outcome": state, "started": Clock(started), "duration_ms": round(ms, 1)}
            if error:
                out["error"] = error
            if detail:
                out["detail"] = detail
        return out

    def _emit(self, level: int, now: float, line: RunLine) -> None:
        sink = LogRuns.sink
        if sink is not None and sink(level, now, line):
            return
        log = self.log
        msg, args = self.message(line)
        record = log.makeRecord(log.name, level, __file__, 0, msg, args, None, None,
                                {"ztq": self.fields(line)})  # fmt: skip
        record.created = now
        record.msecs = int((now - int(now)) * 1000) + 0.0
        log.handle(record)

    def before_run(self, run: Run) -> None:
        if self.log.isEnabledFor(logging.DEBUG):
            line = ("start", "", run.id, run.task, run.queue, run.failures + 1, run.started,
                    0.0, "", "")  # fmt: skip
            self._emit(logging.DEBUG, time.time(), line)

    def after_run(self, run: Run, outcome: Outcome) -> None:
        if not self.log.isEnabledFor(logging.INFO):
            return
        now = time.time()
        ms = (now - run.started) * 1000
        if outcome.ok:
            line = ("end", "done", run.id, run.task, run.queue, run.failures + 1, run.started,
                    ms, "", "")  # fmt: skip
        else:
            state = "retry" if run.retry_in is not None else "failed"
            detail = (outcome.message or "-")[:DETAIL_MAX] if outcome.permanent else ""
            line = ("end", state, run.id, run.task, run.queue, run.failures + 1, run.started,
                    ms, outcome.error_type or "?", detail)  # fmt: skip
        self._emit(logging.INFO, now, line)


class TimeLimit(Middleware):
    """A task's ``timeout`` (seconds) becomes the run's soft deadline: ``SoftTimeout`` is
    raised in its thread (the worker's watchdog), or in its process slot's child."""

    def before_run(self, run: Run) -> None:
        timeout = run.opts.get("timeout")
        if timeout:
            run.deadline = run.started + float(timeout)


class Retries(Middleware):
    """``retries=N`` retries the first N failures of a task's code with exponential backoff
    (the worker's ``retry_backoff`` first, doubling, jittered); ``raise Retry(delay)``
    reschedules up to ``MAX_RETRY_RUNS`` failures. Lost leases do not count (``max_lost``
    does); bad payloads, unknown tasks and wrong arguments are never retried."""

    def __init__(self, first: float | None = None, max_retry_runs: int = MAX_RETRY_RUNS) -> None:
        self.first = first  # None: the worker's retry_backoff
        self.max_retry_runs = max_retry_runs

    def retry_delay(self, run: Run, outcome: Outcome) -> float | None:
        failure = run.failures + 1  # this failure's number in the series
        first = self.first if self.first is not None else float(run.worker.cfg.retry_backoff)
        if outcome.retry_delay is not None:
            if failure >= self.max_retry_runs:
                return None
            return outcome.retry_delay if outcome.retry_delay >= 0 else backoff(failure, first)
        if not outcome.permanent and failure <= int(run.opts.get("retries", 0) or 0):
            return backoff(failure, first)
        return None


class Callbacks(Middleware):
    """``callback`` is enqueued after a success (before the ack: a crash between the two
    runs the task again, and the callback's dedup id makes its second enqueue a no-op while
    it is pending); ``on_failure`` after the last failure, with ``error_code`` and
    ``error_message``; ``on_progress`` on each ``report_progress``, with ``progress``."""

    def on_success(self, run: Run, outcome: Outcome) -> None:
        data = run.opts.get("callback")
        if data and data.get("pass_result"):  # a chain: the parent's result comes first
            call = TaskCall.from_dict(data, run.app)
            result = json.loads(outcome.result) if outcome.result else None
            call.with_options(args=(result, *call.args)).enqueue()
            return
        self._send(run, data, {})

    def on_failure(self, run: Run, outcome: Outcome) -> None:
        extra = dict(zip(FAILURE_KWARGS, (outcome.error_type, outcome.message), strict=True))
        self._send(run, run.opts.get("on_failure"), extra)

    def on_progress(self, run_context: Any, data: dict[str, Any]) -> None:
        call: TaskCall | None = run_context.on_progress
        if call is not None:
            call.with_options(kwargs={**call.kwargs, PROGRESS_KWARG: data}).enqueue()

    @staticmethod
    def _send(run: Run, data: dict[str, Any] | None, extra: dict[str, Any]) -> None:
        if not data:
            return
        call = TaskCall.from_dict(data, run.app)
        if extra:
            call = call.with_options(kwargs={**call.kwargs, **extra})
        call.enqueue()


class Results(Middleware):
    """Keeps a task's return value on its finished record for its ``result_ttl`` (the task's
    or the call's option, else the worker's setting); 0: the record is dropped at the ack
    and nothing is stored. ``handle.get()`` reads it."""

    def on_success(self, run: Run, outcome: Outcome) -> None:
        ttl = run.opts.get("result_ttl")
        run.result_ttl = float(run.worker.cfg.result_ttl if ttl is None else ttl)
        if run.result_ttl <= 0:
            outcome.result = ""


class BatchCommit(Middleware):
    """``@task(batch_size=N, on_batch=f)`` calls ``f()`` after every N runs of the task in a
    thread, and when the thread's queues run dry (ZTQ's indexing case)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}  # (thread, task) -> runs since a commit

    def after_run(self, run: Run, outcome: Outcome) -> None:
        if outcome.permanent:
            return  # it did not run
        try:
            tf = run.app.lookup(run.task)
        except UnknownTask:
            return
        if not tf.batch_size or tf.on_batch is None:
            return
        key = (run.thread, tf.name)
        self.counts[key] = self.counts.get(key, 0) + 1
        if self.counts[key] >= tf.batch_size:
            self._commit(key, tf)

    def on_idle(self, worker: Any, thread: str) -> None:
        for key, count in list(self.counts.items()):
            if key[0] == thread and count:
                self._commit(key, worker.app.lookup(key[1]))

    def _commit(self, key: tuple[str, str], tf: Any) -> None:
        self.counts[key] = 0
        try:
            tf.on_batch()
        except Exception:
            log.exception("on_batch of %s failed", tf.name)


def default_middleware() -> list[Middleware]:
    """A fresh instance of every built-in policy, in their order."""
    return [LogRuns(), TimeLimit(), Retries(), Callbacks(), Results(), BatchCommit()]
