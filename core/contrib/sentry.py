"""Sentry for the workers, as a middleware (``pip install sentry-sdk``):

    import sentry_sdk
    from ztq.core.contrib.sentry import Sentry

    sentry_sdk.init(dsn="https://...")
    app.add_middleware(Sentry())

Each run gets an isolation scope of its own (what sentry-sdk's RQ and dramatiq integrations
do), tagged ``ztq.task`` and ``ztq.queue`` and with a ``ztq`` context (task, id, queue,
attempt, worker, thread, the arguments cut at ``max_args`` characters each): the task's own
breadcrumbs, logs and ``capture_*`` calls carry them, and nothing of one run leaks into the
next. A run that failed for good (the task goes to its error list) is one event, with the
exception object the task raised and its frames, grouped per task (the default grouping,
then the task's name: one task's error is never merged with another's that shares a helper).
A failure that will run again (``retries=``, ``raise Retry``) is a breadcrumb, not an event:
an error that a retry heals is noise, and the one that does not is reported once, at its
last attempt, with the breadcrumbs of the earlier attempts this worker thread saw.

A process slot's failure arrives without the exception object (its pipe carries the text):
its event has the error's type and message, and the formatted traceback in the context.
"""

from __future__ import annotations

import json
from typing import Any

from ztq.core.errors import ConfigError
from ztq.core.middleware.base import Middleware, Outcome, Run

MECHANISM = {"type": "ztq", "handled": False}


class Sentry(Middleware):
    """Report failed runs to Sentry (``sentry_sdk.init`` first, in the worker's process).

    ``max_args``: characters kept of the JSON of the arguments and of the keyword arguments
    (each); ``send_args=False`` leaves them out (they may be personal data)."""

    def __init__(self, *, max_args: int = 1024, send_args: bool = True) -> None:
        try:
            import sentry_sdk
        except ImportError as exc:
            raise ConfigError(
                "the Sentry middleware needs sentry-sdk: pip install sentry-sdk"
            ) from exc
        self._sdk = sentry_sdk
        self.max_args = max_args
        self.send_args = send_args
        self._open: dict[int, Any] = {}  # id(run) -> its isolation scope's context manager

    def before_run(self, run: Run) -> None:
        manager = self._sdk.isolation_scope()
        self._describe(manager.__enter__(), run)
        self._open[id(run)] = manager

    def after_run(self, run: Run, outcome: Outcome) -> None:
        manager = self._open.pop(id(run), None)
        if outcome.ok or run.retry_in is not None:
            if manager is not None:
                manager.__exit__(None, None, None)
            if not outcome.ok:  # into the thread's scope, where later runs' events see it
                self._sdk.add_breadcrumb(
                    category="ztq",
                    level="warning",
                    message=f"task {run.task} {run.id} attempt {run.failures + 1} failed "
                    f"({outcome.error}); runs again in {run.retry_in:.1f} s",
                    data={"task": run.task, "id": run.id, "queue": run.queue},
                )
            return
        if manager is None:  # it never started (a bad payload, an unknown task)
            manager = self._sdk.isolation_scope()
            self._describe(manager.__enter__(), run)
        try:
            self._capture(run, outcome)
        finally:
            manager.__exit__(None, None, None)

    def _describe(self, scope: Any, run: Run) -> None:
        scope.set_tag("ztq.task", run.task)
        scope.set_tag("ztq.queue", run.queue)
        context: dict[str, Any] = {
            "task": run.task,
            "id": run.id,
            "queue": run.queue,
            "attempt": run.failures + 1,
            "worker": getattr(run.worker, "id", ""),
            "thread": run.thread,
        }
        if self.send_args:
            context["args"] = self._bounded(run.args)
            context["kwargs"] = self._bounded(run.kwargs)
        scope.set_context("ztq", context)

    def _bounded(self, value: Any) -> str:
        text = json.dumps(value, default=repr, ensure_ascii=False)
        if len(text) <= self.max_args:
            return text
        return f"{text[: self.max_args]}... ({len(text)} characters)"

    def _capture(self, run: Run, outcome: Outcome) -> None:
        scope = self._sdk.get_isolation_scope()
        if outcome.exception is not None:
            from sentry_sdk.utils import event_from_exception

            options = self._sdk.get_client().options
            event, hint = event_from_exception(
                outcome.exception, client_options=options, mechanism=MECHANISM
            )
        else:
            event, hint = {"level": "error", "exception": {"values": [{
                "type": outcome.error_type or "TaskFailed", "value": outcome.message,
                "mechanism": MECHANISM}]}}, {}  # fmt: skip
            scope.set_context("ztq.traceback", {"text": outcome.traceback[-8000:]})
        event["fingerprint"] = ["{{ default }}", "ztq", run.task]
        self._sdk.capture_event(event, hint=hint)
