"""OpenTelemetry: the trace context travels from the enqueue into the run, and on to the
callbacks; the SDK's in-memory exporter records the spans (real Redis)."""

from __future__ import annotations

import sys

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from ztq.core import App
from ztq.core.contrib.otel import OpenTelemetry
from ztq.core.errors import ConfigError
from ztq.worker.testing.helpers import worker_for


def test_a_trace_runs_from_the_request_through_the_enqueue_into_the_run(redis_url: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")
    app = App("traced")
    app.add_middleware(OpenTelemetry(tracer_provider=provider))

    @app.task(name="notify")
    def notify(n: int) -> int:
        return n

    @app.task(name="charge")
    def charge(order: int) -> int:
        with tracer.start_as_current_span("card network"):
            return order

    @app.task(name="decline")
    def decline() -> None:
        raise ValueError("card declined")

    worker = worker_for(app, app.connect(redis_url))
    try:
        with tracer.start_as_current_span("POST /checkout"):
            charged = charge.enqueue((7,), callback=notify.prepare((1,)))
            declined = decline.delay()
            loose = notify.enqueue((2,), unique=False)  # a random id: the span has it too
        assert worker.drain() == 4  # charge, decline, notify, then charge's callback
    finally:
        app.disconnect_all()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    request = spans["POST /checkout"]
    assert {s.context.trace_id for s in spans.values()} == {request.context.trace_id}
    enqueue, run = spans["enqueue charge"], spans["run charge"]
    assert (enqueue.kind, run.kind) == (SpanKind.PRODUCER, SpanKind.CONSUMER)
    assert enqueue.parent.span_id == request.context.span_id
    assert run.parent.span_id == enqueue.context.span_id
    assert spans["card network"].parent.span_id == run.context.span_id  # the task's own
    assert spans["enqueue notify"].parent.span_id == run.context.span_id  # its callback
    assert spans["run notify"].parent.span_id == spans["enqueue notify"].context.span_id
    assert run.attributes["ztq.task_id"] and run.attributes["messaging.system"] == "ztq"
    failed = spans["run decline"]
    assert failed.status.status_code == StatusCode.ERROR
    assert "card declined" in failed.status.description
    [event] = failed.events  # the exception, as the semantic conventions name it
    assert event.name == "exception"
    assert event.attributes["exception.type"] == "ValueError"
    assert event.attributes["exception.message"] == "card declined"
    assert "in decline" in event.attributes["exception.stacktrace"]
    for name, handle in (("charge", charged), ("decline", declined)):
        attributes = spans[f"enqueue {name}"].attributes
        assert attributes["ztq.task_id"] == handle.id == attributes["messaging.message.id"]
        assert attributes["messaging.destination.name"] == "default"
    loose_spans = [s for s in exporter.get_finished_spans() if s.name == "enqueue notify"]
    assert loose.id in {s.attributes["ztq.task_id"] for s in loose_spans}


def test_without_opentelemetry_the_middleware_says_what_to_install(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(ConfigError, match=r"pip install 'ztq\[otel\]'"):
        OpenTelemetry()


@pytest.mark.slow
def test_a_process_slot_child_runs_the_task_under_the_run_span(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import threading

    from tests import otel_app
    from tests.worker.conftest import FAST
    from ztq.worker.config import ThreadSpec, WorkerConfig
    from ztq.worker.worker import Worker

    monkeypatch.setenv("ZTQ_REDIS_URL", redis_url)  # the child loads the app by its name
    cfg = WorkerConfig(redis_url=redis_url, prefix="traced-slot", app="tests.otel_app:app",
                       name="slot-tracer", threads=(ThreadSpec("pdf-0", ("pdf",), "process"),),
                       **FAST)  # fmt: skip
    worker = Worker(cfg, app=otel_app.app)
    th = threading.Thread(target=worker.run, daemon=True)
    th.start()
    try:
        seen = otel_app.where_am_i.delay().get(timeout=30)
    finally:
        worker.request_stop()
        th.join(15)
        otel_app.app.disconnect_all()
    [run] = [s for s in otel_app.EXPORTER.get_finished_spans() if s.name == "run where_am_i"]
    assert seen["pid"] != os.getpid()  # the task ran in the slot's child ...
    assert seen["trace"] == f"{run.context.trace_id:032x}"  # ... under the run's span
    assert seen["span"] == f"{run.context.span_id:016x}"
