"""OpenTelemetry tracing as a middleware (``pip install 'ztq[otel]'``).

    from ztq.core.contrib.otel import OpenTelemetry
    app.add_middleware(OpenTelemetry())

Each enqueue records a PRODUCER span ``enqueue <task>`` under the current span (a web
request's, say) and carries its context to the worker in the task's ``meta`` (W3C trace
context headers, through the configured propagator). Each run is a CONSUMER span ``run
<task>`` under it, current while the task's code runs: the task's own spans, and the
callbacks it leads to, join the same trace. The enqueue span has the task's id
(``ztq.task_id``, ``messaging.message.id``) and queue; a failed run's span has an ERROR
status and an ``exception`` event (type, message, stack trace). In a
process slot the task's code runs in a child process under the run's span too (its context
travels in ``run.carry``); the child exports its spans through the tracer provider the task
modules set up there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ztq.core.errors import ConfigError
from ztq.core.middleware.base import Middleware, Outcome, Run

if TYPE_CHECKING:
    from ztq.core.client.app import App
    from ztq.core.client.calls import TaskCall


class OpenTelemetry(Middleware):
    def __init__(self, tracer_provider: Any = None) -> None:
        try:
            from opentelemetry import context, propagate, trace
        except ImportError as exc:
            raise ConfigError("tracing needs OpenTelemetry: pip install 'ztq[otel]'") from exc
        self._context, self._propagate, self._trace = context, propagate, trace
        self.tracer = trace.get_tracer("ztq", tracer_provider=tracer_provider)
        self._open: dict[int, tuple[Any, Any]] = {}  # id(run) -> (span, context token)
        self._children: dict[int, Any] = {}  # id(run context) -> token, in a slot's child

    def before_enqueue(self, app: App, call: TaskCall) -> TaskCall:
        kind = self._trace.SpanKind.PRODUCER
        attributes = {"messaging.system": "ztq", "messaging.destination.name": call.queue,
                      "ztq.task": call.task}  # fmt: skip
        call, task_id = _known_id(call)
        if task_id is not None:
            attributes["ztq.task_id"] = attributes["messaging.message.id"] = task_id
        with self.tracer.start_as_current_span(
            f"enqueue {call.task}", kind=kind, attributes=attributes
        ):
            carrier: dict[str, str] = {}
            self._propagate.inject(carrier)
        return call.with_options(meta={**call.meta, **carrier})

    def before_run(self, run: Run) -> None:
        parent = self._propagate.extract(run.opts.get("meta") or {})
        span = self.tracer.start_span(
            f"run {run.task}",
            context=parent,
            kind=self._trace.SpanKind.CONSUMER,
            attributes={"messaging.system": "ztq", "messaging.destination.name": run.queue,
                        "ztq.task": run.task, "ztq.task_id": run.id,
                        "ztq.attempt": run.failures + 1},
        )  # fmt: skip
        token = self._context.attach(self._trace.set_span_in_context(span))
        self._open[id(run)] = (span, token)
        self._propagate.inject(run.carry)  # a process slot's child joins this span

    def child_start(self, run_context: Any, carry: dict[str, str]) -> None:
        token = self._context.attach(self._propagate.extract(carry))
        self._children[id(run_context)] = token

    def child_end(self, run_context: Any, outcome: Outcome) -> None:
        token = self._children.pop(id(run_context), None)
        if token is not None:
            self._context.detach(token)

    def after_run(self, run: Run, outcome: Outcome) -> None:
        span, token = self._open.pop(id(run), (None, None))
        if span is None:
            return  # nothing ran (bad payload, unknown task): no span was started
        if not outcome.ok:
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, outcome.error))
            if outcome.exception is not None:
                span.record_exception(outcome.exception)
            else:  # a process slot's failure: the text of what its child raised
                event = {"exception.type": outcome.error_type,
                         "exception.message": outcome.message,
                         "exception.stacktrace": outcome.traceback}  # fmt: skip
                span.add_event("exception", event)
            span.set_attribute("ztq.retry", run.retry_in is not None)
        span.end()
        self._context.detach(token)


def _known_id(call: TaskCall) -> tuple[TaskCall, str | None]:
    """The id the task will have, for the enqueue span: a ``unique=False`` call's random id
    is drawn here and pinned on the call, so that the span and the task agree. In a batch a
    member's id is made from the batch's (unique members; a random member's is drawn later,
    and its span goes without)."""
    from ztq.core.client.buffer import BatchBuffer, block_buffer

    buffer = block_buffer.get()
    if isinstance(buffer, BatchBuffer):
        if call.id is not None or not call.unique:
            return call, None
        return call, buffer.member_id(call, call.resolve_id())
    if call.id is None and not call.unique:
        call = call.with_options(id=call.resolve_id())
    return call, call.resolve_id()
