"""Async pools: ``async def`` tasks run many at once on one event loop, with the leases,
results, retries, callbacks, progress, timeouts and kills of thread tasks (real Redis)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

import ztq.core as ztq
from tests import async_tasks
from tests.async_tasks import (
    blocking_add,
    chained,
    fetch,
    flaky,
    hang,
    misplaced,
    nap,
    sink,
    steps,
    together,
    unencodable,
)
from tests.worker.conftest import wait_for
from ztq.core import App
from ztq.core.engine.workers import get_worker, send_command
from ztq.core.errors import TaskFailed
from ztq.worker import current_run
from ztq.worker.executors.async_pool import AsyncExecutor
from ztq.worker.testing.helpers import eager, worker_for

IMPORTS = {"imports": ("tests.async_tasks",)}


@pytest.fixture(autouse=True)
def _fresh_state() -> None:
    async_tasks.reset()


@pytest.mark.slow
def test_one_thread_runs_many_tasks_at_once(start_worker) -> None:
    worker = start_worker({"crawl": 30}, pool="async", **IMPORTS)
    [ex] = worker.executors
    assert isinstance(ex, AsyncExecutor) and ex.capacity == 30
    handles = [together.enqueue((30,), unique=False) for _ in range(30)]
    # each run returns only once 30 runs were in flight together (else it times out)
    assert [h.get(timeout=15) for h in handles] == [30] * 30
    assert async_tasks.state["peak"] == 30
    # the next beat after the executor started says its size (a beat may predate it)
    info = wait_for(lambda: (i := get_worker(ztq.get_storage(), worker.id)) is not None
                    and i.data["threads"] == {"crawl": 30} and i)  # fmt: skip
    assert info.data["pool"] == ["async"]


def test_no_more_than_the_pool_size_run_at_once(start_worker) -> None:
    start_worker({"crawl": 4}, pool="async", **IMPORTS)
    # a barrier of 5 can never open with 4 places: each run fails after its 10 s wait ...
    # so ask for 4, with 12 tasks: all pass and the peak never passes 4
    handles = [together.enqueue((4,), unique=False) for _ in range(12)]
    assert {h.get(timeout=30) for h in handles} == {4}
    assert async_tasks.state["peak"] == 4


def test_each_run_sees_its_own_task_context(start_worker) -> None:
    start_worker({"crawl": 20}, pool="async", **IMPORTS)
    handles = [fetch.delay(f"https://example.test/{i}") for i in range(40)]
    for i, h in enumerate(handles):
        assert h.get(timeout=10) == {"url": f"https://example.test/{i}", "task_id": h.id}


@pytest.mark.slow
def test_results_retries_and_a_chain_of_callbacks(start_worker, tmp_path: Path) -> None:
    start_worker({"crawl": 5}, pool="async", **IMPORTS)
    counter = str(tmp_path / "count")
    h = flaky.delay(counter, 2)
    assert h.get(timeout=10) == 2  # two Retry(), then the third run returns
    assert h.record().get("attempts") == 3

    # a chain of two callbacks, each given its parent's result first
    second = chained.prepare(("?",), pass_result=True)
    first = chained.prepare(("!",), pass_result=True, callback=second)
    nap.enqueue((0.01,), callback=first)
    end = chained.handle(chained.prepare(("rested!", "?")).resolve_id())
    wait_for(lambda: ztq.ping(end) != "none")
    assert end.get(timeout=10) == "rested!?"


def test_a_result_json_cannot_encode_is_an_error_naming_the_task(start_worker) -> None:
    start_worker({"crawl": 2}, pool="async", **IMPORTS)
    h = unencodable.delay()
    with pytest.raises(TaskFailed) as caught:
        h.get(timeout=10)
    assert caught.value.error_type == "SerializationError"
    assert "tests.async_tasks.unencodable" in str(caught.value)


@pytest.mark.slow
def test_a_timeout_cancels_the_coroutine_and_the_loop_goes_on(start_worker) -> None:
    start_worker({"crawl": 3}, pool="async", **IMPORTS)
    slow = hang.enqueue(("late",), timeout=0.3)
    quick = [nap.enqueue((0.05,), unique=False) for _ in range(5)]
    with pytest.raises(TaskFailed) as caught:
        slow.get(timeout=10)
    assert caught.value.error_type == "SoftTimeout"
    assert "timeout of 0.3s" in str(caught.value)
    assert async_tasks.state["cancelled"] == ["late"]  # its coroutine saw the cancellation
    assert [h.get(timeout=10) for h in quick] == ["rested"] * 5


@pytest.mark.slow
def test_an_operator_kills_one_run_of_many(start_worker, tmp_path: Path) -> None:
    worker = start_worker({"crawl": 10}, pool="async", grace=0.5, **IMPORTS)  # t2 hangs on
    storage = ztq.get_storage()
    marker = tmp_path / "started"
    victims = [hang.enqueue((f"t{i}", str(marker))) for i in range(3)]
    wait_for(lambda: marker.exists() and len(marker.read_text().splitlines()) == 3)

    def shown() -> dict:
        info = get_worker(storage, worker.id)
        current = info.data["current"] if info else {}
        return current if len(current) == 3 else {}

    current = wait_for(shown)  # the heartbeat shows each run as <thread>/<place>
    assert sorted(current) == ["crawl-0/0", "crawl-0/1", "crawl-0/2"]
    place = next(k for k, v in current.items() if v["id"] == victims[1].id)
    send_command(storage, worker.id, "kill", thread=place, task_id=victims[1].id, by="test")
    with pytest.raises(TaskFailed) as caught:
        victims[1].get(timeout=10)
    assert caught.value.error_type == "Killed"
    assert async_tasks.state["cancelled"] == ["t1"]
    # the console's task page sends the record's thread (the pool's name): that works too
    rec = victims[0].record()
    assert rec.get("thread") == "crawl-0"
    send_command(storage, worker.id, "kill", thread="crawl-0", task_id=victims[0].id, by="t")
    wait_for(lambda: ztq.ping(victims[0]) == "error")
    assert ztq.ping(victims[2]) == "running"


def test_progress_is_stored_without_blocking_and_its_callback_runs(
    start_worker, tmp_path: Path
) -> None:
    start_worker({"crawl": 2}, pool="async", **IMPORTS)
    release = tmp_path / "release"
    on_progress = sink.prepare(("progress",))
    h = steps.enqueue((3, str(release)), on_progress=on_progress)
    rec = wait_for(lambda: (r := h.record()) and r.get("comment") and r)
    assert rec.progress == {"done": 3, "total": 3}
    assert rec.get("comment") == "waiting for the release file"
    release.write_text("go")
    assert h.get(timeout=10) == "stepped"
    # one progress callback per report, each with its data
    for done in (1, 2, 3):
        call = on_progress.with_options(
            kwargs={"progress": {"done": done, "total": 3}}, unique=True
        )
        got = sink.handle(call.resolve_id())
        wait_for(lambda: ztq.ping(got) != "none")  # noqa: B023 - used at once
        assert got.get(timeout=10) == {"args": ["progress"], "kwargs": call.kwargs}


@pytest.mark.slow
def test_a_run_longer_than_the_lease_keeps_it(start_worker) -> None:
    worker = start_worker({"crawl": 2}, pool="async", lease=1.0, heartbeat=0.2, **IMPORTS)
    h = nap.delay(1.6)  # past the lease: only renewals from the main thread keep it
    assert h.get(timeout=10) == "rested"
    assert h.record().get("attempts") == 1
    assert worker.executors[0].is_alive()


def test_a_plain_function_under_an_async_pool_is_kept_in_errors(start_worker) -> None:
    start_worker({"crawl": 2}, pool="async", **IMPORTS)
    h = blocking_add.delay(1, 2)
    with pytest.raises(TaskFailed) as caught:
        h.get(timeout=10)
    assert caught.value.error_type == "UnsupportedTask"
    message = str(caught.value)
    assert "tests.async_tasks.blocking_add" in message and "async pool" in message
    assert h.record().get("attempts") == 1  # permanent: no retry could help


def test_an_async_task_under_threads_waits_in_errors_until_redone(start_worker) -> None:
    threads = start_worker({"threads": 1}, **IMPORTS)
    h = misplaced.delay(7)
    with pytest.raises(TaskFailed) as caught:
        h.get(timeout=10)
    assert caught.value.error_type == "UnsupportedTask"
    assert "tests.async_tasks.misplaced" in str(caught.value)
    assert "threads:100:async" in str(caught.value)  # says how to serve it
    # nothing is lost: served by an async pool, the redone task runs
    threads.request_stop()
    start_worker({"threads": 2}, pool="async", **IMPORTS)
    assert ztq.get_storage().tasks.requeue("threads", "error", [h.id]) == 1
    assert h.get(timeout=10) == 7


def test_set_threads_resizes_the_pool(start_worker) -> None:
    worker = start_worker({"crawl": 3}, pool="async", **IMPORTS)
    storage = ztq.get_storage()
    send_command(storage, worker.id, "set_threads", queue="crawl", threads=12, by="test")
    wait_for(lambda: get_worker(storage, worker.id).data["threads"] == {"crawl": 12})
    handles = [together.enqueue((12,), unique=False) for _ in range(12)]
    assert {h.get(timeout=15) for h in handles} == {12}


def test_stop_lets_running_tasks_finish(start_worker) -> None:
    worker = start_worker({"crawl": 5}, pool="async", **IMPORTS)
    handles = [nap.enqueue((0.3,), unique=False) for _ in range(5)]
    wait_for(lambda: all(ztq.ping(h) == "running" for h in handles))
    started = time.monotonic()
    worker.request_stop()
    wait_for(lambda: not worker.executors[0].is_alive())
    assert time.monotonic() - started < 3
    assert [ztq.ping(h) for h in handles] == ["done"] * 5


def test_the_worker_warns_of_tasks_its_pools_cannot_run(start_worker, caplog) -> None:
    with caplog.at_level("WARNING", logger="ztq.worker.worker"):
        start_worker({"crawl": 1}, **IMPORTS)  # threads on the async tasks' queue
    text = caplog.text
    assert "task tests.async_tasks.fetch is an async def and queue crawl is served by a thread" in (
        text
    )
    assert "blocking_add" not in text  # a plain function under threads is fine


def test_drain_and_eager_mode_run_async_tasks(redis_url: str) -> None:
    app = App("drained", redis_url=redis_url, prefix="drained")

    @app.task(queue="crawl")
    async def double(x: int) -> int:
        await asyncio.sleep(0)
        run = current_run()
        assert run is not None and run.task.endswith("double")
        return 2 * x

    worker = worker_for(app, app.storage())
    try:
        h = double.delay(4)
        assert worker.drain() == 1 and h.get(timeout=1) == 8

        async def inside_a_loop() -> int:  # an asyncio test: drain runs it on a helper thread
            handle = await double.adelay(5)
            assert worker.drain() == 1
            return await handle.await_result(timeout=1)

        assert asyncio.run(inside_a_loop()) == 10
        with eager(app):
            assert double.delay(6).get(timeout=1) == 12
    finally:
        app.disconnect_all()


@pytest.mark.slow
def test_concurrent_runs_each_carry_their_own_trace_span(start_worker, redis_url: str) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from ztq.core.contrib.otel import OpenTelemetry

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")
    app = App("traced-async", redis_url=redis_url, prefix="traced")
    app.add_middleware(OpenTelemetry(tracer_provider=provider))

    inside: dict[str, Any] = {"n": 0}  # fetch spans open now; the event: all ten are

    @app.task(name="crawl_page", queue="crawl")
    async def crawl_page(n: int) -> int:
        await asyncio.sleep(0.02)  # the other runs start meanwhile, each with its run span
        with tracer.start_as_current_span(f"fetch {n}"):
            # every fetch span stays open until all ten are: the runs overlap by an event,
            # not by a sleep that a loaded machine can outlast
            all_in = inside.setdefault("all", asyncio.Event())
            inside["n"] += 1
            if inside["n"] == 10:
                all_in.set()
            await asyncio.wait_for(all_in.wait(), 10)
        return n

    try:
        start_worker({"crawl": 10}, pool="async", app=app, imports=())
        with tracer.start_as_current_span("batch"):
            handles = [crawl_page.delay(i) for i in range(10)]
        assert [h.get(timeout=10) for h in handles] == list(range(10))
    finally:
        app.disconnect_all()
    spans = exporter.get_finished_spans()
    runs = {s.attributes["ztq.task_id"]: s for s in spans if s.name == "run crawl_page"}
    fetches = {s.name: s for s in spans if s.name.startswith("fetch ")}
    for i, h in enumerate(handles):
        assert fetches[f"fetch {i}"].parent.span_id == runs[h.id].context.span_id
    assert max(s.start_time for s in fetches.values()) < min(s.end_time for s in fetches.values())


@pytest.mark.slow
def test_a_run_that_swallowed_its_timeout_can_still_be_killed(start_worker) -> None:
    from tests.async_tasks import stubborn

    worker = start_worker({"crawl": 2}, pool="async", **IMPORTS)
    h = stubborn.enqueue(("s",), timeout=0.2)
    wait_for(lambda: async_tasks.state["cancelled"] == ["s"])  # the timeout fired, in vain
    assert ztq.ping(h) == "running"
    send_command(ztq.get_storage(), worker.id, "kill", thread="crawl-0", task_id=h.id, by="t")
    with pytest.raises(TaskFailed) as caught:
        h.get(timeout=10)
    assert caught.value.error_type == "Killed"


def test_a_cancellation_the_task_lets_out_is_its_failure(start_worker) -> None:
    from tests.async_tasks import inner_cancel

    start_worker({"crawl": 2}, pool="async", **IMPORTS)
    h = inner_cancel.delay()
    with pytest.raises(TaskFailed) as caught:
        h.get(timeout=10)
    assert caught.value.error_type == "CancelledError"
    assert h.record().get("attempts") == 1 and h.record().get("lost", 0) == 0


def test_set_threads_to_zero_and_back_keeps_the_pool_async(start_worker) -> None:
    worker = start_worker({"crawl": 3}, pool="async", **IMPORTS)
    storage = ztq.get_storage()
    send_command(storage, worker.id, "set_threads", queue="crawl", threads=0, by="test")
    wait_for(lambda: get_worker(storage, worker.id).data["threads"] == {})
    send_command(storage, worker.id, "set_threads", queue="crawl", threads=1000, by="test")
    wait_for(lambda: get_worker(storage, worker.id).data["threads"] == {"crawl": 1000})
    assert fetch.delay("back").get(timeout=10)["url"] == "back"  # an async def, so async


@pytest.mark.slow
@pytest.mark.parametrize("pool", ["thread", "async"])
def test_an_ack_redis_refuses_is_kept_and_sent_later(
    start_worker, pool: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis refuses writes (READONLY, not a connection error) as a run ends: the ack waits
    for Redis to take writes again, and the task is not run twice."""
    from tests import sample_tasks
    from tests.async_tasks import slow_note

    marker = tmp_path / "ended"
    if pool == "async":
        start_worker({"crawl": 2}, pool="async", **IMPORTS)
        h = slow_note.delay(str(marker), "x", 0.3)
    else:
        start_worker({"default": 1})
        h = sample_tasks.sleepy.delay(0.3, str(marker))
    client = ztq.get_storage().client
    wait_for(lambda: ztq.ping(h) == "running")
    client.replicaof("127.0.0.1", "1")  # a replica of nothing: every write is refused
    try:
        with caplog.at_level("WARNING", logger="ztq.worker"):
            wait_for(marker.exists)  # the run ended ...
            wait_for(lambda: "read only replica" in caplog.text)  # ... and its ack was refused
        assert ztq.ping(h) == "running"
    finally:
        client.replicaof("NO", "ONE")
    assert h.get(timeout=10) == (None if pool == "async" else "slept")
    assert h.record().get("attempts") == 1  # acked late, not run again
    assert marker.read_text().count("\n") == 1
