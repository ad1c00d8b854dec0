"""``async def`` tasks for the async pool tests (imported by test workers)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from ztq.core import Retry, task
from ztq.worker import areport_job, areport_progress, current_run

# the pool's event loop runs in a worker thread of the test process: these are shared
state: dict[str, Any] = {"in_flight": 0, "peak": 0, "cancelled": [], "gate": None}


def reset() -> None:
    state.update(in_flight=0, peak=0, cancelled=[], gate=None)


@task(queue="crawl")
async def fetch(url: str) -> dict[str, Any]:
    await asyncio.sleep(0)
    run = current_run()
    return {"url": url, "task_id": run.task_id if run else None}


@task(queue="crawl")
async def together(n: int) -> int:
    """Finishes only once ``n`` runs are in flight at the same time (a barrier)."""
    loop_gate = state["gate"]
    if loop_gate is None:
        loop_gate = state["gate"] = asyncio.Event()
    state["in_flight"] += 1
    state["peak"] = max(state["peak"], state["in_flight"])
    if state["in_flight"] >= n:
        loop_gate.set()
    try:
        await asyncio.wait_for(loop_gate.wait(), timeout=10)
    finally:
        state["in_flight"] -= 1
    return state["peak"]


@task(queue="crawl")
async def hang(tag: str, marker: str = "") -> None:
    """Waits until cancelled; writes ``marker`` when the run starts."""
    if marker:
        with open(marker, "a") as fh:
            fh.write(f"{os.getpid()} {tag}\n")
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        state["cancelled"].append(tag)
        raise


@task(queue="crawl")
async def nap(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "rested"


@task(queue="crawl")
async def flaky(path: str, fail_times: int) -> int:
    """Raises Retry until it ran ``fail_times`` times (a counter file)."""
    counter = Path(path)
    count = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(count + 1))
    if count < fail_times:
        raise Retry(delay=0)
    return count


@task(queue="crawl")
async def steps(total: int, release: str) -> str:
    """Reports progress, then waits for the file ``release`` to exist."""
    for done in range(1, total + 1):
        await areport_progress(done=done, total=total)
    await areport_job(comment="waiting for the release file")
    while not os.path.exists(release):
        await asyncio.sleep(0.01)
    return "stepped"


@task(queue="crawl")
async def unencodable() -> object:
    await asyncio.sleep(0)
    return {1, 2}


@task(queue="crawl")
async def chained(previous: Any, suffix: str) -> str:
    await asyncio.sleep(0)
    return f"{previous}{suffix}"


@task(queue="crawl")
def blocking_add(a: int, b: int) -> int:
    """A plain function on the async queue: the pool refuses it."""
    return a + b


@task(queue="threads")
async def misplaced(x: int) -> int:
    """An async def on a queue served by threads: refused, kept in errors."""
    await asyncio.sleep(0)
    return x


@task(queue="crawl")
async def sink(*args: Any, **kwargs: Any) -> dict[str, Any]:
    await asyncio.sleep(0)
    return {"args": list(args), "kwargs": kwargs}


@task(queue="crawl")
async def slow_note(path: str, tag: str, seconds: float) -> None:
    """Sleeps, then appends ``tag`` to ``path``: a run killed while asleep leaves no line."""
    await asyncio.sleep(seconds)
    with open(path, "a") as fh:
        fh.write(f"{tag}\n")


@task(queue="crawl")
async def stubborn(tag: str) -> None:
    """Swallows the first cancellation (its timeout's), then waits again."""
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        state["cancelled"].append(tag)
    await asyncio.sleep(3600)


@task(queue="crawl")
async def inner_cancel() -> None:
    """Lets out the cancellation of something it awaited (not the pool's doing)."""
    inner = asyncio.ensure_future(asyncio.sleep(10))
    inner.cancel()
    await inner
