"""An app traced with OpenTelemetry, for the process-slot test (imported by the child too)."""

from __future__ import annotations

import os

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ztq.core import App
from ztq.core.contrib.otel import OpenTelemetry

EXPORTER = InMemorySpanExporter()
PROVIDER = TracerProvider()
PROVIDER.add_span_processor(SimpleSpanProcessor(EXPORTER))
app = App("traced-slot", prefix="traced-slot")
app.add_middleware(OpenTelemetry(tracer_provider=PROVIDER))


@app.task(name="where_am_i", queue="pdf")
def where_am_i() -> dict[str, object]:
    """The span the task's code runs under, and the process it runs in."""
    ids = trace.get_current_span().get_span_context()
    return {"trace": f"{ids.trace_id:032x}", "span": f"{ids.span_id:016x}", "pid": os.getpid()}
