"""Tasks used across the test suite (imported by test workers with --import)."""

from __future__ import annotations

import os
import time
from typing import Any

from ztq.core import Retry, task


def _bump(path: str) -> int:
    """Increments a counter file; returns the value before."""
    count = 0
    if os.path.exists(path):
        with open(path) as fh:
            count = int(fh.read() or 0)
    with open(path, "w") as fh:
        fh.write(str(count + 1))
    return count


@task
def add(a: int, b: int) -> int:
    return a + b


@task(queue="mail")
def send(to: str, body: str = "") -> str:
    return f"sent to {to}"


@task(queue="mail", name="tests.other.send")
def send_other(to: str) -> str:
    return to


@task(priority="high")
def urgent(n: int) -> int:
    return n


@task
def noop(*args: Any, **kwargs: Any) -> None:
    return None


@task
def boom(message: str = "boom") -> None:
    raise ValueError(message)


@task
def sleepy(seconds: float, marker: str = "") -> str:
    time.sleep(seconds)
    if marker:
        with open(marker, "a") as fh:
            fh.write(f"{os.getpid()}\n")
    return "slept"


@task
def flaky(path: str, fail_times: int) -> str:
    """Fails until it has been called ``fail_times`` times (counted in a file)."""
    count = _bump(path)
    if count < fail_times:
        raise RuntimeError(f"flaky failure {count + 1}")
    return "ok"


@task
def asks_retry(path: str) -> str:
    count = _bump(path)
    if count == 0:
        raise Retry(delay=0.2)
    return "second time"


@task
def record(path: str, value: str) -> None:
    """Appends ``value`` to a file: lets tests count runs across processes."""
    with open(path, "a") as fh:
        fh.write(value + "\n")


@task
def on_fail(path: str, error_code: str = "", error_message: str = "") -> None:
    with open(path, "a") as fh:
        fh.write(f"{error_code}|{error_message}\n")


@task
def on_prog(path: str, progress: dict | None = None) -> None:
    with open(path, "a") as fh:
        fh.write(f"{(progress or {}).get('pct')}\n")


@task
def progressing(steps: int) -> str:
    from ztq.worker import report_job, report_progress

    report_job(comment="working")
    for i in range(1, steps + 1):
        report_progress(pct=100 * i // steps)
    return "progressed"


@task
def busy_loop(seconds: float) -> str:
    """Pure Python busy loop: a soft timeout or a kill can interrupt it in a thread."""
    end = time.time() + seconds
    n = 0
    while time.time() < end:
        n += 1
    return "finished"


BATCH_LOG = os.environ.get("ZTQ_TEST_BATCH_LOG", "/tmp/ztq-batch.log")


def commit_batch() -> None:
    with open(BATCH_LOG, "a") as fh:
        fh.write("commit\n")


@task(batch_size=3, on_batch=commit_batch)
def index_doc(path: str, doc: int) -> None:
    with open(path, "a") as fh:
        fh.write(f"doc {doc}\n")


@task
def runs_child(pid_file: str) -> int:
    """Runs a child process and publishes its pid, as a PDF converter would."""
    import subprocess

    from ztq.worker import report_job

    proc = subprocess.Popen(["sleep", "60"])
    report_job(pid=proc.pid, comment="converting")
    with open(pid_file, "w") as fh:
        fh.write(str(proc.pid))
    return proc.wait()


@task
def slow_record(path: str, value: str, seconds: float = 0.05) -> None:
    """Sleeps, then appends ``value``: a task that can be cut off by a kill -9."""
    time.sleep(seconds)
    with open(path, "a") as fh:
        fh.write(value + "\n")


def _wait_for_file(path: str, limit: float = 30.0) -> None:
    """Block until ``path`` exists (a test releases the task); give up after ``limit`` s."""
    deadline = time.monotonic() + limit
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.01)


@task
def reports_then_waits(release: str, comment: str, pct: int) -> str:
    """Reports a comment and progress, then stays running until ``release`` exists."""
    from ztq.worker import report_job, report_progress

    report_job(comment=comment)
    report_progress(pct=pct, of="pages")
    _wait_for_file(release)
    return "released"


@task
def held(marker: str, release: str) -> str:
    """Appends ``start <pid>`` to ``marker``, waits until ``release`` exists, then appends
    ``end <pid>``: a run whose start and end a test controls, across processes."""
    with open(marker, "a") as fh:
        fh.write(f"start {os.getpid()}\n")
    _wait_for_file(release)
    with open(marker, "a") as fh:
        fh.write(f"end {os.getpid()}\n")
    return "held"


@task(name="tests.sample_tasks.chatter")
def chatter(message: str) -> int:
    """Logs ``message`` on the task's own logger; returns the pid it ran in."""
    import logging

    logging.getLogger("tests.child").warning(message)
    return os.getpid()


@task(queue="hot", shards=3)
def spread(n: int, marker: str = "") -> int:
    """A task of queue ``hot``, spread over three shards; appends ``n`` to ``marker``."""
    if marker:
        with open(marker, "a") as fh:
            fh.write(f"{n}\n")
    return n


@task(queue="xapian")
def serial_write(path: str, n: int, seconds: float = 0.05) -> int:
    """Writes ``start <time> <pid> <n>`` and ``end ...`` lines around a short run: a test
    measures how many runs of the queue overlapped, across processes."""
    with open(path, "a") as fh:
        fh.write(f"start {time.time():.6f} {os.getpid()} {n}\n")
    time.sleep(seconds)
    with open(path, "a") as fh:
        fh.write(f"end {time.time():.6f} {os.getpid()} {n}\n")
    return n


@task(queue="cb")
def count_in_redis(key: str, *results: Any) -> int:
    """Increments ``key`` in the worker's Redis (a batch callback counted across processes);
    returns the new count."""
    from ztq.core import get_storage

    return int(get_storage().client.incr(key))


@task
def tally(key: str, n: int) -> int:
    """Counts its runs in the worker's Redis (``HINCRBY key n 1``): a task run twice shows 2
    (the producer's lost replies, tests/worker/test_producer_lost_replies.py)."""
    from ztq.core import get_storage

    return int(get_storage().client.hincrby(key, str(n), 1))
