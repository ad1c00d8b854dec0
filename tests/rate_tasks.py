"""Tasks of tests/worker/test_rate_limit.py: one with its own rate limit, one without, on one
queue (imported by the worker processes of that test only)."""

from __future__ import annotations

from ztq.core import task


@task(queue="paced", rate_limit="4/s")
def call_api(n: int) -> int:
    return n


@task(queue="paced")
def local_work(n: int) -> int:
    return n
