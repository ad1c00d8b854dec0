"""One live worker per name, and a worker told when it serves none of its tasks' queues
(issue 39): two workers of one name hid each other, and ``ztq workers stop dup`` stopped the
hidden one; a worker with no ``--queue`` served ``default`` without a word that its tasks
live on other queues."""

from __future__ import annotations

import os
import signal
import socket
from importlib.metadata import version
from pathlib import Path

import pytest

import ztq.core as ztq
from ztq.core.engine.workers import get_worker
from ztq.worker.cli.commands import main

from .conftest import wait_for, worker_processes
from .test_worker_start import flushed_stderr


@pytest.mark.slow
def test_a_second_worker_with_a_live_name_is_refused_naming_the_others_host_and_pid(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    storage = ztq.get_storage()
    with worker_processes(redis_url, tmp_path, 1, "default:1") as (first,):
        wait_for(lambda: get_worker(storage, "w0"), timeout=30)
        argv = ["worker", "--redis", redis_url, "--name", "w0", "--queue", "default", "--burst"]
        assert main(argv) == 2
        err = flushed_stderr(capsys)
        assert f"worker name 'w0' is taken by a live worker on host {socket.gethostname()} " in err
        assert f"(pid {first.pid}," in err and "give this one another --name" in err
        assert first.poll() is None  # the first one was not touched
        assert get_worker(storage, "w0").get("pid") == first.pid
        # killed, its heartbeat still fresh: the name is free at once on the same host
        os.kill(first.pid, signal.SIGKILL)
        first.wait(10)
    assert main(argv) == 0


def test_a_stopped_workers_name_may_be_reused(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["worker", "--redis", redis_url, "--name", "again", "--queue", "default", "--burst"]
    assert main(argv) == 0
    assert main(argv) == 0  # the first one's last heartbeat says "stopped"


@pytest.mark.slow
def test_a_worker_serving_none_of_its_tasks_queues_says_so_once(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["worker", "--redis", redis_url, "--import", "tests.sample_tasks", "--burst"]
    assert main([*argv, "--queue", "other"]) == 0
    err = flushed_stderr(capsys)
    warned = [line for line in err.splitlines() if "none of the queues" in line]
    assert len(warned) == 1, err
    assert "WARNING" in warned[0]
    # the default app holds the tasks every test module imported: sample_tasks' among them
    assert "default, hot, mail" in warned[0] and "--queue default --queue hot" in warned[0]
    assert main([*argv, "--queue", "mail"]) == 0  # serves one of them: nothing to say
    assert "none of the queues" not in flushed_stderr(capsys)


def test_ztq_version_prints_the_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"ztq {version('ztq')}"
