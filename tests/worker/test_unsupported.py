"""Functions whose call does not run their body are never counted as done (real Redis)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import ztq.core as ztq
from tests.worker.conftest import wait_for
from ztq.core.errors import UnsupportedTask, ZtqError


def test_async_def_task_is_refused_at_registration() -> None:
    async def fetch_page(url: str) -> str:
        await asyncio.sleep(0)
        return url

    with pytest.raises(UnsupportedTask, match=r"fetch_page.*async def") as caught:
        ztq.task(fetch_page)
    assert isinstance(caught.value, ZtqError)
    assert "fetch_page" not in str(ztq.registered())


def test_generators_and_async_callables_are_refused() -> None:
    def rows() -> Iterator[int]:
        yield 1

    async def stream() -> AsyncIterator[int]:
        yield 1

    class Crawler:
        async def __call__(self, url: str) -> None:
            await asyncio.sleep(0)

    with pytest.raises(UnsupportedTask, match="generator function"):
        ztq.task(name="tests.unsupported.rows")(rows)
    with pytest.raises(UnsupportedTask, match="async generator"):
        ztq.task(name="tests.unsupported.stream")(stream)
    with pytest.raises(UnsupportedTask, match="coroutine"):
        ztq.task(name="tests.unsupported.crawler")(Crawler())


async def _write(path: str) -> str:
    Path(path).write_text("ran")
    return "ran"


@ztq.task(name="tests.unsupported.returns_coroutine")
def returns_coroutine(path: str) -> object:
    """A plain def that hands back a coroutine: registration cannot see it coming."""
    return _write(path)


def test_a_returned_coroutine_fails_the_run_instead_of_counting_as_done(
    start_worker, tmp_path: Path
) -> None:
    start_worker()
    marker = tmp_path / "marker"
    h = returns_coroutine.enqueue((str(marker),), retries=3)
    wait_for(lambda: ztq.ping(h) == "error")
    rec = h.record()
    assert rec is not None and rec.state == "error" and rec.get("result") is None
    assert rec.get("error", "").startswith("UnsupportedTask: ")
    assert "returned coroutine" in rec.get("error")
    assert rec.get("attempts") == 1  # permanent: retrying cannot help
    assert not marker.exists()  # nothing ran, and nothing says it did
