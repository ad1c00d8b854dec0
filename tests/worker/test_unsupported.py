"""Functions whose call does not run their body are never counted as done (real Redis)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import ztq.core as ztq
from tests.worker.conftest import wait_for
from ztq.core.errors import UnsupportedTask, ZtqError


def test_async_def_tasks_register_as_async() -> None:
    async def fetch_page(url: str) -> str:
        await asyncio.sleep(0)
        return url

    class Crawler:
        async def __call__(self, url: str) -> None:
            await asyncio.sleep(0)

    tf = ztq.task(name="tests.unsupported.fetch_page")(fetch_page)
    assert tf.is_async and ztq.task(name="tests.unsupported.crawler")(Crawler()).is_async
    assert not ztq.task(name="tests.unsupported.plain")(lambda: None).is_async


def test_generators_are_refused() -> None:
    def rows() -> Iterator[int]:
        yield 1

    async def stream() -> AsyncIterator[int]:
        yield 1

    class Lines:
        def __call__(self) -> Iterator[str]:
            yield "a"

    with pytest.raises(UnsupportedTask, match="rows.*generator function") as caught:
        ztq.task(name="tests.unsupported.rows")(rows)
    assert isinstance(caught.value, ZtqError)
    with pytest.raises(UnsupportedTask, match="async generator"):
        ztq.task(name="tests.unsupported.stream")(stream)
    with pytest.raises(UnsupportedTask, match="generator function"):
        ztq.task(name="tests.unsupported.lines")(Lines())
    assert not {"rows", "stream", "lines"} & {n.rsplit(".", 1)[-1] for n in ztq.registered()}


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
