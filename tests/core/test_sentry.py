"""ztq.core.contrib.sentry against the real sentry-sdk, its events caught by a transport
that keeps them (nothing leaves the machine), on a worker draining real Redis."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sentry_sdk
from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

from ztq.core import App
from ztq.core.contrib.sentry import Sentry
from ztq.core.middleware.base import Middleware, Outcome, Run
from ztq.worker.testing.helpers import worker_for


class Keep(Transport):
    """A transport that keeps the events it is given."""

    events: list[dict[str, Any]] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        event = envelope.get_event()
        if event is not None:
            Keep.events.append(event)


class Hooks(Middleware):
    """A user's failure hooks: what they are given."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, BaseException | None]] = []

    def on_retry(self, run: Run, outcome: Outcome, delay: float) -> None:
        self.seen.append(("retry", outcome.exception))

    def on_failure(self, run: Run, outcome: Outcome) -> None:
        self.seen.append(("failure", outcome.exception))


@pytest.fixture
def sentry() -> Iterator[list[dict[str, Any]]]:
    Keep.events = []
    sentry_sdk.init(dsn="https://key@sentry.invalid/1", transport=Keep, default_integrations=False)
    try:
        yield Keep.events
    finally:
        sentry_sdk.get_client().close(timeout=0)
        sentry_sdk.init()  # no client: later tests send nothing


@pytest.fixture
def app(redis_url: str) -> Iterator[App]:
    app = App("sentry-test", prefix="sentry-test")
    app.connect(redis_url)
    yield app
    app.disconnect_all()


def charge(amount: int, note: str) -> None:
    sentry_sdk.add_breadcrumb(category="shop", message=f"charging {amount}")
    raise ValueError(f"card declined for {amount}")


@pytest.mark.slow
def test_a_failed_run_is_one_event_with_the_task_and_its_frames(app: App, sentry) -> None:  # type: ignore[no-untyped-def]
    hooks = Hooks()
    app.add_middleware(Sentry(max_args=40))
    app.add_middleware(hooks)
    task = app.task(name="shop.charge", queue="payments", retries=1)(charge)
    handle = task.delay(12, "x" * 500)
    worker_for(app, app.storage()).drain(run_delayed=True)

    assert [kind for kind, _ in hooks.seen] == ["retry", "failure"]
    for _, exc in hooks.seen:  # the failure hooks get the exception object, with its frames
        assert isinstance(exc, ValueError) and exc.__traceback__ is not None

    [event] = sentry  # the retry that ran again is no event; the last failure is one
    [exception] = event["exception"]["values"]
    assert (exception["type"], exception["value"]) == ("ValueError", "card declined for 12")
    assert exception["mechanism"] == {"type": "ztq", "handled": False}
    assert "charge" in [f["function"] for f in exception["stacktrace"]["frames"]]
    assert event["tags"] == {"ztq.task": "shop.charge", "ztq.queue": "payments"}
    context = event["contexts"]["ztq"]
    assert (context["task"], context["id"], context["queue"], context["attempt"]) == (
        "shop.charge", handle.id, "payments", 2)  # fmt: skip
    assert context["args"].startswith('[12, "xxx') and context["args"].endswith("(508 characters)")
    assert len(context["args"]) < 80
    assert event["fingerprint"] == ["{{ default }}", "ztq", "shop.charge"]
    crumbs = [c["message"] for c in event["breadcrumbs"]["values"]]
    assert f"task shop.charge {handle.id} attempt 1 failed" in " ".join(crumbs)  # the retry
    assert crumbs[-1] == "charging 12"  # the task's own, from this run


def test_runs_are_isolated_and_an_unknown_task_is_reported(app: App, sentry) -> None:  # type: ignore[no-untyped-def]
    app.add_middleware(Sentry(send_args=False))
    ok = app.task(name="shop.ok", queue="payments")(lambda: sentry_sdk.set_tag("leak", "yes"))
    fails = app.task(name="shop.fails", queue="payments")(charge)
    ok.delay()
    fails.delay(3, "y")
    worker = worker_for(app, app.storage())
    worker.drain()
    other = App("other", prefix="sentry-test")  # its tasks are not this worker's
    other.connect(app.storage().url or "")
    other.task(name="shop.gone", queue="payments")(charge).delay(4, "z")
    other.disconnect_all()
    worker.drain()

    first, second = sentry
    assert "leak" not in first["tags"]  # the successful run's scope ended with it
    assert "args" not in first["contexts"]["ztq"]
    assert first["exception"]["values"][0]["type"] == "ValueError"
    assert second["exception"]["values"][0]["type"] == "UnknownTask"
    assert second["tags"]["ztq.task"] == "shop.gone"


@pytest.mark.slow
def test_integrations_md_sentry_example(redis_url: str, sentry, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The example as written: the init it makes is given the capturing transport."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "integrations.md").read_text("utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
    [code] = [b for b in blocks if "contrib.sentry" in b]
    monkeypatch.setenv("SENTRY_DSN", "https://key@sentry.invalid/2")
    real_init = sentry_sdk.init
    monkeypatch.setattr(sentry_sdk, "init", lambda **kw: real_init(**kw, transport=Keep))
    namespace: dict[str, object] = {"__name__": "docs_sentry_example"}
    exec(compile(code, "docs/integrations.md", "exec"), namespace)  # noqa: S102 - our own doc
    app: App = namespace["app"]  # type: ignore[assignment]
    app.connect(redis_url)
    try:
        namespace["charge"].delay(7)  # type: ignore[attr-defined]
        worker_for(app, app.storage()).drain(run_delayed=True)
    finally:
        app.disconnect_all()
    [event] = Keep.events  # three runs, one event
    assert event["exception"]["values"][0]["value"] == "card declined for order 7"
    assert event["contexts"]["ztq"]["attempt"] == 3


def test_a_failure_without_an_exception_object_is_reported_from_its_text(sentry) -> None:  # type: ignore[no-untyped-def]
    """A process slot's failure: the worker has the type, message and traceback text only."""
    app = App("sentry-slot")
    run = Run(app, None, "pdf", "a" * 32, 1, "render", 0, "pdf-0", args=[1])
    middleware = Sentry()
    middleware.before_run(run)
    outcome = Outcome(False, "render", error_type="ChildDied", message="the process slot died",
                      traceback="Traceback (most recent call last): ...")  # fmt: skip
    middleware.after_run(run, outcome)
    [event] = sentry
    [exception] = event["exception"]["values"]
    assert (exception["type"], exception["value"]) == ("ChildDied", "the process slot died")
    assert event["contexts"]["ztq.traceback"]["text"].startswith("Traceback")
    assert event["fingerprint"] == ["{{ default }}", "ztq", "render"]
    assert event["tags"] == {"ztq.task": "render", "ztq.queue": "pdf"}


def test_an_outcome_crosses_a_process_slots_pipe_without_its_exception() -> None:
    """One that could not be rebuilt in the worker (another ``__init__``) would break the
    pipe (the slot would look dead); the text goes, the object stays."""
    import pickle

    class Declined(Exception):
        def __init__(self, order: int, why: str) -> None:
            super().__init__(f"{order}: {why}")

    outcome = Outcome(False, "charge", error_type="Declined", exception=Declined(1, "card"))
    crossed = pickle.loads(pickle.dumps(outcome))
    assert crossed.exception is None and crossed.error_type == "Declined"
    assert isinstance(outcome.exception, Declined)
