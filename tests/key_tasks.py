"""Tasks with keys (tests/core/test_keys.py, tests/worker/test_keys_workers.py)."""

from __future__ import annotations

import os
import time

import ztq.core as ztq

Q = "mailer"


@ztq.task(queue=Q, key="account", concurrency=2)
def send_mail(account: str, n: int) -> None:
    """A mail of an account: at most 2 of one account at once."""


@ztq.task(queue=Q, key=lambda args, kwargs: f"host:{args[0]}")
def crawl(host: str, page: int = 0) -> None:
    """A page of a host: the key is computed from the arguments."""


@ztq.task(queue=Q, key="account", rate_limit="5/s per key")
def call_api(account: str, n: int) -> None:
    """An API call of an account: at most 5 a second per account."""


@ztq.task(queue=Q)
def plain(n: int) -> None:
    """A task without a key, in the same queue."""


@ztq.task(queue=Q, key="account", concurrency=2, retries=0)
def keyed_write(path: str, account: str, n: int, seconds: float = 0.05) -> int:
    """Writes ``start|end <time> <pid> <account> <n>`` around a short run: a test measures
    how many runs of one key overlapped, across processes."""
    with open(path, "a") as fh:
        fh.write(f"start {time.time():.6f} {os.getpid()} {account} {n}\n")
    time.sleep(seconds)
    with open(path, "a") as fh:
        fh.write(f"end {time.time():.6f} {os.getpid()} {account} {n}\n")
    return n


@ztq.task(queue=Q, key="account", rate_limit="5/s per key")
def rated(account: str, n: int) -> int:
    """A call limited to 5 a second per account."""
    return n


@ztq.task(queue=Q, key="account")
def turn(account: str, n: int, seconds: float = 0.0) -> int:
    """A short run of an account: the keys take turns."""
    time.sleep(seconds)
    return n


@ztq.task(queue=Q, key="account", rate_limit="1/m per key")
def slow_api(account: str, n: int) -> int:
    """A call limited to 1 a minute per account."""
    return n


@ztq.task(queue="own-rate", rate_limit="20/s")
def own_rate(account: str) -> None:
    """A task with its own (task-wide) rate limit: a key given to one of its calls is refused
    (the keyed fetch checks each key's rate, not the task's)."""
