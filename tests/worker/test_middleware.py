"""Middleware: every hook is called in order, policies are middleware that can be removed,
replaced or preceded, and a middleware that raises is named and loses nothing (real Redis)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import ztq.core as ztq
from tests.worker.conftest import FAST, wait_for
from ztq.core import App
from ztq.core.middleware.base import NO_RETRY, Middleware, MiddlewareError, Outcome, Run
from ztq.core.middleware.policies import Retries
from ztq.worker.config import ThreadSpec, WorkerConfig
from ztq.worker.worker import Worker


class Recorder(Middleware):
    def __init__(self) -> None:
        self.seen: list[tuple[str, ...]] = []

    def before_enqueue(self, app: App, call: Any) -> None:
        self.seen.append(("before_enqueue", call.task))

    def after_enqueue(self, app: App, call: Any, handle: Any) -> None:
        self.seen.append(("after_enqueue", handle.id, handle.outcome))

    def worker_start(self, worker: Any) -> None:
        self.seen.append(("worker_start",))

    def worker_stop(self, worker: Any) -> None:
        self.seen.append(("worker_stop",))

    def before_run(self, run: Run) -> None:
        self.seen.append(("before_run", run.id, str(run.failures)))

    def after_run(self, run: Run, outcome: Outcome) -> None:
        self.seen.append(("after_run", run.id, str(outcome.ok)))

    def on_success(self, run: Run, outcome: Outcome) -> None:
        self.seen.append(("on_success", run.id, outcome.result))

    def on_retry(self, run: Run, outcome: Outcome, delay: float) -> None:
        self.seen.append(("on_retry", run.id, outcome.error_type))

    def on_failure(self, run: Run, outcome: Outcome) -> None:
        self.seen.append(("on_failure", run.id, outcome.error_type))

    def on_lease_lost(self, worker: Any, queue: str, task_id: str) -> None:
        self.seen.append(("on_lease_lost", task_id))

    def of(self, task_id: str) -> list[str]:
        """The worker's hooks for one task, in order (after_enqueue is the enqueuing
        thread's: it may come before or after the worker started the run)."""
        return [
            s[0] for s in self.seen if len(s) > 1 and s[1] == task_id and s[0] != "after_enqueue"
        ]


@pytest.fixture
def serve(redis_url: str) -> Iterator[Callable[[App], Worker]]:
    """Run an in-process worker for an app; stopped (and joined) after the test."""
    started: list[tuple[Worker, threading.Thread]] = []

    def start(app: App) -> Worker:
        app.connect(redis_url)
        cfg = WorkerConfig(redis_url=redis_url, name=f"mw-{len(started)}",
                           threads=(ThreadSpec("d", ("default",)),), **FAST)  # fmt: skip
        worker = Worker(cfg, app=app)
        th = threading.Thread(target=worker.run, daemon=True)
        th.start()
        started.append((worker, th))
        return worker

    yield start
    for worker, th in started:
        worker.request_stop()
        th.join(15)
        worker.app.disconnect_all()
        assert not th.is_alive()


def test_hooks_run_in_order_for_a_success_a_retry_and_a_failure(serve) -> None:
    rec = Recorder()
    app = App("rec")
    app.add_middleware(rec)
    seen_before: list[str] = []

    @app.task(name="ok")
    def ok(x: int) -> int:
        return x

    @app.task(name="flaky", retries=1)
    def flaky() -> None:
        seen_before.append("ran")
        raise ConnectionError("down")

    serve(app)
    wait_for(lambda: ("worker_start",) in rec.seen)
    a, b = ok.delay(7), flaky.delay()
    wait_for(lambda: app.ping(a) == "done" and app.ping(b) == "error")
    assert rec.seen[0] == ("worker_start",)
    assert ("before_enqueue", "ok") in rec.seen and ("after_enqueue", a.id, "added") in rec.seen
    assert rec.of(a.id) == ["before_run", "on_success", "after_run"]
    assert [s for s in rec.seen if s[0] == "on_success"] == [("on_success", a.id, "7")]
    assert ("after_enqueue", b.id, "added") in rec.seen
    assert rec.of(b.id) == ["before_run", "on_retry", "after_run",
                            "before_run", "on_failure", "after_run"]  # fmt: skip
    assert [s[2] for s in rec.seen if s[0] == "before_run" and s[1] == b.id] == ["0", "1"]


