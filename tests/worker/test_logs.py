"""Log lines carry the running task (the task code's own lines too), as text or JSON lines;
each run has one line at INFO when it ends and a start line at DEBUG; lines are written in
batches and none is lost at exit (real Redis, in-process and real worker processes)."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest

import ztq.core as ztq
from tests import sample_tasks
from tests.worker.conftest import wait_for
from ztq.core.engine.storage import EnqueueEntry
from ztq.core.middleware.policies import LogRuns
from ztq.worker.logs import HANDLER, configure

ROOT = Path(__file__).resolve().parents[2]
user_log = logging.getLogger("tests.user")


@ztq.task(name="tests.logs.chatty", retries=1)
def chatty(fail: bool = False) -> str:
    user_log.info("hello from the task")
    if fail:
        raise ValueError("bad input")
    return "ok"


def ours() -> list[logging.Handler]:
    return [h for h in logging.getLogger().handlers if h.get_name() == HANDLER]


@pytest.fixture
def log_to() -> Iterator[Callable[..., io.StringIO]]:
    """``log_to(level, fmt)``: configure() into a StringIO, undone after the test."""

    def start(level: str = "info", fmt: str = "json") -> io.StringIO:
        stream = io.StringIO()
        configure(level, fmt, stream)
        return stream

    yield start
    root = logging.getLogger()
    for h in ours():
        root.removeHandler(h)
        h.close()
    root.setLevel(logging.WARNING)


@pytest.fixture
def json_lines(log_to) -> io.StringIO:
    return log_to("info", "json")


def written(stream: io.StringIO) -> str:
    for h in ours():
        h.flush()
    return stream.getvalue()


def parsed(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in written(stream).splitlines()]


def run_lines(
    level: str, log_to, start_worker
) -> tuple[list[dict], ztq.TaskHandle, ztq.TaskHandle]:
    stream = log_to(level, "json")
    start_worker()
    ok, bad = chatty.delay(), chatty.delay(True)
    wait_for(lambda: ztq.ping(ok) == "done" and ztq.ping(bad) == "error")
    return parsed(stream), ok, bad


def test_json_lines_carry_the_task_and_a_run_has_one_line_at_info(log_to, start_worker) -> None:
    lines, ok, bad = run_lines("info", log_to, start_worker)
    mine = [x for x in lines if x["logger"] == "tests.user"]
    assert {(x["task_id"], x["attempt"]) for x in mine} == {(ok.id, 1), (bad.id, 1), (bad.id, 2)}
    assert all(x["task"] == "tests.logs.chatty" and x["queue"] == "default" for x in mine)
    runs = [x for x in lines if x["logger"] == "ztq.runs"]
    [done] = [x for x in runs if x["task_id"] == ok.id]
    assert (done["event"], done["outcome"], done["level"]) == ("end", "done", "INFO")
    started = datetime.fromisoformat(done["started"])
    assert started <= datetime.fromisoformat(done["ts"]) and started.tzinfo is not None
    assert re.fullmatch(
        rf"task done id={ok.id} task=tests.logs.chatty queue=default attempt=1 "
        r"started=\d\d:\d\d:\d\d\.\d{3} runtime_ms=\d+\.\d",
        done["message"],
    )
    ends = [x for x in runs if x["task_id"] == bad.id]
    assert [(x["event"], x["outcome"], x["error"], x["attempt"]) for x in ends] == [
        ("end", "retry", "ValueError", 1),
        ("end", "failed", "ValueError", 2),
    ]
    assert all(isinstance(x["duration_ms"], float) for x in ends)


def test_at_debug_a_run_has_a_start_line_too(log_to, start_worker) -> None:
    lines, ok, _ = run_lines("debug", log_to, start_worker)
    runs = [x for x in lines if x["logger"] == "ztq.runs" and x["task_id"] == ok.id]
    assert [(x["event"], x["level"], x.get("outcome")) for x in runs] == [
        ("start", "DEBUG", None),
        ("end", "INFO", "done"),
    ]
    assert (
        runs[0]["message"]
        == f"task start id={ok.id} task=tests.logs.chatty queue=default attempt=1"
    )


def push_raw(payload: str) -> str:
    """A payload as it is stored, pushed to ``default`` without the producer's checks (an
    old producer, another language, a hand-made record)."""
    storage = ztq.get_storage()
    task_id = f"raw-{abs(hash(payload)) % 10**8}"
    storage.call(*storage.tasks.enqueue_op("default", [EnqueueEntry(task_id, payload)]))
    return task_id


CANNOT_RUN = {  # what cannot run: (the payload, the task named, the error, in its message)
    "unknown task": ('{"task":"tests.logs.nope","args":[],"kwargs":{}}', "tests.logs.nope",
                     "UnknownTask", "tests.logs.nope"),
    "wrong arguments": ('{"task":"tests.logs.chatty","args":[1,2,3],"kwargs":{}}',
                        "tests.logs.chatty", "WrongArguments", "too many positional"),
    "malformed payload": ('{"task": "tests.logs.chatty", "args": [', "?", "PayloadError",
                          "JSON"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CANNOT_RUN))
@pytest.mark.parametrize("fmt", ["json", "text"])
def test_a_run_that_cannot_start_ends_with_a_line_too(
    log_to, start_worker, case: str, fmt: str
) -> None:
    """Issue 24: an unknown task, wrong arguments or a payload that is not JSON go to the
    error list at once (never retried), and their end is logged like any failed run's:
    id, task (``?`` when the payload names none), queue, error type and its message."""
    payload, task, error, said = CANNOT_RUN[case]
    stream = log_to("info", fmt)
    start_worker()
    task_id = push_raw(payload)
    wait_for(lambda: ztq.ping(task_id, "default") == "error")
    wait_for(lambda: task_id in written(stream), timeout=5)
    if fmt == "text":
        [line] = [x for x in runs_of(written(stream)) if f"id={task_id} " in x]
        head = f"task failed id={task_id} task={task} queue=default attempt=1 "
        assert f" INFO ztq.runs {head}" in line
        assert f" error={error} detail=" in line and said in line
        return
    [end] = [x for x in parsed(stream) if x.get("task_id") == task_id]
    assert (end["logger"], end["level"], end["event"], end["outcome"]) == (
        "ztq.runs", "INFO", "end", "failed",
    )  # fmt: skip
    assert (end["task"], end["queue"], end["error"]) == (task, "default", error)
    assert said in end["detail"] and said in end["message"]


def test_a_plain_function_on_an_async_pool_ends_with_a_line(log_to, start_worker) -> None:
    """UnsupportedTask: the pool cannot run it (async_pool.py settles it unrun)."""
    stream = log_to("info", "json")
    start_worker({"default": 2}, pool="async")
    h = chatty.delay()
    wait_for(lambda: ztq.ping(h) == "error")
    wait_for(lambda: h.id in written(stream), timeout=5)
    [end] = [x for x in parsed(stream) if x.get("task_id") == h.id]
    assert (end["event"], end["outcome"], end["error"]) == ("end", "failed", "UnsupportedTask")
    assert "async pool" in end["detail"] and end["task"] == "tests.logs.chatty"


def runs_of(text: str) -> list[str]:
    return [line for line in text.splitlines() if "ztq.runs" in line]


LINES = [
    ("end", "done", "abc123", "shop.mail", "mail", 1, 1_700_000_000.25, 12.34, "", ""),
    ("end", "failed", "abc124", "shop.mail", "mail", 3, 1_700_000_001.5, 0.04, "ValueError", ""),
    ("start", "", "abc125", "shop.mail", "mail", 2, 1_700_000_002.0, 0.0, "", ""),
    ("end", "failed", "abc126", "shop.nope", "mail", 1, 1_700_000_002.5, 0.1, "UnknownTask",
     "no task named 'shop.nope'"),
]  # fmt: skip


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_run_line_without_a_record_reads_as_the_record_would(
    log_to, fmt: str, monkeypatch
) -> None:
    """While ztq's handler alone handles ztq.runs, LogRuns hands it the line (no record);
    with another handler on the way it makes a record: both write the same text."""
    stream = log_to("debug", fmt)
    [handler] = ours()
    monkeypatch.setattr(logging.getLogger(), "handlers", [handler])  # not pytest's
    runs = LogRuns()
    for n, line in enumerate(LINES):
        runs._emit(logging.DEBUG if line[0] == "start" else logging.INFO, 1_700_000_003.0 + n, line)
    fast = runs_of(written(stream))  # (other tests' threads may log meanwhile)
    assert len(fast) == 4 and handler.alone(LogRuns.log, logging.INFO)
    other = logging.StreamHandler(io.StringIO())
    LogRuns.log.addHandler(other)  # a handler on the way: a record is made
    try:
        assert not handler.alone(LogRuns.log, logging.INFO)
        for n, line in enumerate(LINES):
            level = logging.DEBUG if line[0] == "start" else logging.INFO
            runs._emit(level, 1_700_000_003.0 + n, line)
    finally:
        LogRuns.log.removeHandler(other)
    assert runs_of(written(stream))[4:] == fast
    assert "task failed id=abc124 task=shop.mail queue=mail attempt=3 started=" in fast[1]
    assert fast[1].endswith("runtime_ms=0.0 error=ValueError") or fmt == "json"
    assert fast[3].endswith("error=UnknownTask detail=\"no task named 'shop.nope'\"") or (
        fmt == "json" and json.loads(fast[3])["detail"] == "no task named 'shop.nope'"
    )


def test_lines_wait_in_memory_until_a_warning_or_a_flush_keeping_their_order(log_to) -> None:
    stream = log_to("info", "text")
    user_log.info("one")
    user_log.info("two")
    assert "tests.user" not in stream.getvalue()  # buffered: no write per line
    user_log.warning("three")  # written at once, after the lines before it
    mine = [line for line in stream.getvalue().splitlines() if " tests.user " in line]
    assert [line.rsplit(" ", 1)[1] for line in mine] == ["one", "two", "three"]
    user_log.info("four")
    wait_for(lambda: stream.getvalue().endswith("four\n"), timeout=5)  # the flush thread


def test_outside_a_run_a_line_has_no_task_fields(json_lines: io.StringIO) -> None:
    user_log.warning("not in a task")
    [line] = parsed(json_lines)
    assert line["message"] == "not in a task" and "task_id" not in line


@pytest.mark.slow
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
    assert mine == [("end", "done")]
    assert ztq.ping(h) == "done"


@pytest.mark.slow
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
    from ztq.core.engine.workers import get_worker

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


@pytest.mark.slow
def test_a_worker_loses_no_line_at_sigterm(redis_url: str, tmp_path: Path) -> None:
    """Lines wait in memory (here: up to an hour, tests/worker/slow_flush.py); SIGTERM's
    graceful stop ends in a normal exit, which writes them all."""
    err = tmp_path / "stderr"
    env = {**os.environ, "ZTQ_REDIS_URL": redis_url}
    handles = [sample_tasks.add.delay(i, 1) for i in range(200)]
    with open(err, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ztq.worker", "--import", "tests.sample_tasks",
             "--import", "tests.worker.slow_flush", "--name", "sigterm-logs"],
            cwd=ROOT, env=env, stdout=out, stderr=out,
        )  # fmt: skip
    try:
        wait_for(lambda: all(ztq.ping(h) == "done" for h in handles), timeout=30)
        assert "task done" not in err.read_text()  # still in memory
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    text = err.read_text()
    done = {m.group(1) for m in re.finditer(r"task done id=(\w+) ", text)}
    assert done == {h.id for h in handles}
    assert text.rstrip().endswith("worker sigterm-logs stopped")


@pytest.mark.slow
def test_a_worker_reads_its_log_level_from_its_file(redis_url: str, tmp_path: Path) -> None:
    ini = tmp_path / "worker.ini"
    ini.write_text(f"[server]\nredis = {redis_url}\nlog_level = warning\n")
    err = tmp_path / "stderr"
    env = {k: v for k, v in os.environ.items() if k not in ("ZTQ_LOG_LEVEL", "ZTQ_REDIS_URL")}
    h = sample_tasks.add.delay(1, 2)
    with open(err, "wb") as out:
        proc = subprocess.run(
            [sys.executable, "-m", "ztq.worker", "-c", str(ini), "--import", "tests.sample_tasks",
             "--burst"],
            cwd=ROOT, env=env, stdout=out, stderr=out, timeout=60,
        )  # fmt: skip
    assert proc.returncode == 0, err.read_text()
    assert ztq.ping(h) == "done" and "INFO" not in err.read_text()
