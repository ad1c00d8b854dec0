"""What a worker says when it starts (issue 24, nothing fails silently): one block on
stderr with the version, the app, the Redis (password masked), the prefix, each queue with
its threads and pool, and the health port."""

from __future__ import annotations

import logging
from importlib.metadata import version

import pytest

from ztq.worker.cli.commands import main
from ztq.worker.config import ScaleSpec, ThreadSpec, WorkerConfig
from ztq.worker.logs import HANDLER
from ztq.worker.startup import start_summary
from ztq.worker.worker import Worker


def flushed_stderr(capsys: pytest.CaptureFixture[str]) -> str:
    """stderr of an in-process ``main``: ztq's handler writes INFO lines in batches."""
    for handler in logging.getLogger().handlers:
        if handler.get_name() == HANDLER:
            handler.flush()
    return capsys.readouterr().err


@pytest.mark.slow
def test_the_worker_command_prints_a_start_summary_by_default(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["worker", "--redis", redis_url, "--prefix", "sumtest", "--name", "box-1",
            "--queue", "mail:2", "--queue", "crawl:20:async", "--queue", "hot:1:shards=3",
            "--queue", "reports:0..4", "--heartbeat", "0.2", "--lease", "1", "--burst"]  # fmt: skip
    assert main(argv) == 0
    err = flushed_stderr(capsys)
    assert f"worker box-1 starting: ztq {version('ztq')}" in err
    block = err[err.index("worker box-1 starting") :].splitlines()[:8]
    assert block[1:] == [
        "  app: the default app",
        f"  redis: {redis_url}, prefix sumtest",
        "  queue mail: 2 threads",
        "  queue crawl: 1 async pool, 20 tasks at once",
        "  queue hot: 1 thread, 3 shards",
        "  queue reports: 0..4 threads, autoscaled",
        "  health: none",
    ]


def test_the_summary_masks_the_password_and_names_the_app_and_health_port() -> None:
    cfg = WorkerConfig(
        redis_url="redis://user:s3cret@127.0.0.1:1/0",
        prefix="shop",
        app="tests.app_tasks:app",
        name="w",
        threads=(ThreadSpec("fast", ("urgent", "default"), fair=True),
                 ThreadSpec("pdf-0", ("pdf",), "process"),
                 ThreadSpec("pdf-1", ("pdf",), "process")),
        scaled=(ScaleSpec("crawl", 10, 200, "async"),),
        health="127.0.0.1:8099",
    )  # fmt: skip
    text = start_summary(cfg, cfg.worker_id)
    assert "s3cret" not in text
    assert text.splitlines()[1:] == [
        "  app: tests.app_tasks:app",
        "  redis: redis://user:***@127.0.0.1:1/0, prefix shop",
        "  thread fast: queues urgent, default in turn (fair), 1 thread",
        "  queue pdf: 2 process slots",
        "  queue crawl: 10..200 async tasks at once, autoscaled",
        "  health: 127.0.0.1:8099 (/livez, /readyz)",
    ]


def test_burst_on_an_empty_queue_exits_without_waiting_idle_wait_or_a_heartbeat(
    redis_url: str,
) -> None:
    """Issue 39: ``--burst`` took 8 s to exit on an empty queue (an executor's idle wait,
    then the main loop's heartbeat). With both at 60 s, the worker still ends at once: the
    drained executor does not block, and its end wakes the main loop (an event)."""
    import threading

    import ztq.core as ztq

    cfg = WorkerConfig(redis_url=redis_url, name="burst-empty", burst=True, lease=120.0,
                       heartbeat=60.0, idle_wait=60.0,
                       threads=(ThreadSpec("default-0", ("default",)),))  # fmt: skip
    worker = Worker(cfg, ztq.get_storage())
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    runner.join(30)  # bounded: before the change it took idle_wait + heartbeat, 120 s
    alive = runner.is_alive()
    if alive:
        worker.request_stop()
        runner.join(70)
    assert not alive
