"""The asyncio producer API on real Redis: the same scripts and middleware, and the event
loop keeps running while a coroutine waits for a result."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from ztq.core import App
from ztq.core.client.transaction import transaction
from ztq.core.errors import ConfigError, TaskFailed
from ztq.worker.testing.helpers import worker_for


@pytest.fixture
def app(redis_url: str):  # type: ignore[no-untyped-def]
    app = App("aio", prefix="aio")
    app.connect(redis_url)
    yield app
    app.disconnect_all()


def test_adelay_aping_and_await_result_never_block_the_loop(app: App) -> None:
    @app.task(name="slow_add")
    def slow_add(a: int, b: int) -> int:
        time.sleep(0.5)
        return a + b

    @app.task(name="fails")
    def fails() -> None:
        raise KeyError("gone")

    worker = worker_for(app, app.storage())

    async def scenario() -> tuple[int, int, str, str]:
        h = await slow_add.adelay(2, 3)
        again = await slow_add.aenqueue((2, 3))
        assert (h.outcome, again.outcome, again.id) == ("added", "exists", h.id)
        state = await app.aping(h.id)
        drainer = threading.Thread(target=worker.drain)  # a worker elsewhere runs it
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticking = asyncio.create_task(ticker())
        drainer.start()
        result = await h.await_result(timeout=10)
        ticking.cancel()
        drainer.join()
        bad = await fails.adelay()
        worker.drain()
        with pytest.raises(TaskFailed, match="KeyError"):
            await bad.await_result(timeout=5)
        return result, ticks, state, await app.aping(h)

    result, ticks, state, after = asyncio.run(scenario())
    assert (result, state, after) == (5, "queued", "done")
    assert ticks >= 20  # the loop went on for the half second the task ran


def test_an_async_enqueue_inside_a_blocking_transaction_is_refused(app: App) -> None:
    job = app.task(name="job")(lambda: None)

    async def inside() -> None:
        with transaction():
            await job.adelay()

    with pytest.raises(ConfigError, match="inside a transaction"):
        asyncio.run(inside())
    assert app.ping(job.prepare().resolve_id(), "default") == "none"


def test_asyncio_md_example_runs(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import re
    from pathlib import Path

    monkeypatch.setenv("ZTQ_REDIS_URL", redis_url)
    text = (Path(__file__).resolve().parents[2] / "docs" / "asyncio.md").read_text("utf-8")
    [code] = [b for b in re.findall(r"^```python\n(.*?)^```", text, re.S | re.M) if "handler" in b]
    namespace: dict[str, object] = {"__name__": "docs_asyncio_example"}
    exec(compile(code, "docs/asyncio.md", "exec"), namespace)  # noqa: S102 - our own doc
    app = namespace["app"]
    worker = worker_for(app, app.storage())  # type: ignore[arg-type]

    reserve = namespace["reserve"]
    task_id = reserve.prepare(("sku-1", 2)).resolve_id()  # type: ignore[attr-defined]

    async def main() -> int:
        request = asyncio.create_task(namespace["handler"]("sku-1"))  # type: ignore[operator]
        while await app.aping(task_id, "orders") != "queued":  # type: ignore[attr-defined]
            await asyncio.sleep(0.01)  # the handler enqueued it; now a worker runs it
        await asyncio.to_thread(worker.drain)
        return await request

    try:
        assert asyncio.run(main()) == 2
    finally:
        app.disconnect_all()  # type: ignore[attr-defined]


@pytest.mark.slow
def test_asyncio_md_async_task_example_runs_in_an_async_pool(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, start_worker
) -> None:
    import re
    from pathlib import Path

    monkeypatch.setenv("ZTQ_REDIS_URL", redis_url)
    text = (Path(__file__).resolve().parents[2] / "docs" / "asyncio.md").read_text("utf-8")
    [code] = [b for b in re.findall(r"^```python\n(.*?)^```", text, re.S | re.M) if "fetch" in b]
    namespace: dict[str, object] = {"__name__": "crawler"}
    exec(compile(code, "docs/asyncio.md", "exec"), namespace)  # noqa: S102 - our own doc
    app, fetch = namespace["app"], namespace["fetch"]
    assert "ztq worker --app crawler:app --queue crawl:200:async" in text
    try:
        start_worker({"crawl": 200}, pool="async", app=app, imports=())
        handles = [fetch.delay(f"https://example.test/{i}") for i in range(50)]  # type: ignore[attr-defined]
        assert [h.get(timeout=10) for h in handles] == [
            len(f"https://example.test/{i}") for i in range(50)
        ]
    finally:
        app.disconnect_all()  # type: ignore[attr-defined]
