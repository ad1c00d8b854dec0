"""The task of ``bench.rate_limit`` (imported by its worker processes)."""

from __future__ import annotations

from ztq.core import task


@task(name="bench.rate_tasks.call_api", queue="paced")
def call_api(i: int) -> None:
    """Does nothing: the drain measures the rate limit, not the work."""