def test_a_lost_lease_and_the_worker_stop_are_told(serve, redis_url: str) -> None:
    rec = Recorder()
    app = App("lost")
    app.add_middleware(rec)
    release = threading.Event()

    @app.task(name="hold")
    def hold() -> None:
        release.wait(10)

    worker = serve(app)
    h = hold.delay()
    wait_for(lambda: app.ping(h) == "running")
    storage = app.storage()
    storage.client.zadd(storage.keys.running("default"), {h.id: 0})  # its lease ran out
    wait_for(lambda: storage.leases.reap("default", max_lost=5) and app.ping(h) == "queued")
    assert storage.leases.fetch("default", "someone-else", "t", 60_000, 1)[0].id == h.id
    worker.renew_leases()
    assert ("on_lease_lost", h.id) in rec.seen
    release.set()
    worker.request_stop()
    wait_for(lambda: ("worker_stop",) in rec.seen, timeout=15)


def test_policies_are_middleware_an_app_can_do_without(serve, tmp_path) -> None:
    app = App("bare", middleware=[])  # no retries, no callbacks, no time limits

    @app.task(name="after")
    def after() -> None: ...

    @app.task(name="fails", retries=3)
    def fails() -> None:
        raise ValueError("no retries here")

    @app.task(name="fine")
    def fine() -> None: ...

    serve(app)
    f = fails.delay()
    g = fine.enqueue(callback=after.prepare())
    wait_for(lambda: app.ping(f) == "error" and app.ping(g) == "done")
    assert f.record().get("failures") == 1 and f.record().get("attempts") == 1
    assert app.ping(after.prepare().resolve_id(), "default") == "none"  # no callback sent


def test_a_retry_policy_placed_before_the_builtin_decides_first(serve) -> None:
    class RetryConnectionErrors(Middleware):
        def retry_delay(self, run: Run, outcome: Outcome) -> float | None:
            if outcome.error_type != "ConnectionError":
                return None  # no opinion: the built-in decides
            return 0.01 if run.failures < 2 else NO_RETRY  # decided, whatever retries= says

    app = App("custom")
    app.add_middleware(RetryConnectionErrors(), before=Retries)
    runs: list[str] = []

    @app.task(name="net", retries=5)  # Retries would retry 5 times: the first to answer wins
    def net() -> None:
        runs.append("net")
        raise ConnectionError("reset")

    @app.task(name="bug", retries=1)
    def bug() -> None:
        runs.append("bug")
        raise KeyError("x")

    serve(app)
    n, b = net.delay(), bug.delay()
    wait_for(lambda: app.ping(n) == "error" and app.ping(b) == "error")
    assert runs.count("net") == 3 and runs.count("bug") == 2  # bug: Retries, retries=1


def test_a_middleware_that_raises_is_named_and_loses_nothing(serve, caplog) -> None:
    class Refuse(Middleware):
        def before_enqueue(self, app: App, call: Any) -> None:
            if call.kwargs.get("secret"):
                raise ValueError("no secrets in payloads")

    class Broken(Middleware):
        def on_success(self, run: Run, outcome: Outcome) -> None:
            raise RuntimeError("metrics backend down")

    app = App("raising")
    app.add_middleware(Refuse())
    app.add_middleware(Broken())

    @app.task(name="job")
    def job(secret: str = "") -> str:
        return "ran"

    serve(app)
    with pytest.raises(MiddlewareError, match="middleware Refuse refused to enqueue job: no sec"):
        job.delay(secret="hunter2")
    assert app.storage().queues.pending_count("default") == 0  # nothing was written
    with caplog.at_level(logging.ERROR, logger="ztq.core.middleware.base"):
        h = job.delay()
        wait_for(lambda: app.ping(h) == "done")
    assert h.result == "ran"  # the run's outcome is its own, whatever a middleware did
    assert "middleware Broken failed in on_success" in caplog.text


def test_before_enqueue_may_change_the_call(redis_url: str) -> None:
    class Urgent(Middleware):
        def before_enqueue(self, app: App, call: Any) -> Any:
            return call.with_options(priority="high") if call.task == "page" else None

    app = App("urgent")
    app.add_middleware(Urgent())
    app.connect(redis_url)
    try:
        page = app.task(name="page")(lambda: None)
        mail = app.task(name="mail")(lambda: None)
        assert (page.delay().record().priority, mail.delay().record().priority) == (
            "high",
            "normal",
        )
        with ztq.transaction() as handles:  # buffered enqueues go through before_enqueue too
            page.enqueue(unique=False)
        assert handles[0].record().priority == "high"
    finally:
        app.disconnect_all()
