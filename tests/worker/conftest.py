"""Worker fixtures: an in-process worker on the private redis-server, stopped after the test."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import ztq.core as ztq
from ztq.worker.config import ThreadSpec, WorkerConfig
from ztq.worker.worker import Worker

_numbers = itertools.count()
FAST = {"lease": 2.0, "heartbeat": 0.2, "idle_wait": 0.2, "retry_backoff": 0.05, "grace": 5.0}


ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def worker_processes(
    redis_url: str,
    logs: Path,
    count: int,
    queue: str,
    imports: str = "tests.sample_tasks",
    extra: tuple[str, ...] = (),
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` worker processes named w0, w1, ... serving ``queue`` (``NAME:THREADS``),
    quick heartbeats and leases, importing ``imports``, with ``extra`` arguments;
    SIGKILLed by PID at the end."""
    procs = []
    try:
        for i in range(count):
            log = open(logs / f"w{i}.log", "ab")  # noqa: SIM115 - closed with the process
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "ztq.worker", "--redis", redis_url, "--name", f"w{i}",
                 "--import", imports, "--queue", queue, "--heartbeat", "0.3",
                 "--lease", "2", "--log-level", "warning", *extra],
                cwd=ROOT, stdout=log, stderr=log))  # fmt: skip
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
            p.wait(10)


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM a worker process (a graceful stop), SIGKILL it if it is still there after 10 s."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, every: float = 0.02) -> Any:
    """Poll until ``predicate()`` is truthy; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"condition not met within {timeout}s")


@pytest.fixture
def start_worker(redis_url: str) -> Iterator[Callable[..., Worker]]:
    started: list[tuple[Worker, threading.Thread]] = []

    def start(queues: dict[str, int] | None = None, pool: str = "thread", **options: Any) -> Worker:
        """``queues``: threads per queue, or for ``pool="async"`` tasks at once per queue;
        ``threads=`` (ThreadSpecs) instead, for threads serving several queues."""
        if "threads" in options:
            threads = tuple(options.pop("threads"))
        elif pool == "async":
            threads = tuple(ThreadSpec(f"{q}-0", (q,), pool, n) for q, n in queues.items())
        else:
            threads = tuple(
                ThreadSpec(f"{q}-{i}", (q,), pool)
                for q, n in (queues or {"default": 1}).items()
                for i in range(n)
            )
        values = {**FAST, **options}
        cfg = WorkerConfig(
            redis_url=redis_url,
            name=values.pop("name", f"test-worker-{next(_numbers)}"),
            imports=values.pop("imports", ("tests.sample_tasks",)),
            threads=threads,
            **values,
        )
        app = values.pop("app", None)  # default: the default app on the test's Redis
        worker = Worker(cfg, app.storage() if app else ztq.get_storage(), app=app)
        th = threading.Thread(target=worker.run, daemon=True)
        th.start()
        started.append((worker, th))
        wait_for(lambda: all(ex.is_alive() for ex in worker.executors) and worker.executors)
        return worker

    yield start
    for worker, _ in started:
        worker.request_stop()
    for worker, th in started:
        th.join(15)
        assert not th.is_alive(), f"worker {worker.id} did not stop"
        # nor does its scheduler outlive it (it would write to the next test's Redis)
        assert worker.scheduler is None or not worker.scheduler.is_alive()


@pytest.fixture
def proxy(redis_server: Any, redis_url: str) -> Iterator[Any]:
    """ztq's default connection (producers, in-process workers, the test) through a proxy
    that can drop Redis's replies (tests/proxy.py)."""
    from tests.proxy import ReplyDropper

    p = ReplyDropper(redis_server.port)
    ztq.connect(p.url)
    yield p
    ztq.disconnect_all()
    p.close()
