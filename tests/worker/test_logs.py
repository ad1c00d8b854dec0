"""Log lines carry the running task (the task code's own lines too), as text or JSON lines;
each run has a start and an end line (real Redis, in-process and a real worker process)."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import ztq.core as ztq
from tests import sample_tasks
from tests.worker.conftest import wait_for
from ztq.worker.logs import HANDLER, configure

ROOT = Path(__file__).resolve().parents[2]
user_log = logging.getLogger("tests.user")


@ztq.task(name="tests.logs.chatty", retries=1)
def chatty(fail: bool = False) -> str:
    user_log.info("hello from the task")
    if fail:
        raise ValueError("bad input")
    return "ok"


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    configure("info", "json", stream)
    yield stream
    root = logging.getLogger()
    for h in [h for h in root.handlers if h.get_name() == HANDLER]:
        root.removeHandler(h)
    root.setLevel(logging.WARNING)


def parsed(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_carry_the_task_and_each_run_has_a_start_and_an_end(
    start_worker, json_lines: io.StringIO
) -> None:
    start_worker()
    ok, bad = chatty.delay(), chatty.delay(True)
    wait_for(lambda: ztq.ping(ok) == "done" and ztq.ping(bad) == "error")
    lines = parsed(json_lines)
    mine = [x for x in lines if x["logger"] == "tests.user"]
    assert {(x["task_id"], x["attempt"]) for x in mine} == {(ok.id, 1), (bad.id, 1), (bad.id, 2)}
    assert all(x["task"] == "tests.logs.chatty" and x["queue"] == "default" for x in mine)
    runs = [x for x in lines if x["logger"] == "ztq.runs"]
    assert [(x["event"], x.get("outcome")) for x in runs if x["task_id"] == ok.id] == [
        ("start", None),
        ("end", "done"),
    ]
    ends = [x for x in runs if x["task_id"] == bad.id and x["event"] == "end"]
    assert [(x["outcome"], x["error"], x["attempt"]) for x in ends] == [
        ("retry", "ValueError", 1),
        ("failed", "ValueError", 2),
    ]
    assert all(isinstance(x["duration_ms"], float) for x in ends)


def test_outside_a_run_a_line_has_no_task_fields(json_lines: io.StringIO) -> None:
    user_log.warning("not in a task")
    [line] = parsed(json_lines)
    assert line["message"] == "not in a task" and "task_id" not in line


def test_a_worker_process_writes_json_lines(redis_url: str, tmp_path: Path) -> None:
    err = tmp_path / "stderr"
    env = {**os.environ, "ZTQ_REDIS_URL": redis_url, "ZTQ_LOG_FORMAT": "json"}
    h = sample_tasks.add.delay(20, 22)
    with open(err, "wb") as out:
        proc = subprocess.run(
            [sys.executable, "-m", "ztq.worker", "--import", "tests.sample_tasks", "--burst"],
            cwd=ROOT, env=env, stdout=out, stderr=out, timeout=60,
        )  # fmt: skip
    assert proc.returncode == 0, err.read_text()
    lines = [json.loads(line) for line in err.read_text().splitlines()]
    mine = [(x.get("event"), x.get("outcome")) for x in lines if x.get("task_id") == h.id]
    assert mine == [("start", None), ("end", "done")]
    assert ztq.ping(h) == "done"


def test_a_process_slot_child_logs_like_its_worker(redis_url: str, tmp_path: Path) -> None:
    err = tmp_path / "stderr"
    env = {**os.environ, "ZTQ_REDIS_URL": redis_url, "ZTQ_LOG_FORMAT": "json"}
    h = sample_tasks.chatter.delay("hello from the child")
    with open(err, "wb") as out:
        proc = subprocess.run(
            [sys.executable, "-m", "ztq.worker", "--import", "tests.sample_tasks",
             "--queue", "default:1:process", "--name", "slot-logs", "--burst"],
            cwd=ROOT, env=env, stdout=out, stderr=out, timeout=60,
        )  # fmt: skip
    assert proc.returncode == 0, err.read_text()
    lines = [json.loads(line) for line in err.read_text().splitlines()]
    from ztq.core.workers import get_worker

    worker = get_worker(ztq.get_storage(), "slot-logs", lost_after=3600)
    assert worker is not None and h.get(timeout=1) != worker.data["pid"]  # ran in the child
    [said] = [x for x in lines if x.get("message") == "hello from the child"]
    assert said["logger"] == "tests.child" and said["level"] == "WARNING"
    assert (said["task_id"], said["task"], said["queue"]) == (
        h.id,
        "tests.sample_tasks.chatter",
        "default",
    )
    assert said["attempt"] == 1
