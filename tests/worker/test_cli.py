"""The ``ztq`` commands: ``redo --all`` is bounded; -c/--prefix choose the Redis keys."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from ztq.core.engine.storage import Storage
from ztq.worker.cli import commands as cli
from ztq.worker.cli.commands import main

QUEUE = "default"


def _fail_everything_ready(storage: Storage) -> int:
    """What a worker whose every run fails does: fetch what is ready, send it to errors."""
    failed = 0
    while leased := storage.leases.fetch(QUEUE, "failing-worker", "t0", 60_000, limit=500):
        for task in leased:
            storage.leases.fail(QUEUE, "failing-worker", task.id, task.token, "x", "boom", "")
            failed += 1
    return failed


class FailsAgainAtOnce:
    """A redo (``storage.tasks.requeue``) followed by a worker that fails every redone task
    before the next batch."""

    MAX_CALLS = 50  # far more than a bounded redo needs: an unbounded one would loop forever

    def __init__(self, storage: Storage) -> None:
        self.storage, self.calls, self.requeue_now = storage, 0, storage.tasks.requeue

    def requeue(self, queue: str, state: str, ids: Any = (), *, oldest: int = 0) -> int:
        self.calls += 1
        if self.calls > self.MAX_CALLS:
            raise AssertionError("redo --all chases the tasks it redid: it never ends")
        moved = self.requeue_now(queue, state, ids, oldest=oldest)
        _fail_everything_ready(self.storage)
        return moved


@pytest.mark.slow
def test_redo_all_is_bounded_by_the_errors_present_at_the_start(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    storage = ztq.get_storage()
    with ztq.transaction():
        for i in range(1200):
            t.noop.delay(i)
    assert _fail_everything_ready(storage) == 1200
    wrapped = FailsAgainAtOnce(storage)
    monkeypatch.setattr(storage.tasks, "requeue", wrapped.requeue)
    monkeypatch.setattr(cli, "_connect", lambda args: storage)
    assert main(["redo", QUEUE, "--all", "--yes", "--redis", redis_url]) == 0
    assert "1200 of 1200 error(s) back in default" in capsys.readouterr().out
    assert wrapped.calls == 3  # 500 + 500 + 200, then it stops


def test_redo_all_moves_every_error(redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    storage = ztq.get_storage()
    for i in range(3):
        t.noop.delay(i)
    _fail_everything_ready(storage)
    assert main(["redo", QUEUE, "--all", "--yes", "--redis", redis_url]) == 0
    assert "3 of 3 error(s) back in default" in capsys.readouterr().out
    assert storage.queues.pending_count(QUEUE) == 3


def test_commands_take_the_prefix_from_a_flag_or_a_file(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ZTQ_PREFIX", raising=False)
    monkeypatch.delenv("ZTQ_REDIS_URL", raising=False)
    path = tmp_path / "app.ini"
    path.write_text(f"[app:main]\nztq.redis_url = {redis_url}\nztq.prefix = fromfile\n")
    argv = ["enqueue", "tests.sample_tasks.add", "--args", "[1, 2]"]
    assert main([*argv, "-c", str(path)]) == 0
    assert ztq.get_storage().keys.prefix == "fromfile"
    assert main([*argv, "-c", str(path), "--prefix", "fromflag"]) == 0
    storage = ztq.get_storage()
    assert (storage.keys.prefix, storage.url) == ("fromflag", redis_url)
    keys = storage.client.keys("*")
    assert any(k.startswith("fromfile:") for k in keys)
    assert any(k.startswith("fromflag:") for k in keys)
    assert not any(k.startswith("ztq:") for k in keys)


@pytest.mark.slow
def test_enqueue_sends_a_known_task_as_the_code_would(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its queue, priority and id: the CLI and the code dedup together."""
    storage = ztq.get_storage()
    assert main(["enqueue", "tests.sample_tasks.send", "--args", '["eve"]',
                 "--redis", redis_url]) == 0  # fmt: skip
    task_id, outcome = capsys.readouterr().out.split()
    assert (task_id, outcome) == (t.send.prepare(["eve"]).resolve_id(), "added")
    assert storage.queues.pending_count("mail") == 1 and storage.queues.pending_count(QUEUE) == 0
    assert t.send.delay("eve").id == task_id
    assert storage.queues.pending_count("mail") == 1  # one task: the code's call is the same
    # a task registered under its own name (name=...), and a priority of its own
    assert main(["enqueue", "tests.other.send", "--args", '["bob"]', "--redis", redis_url]) == 0
    assert (
        main(["enqueue", "tests.sample_tasks.urgent", "--args", "[1]", "--redis", redis_url]) == 0
    )
    ids = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert storage.queues.pending_count("mail") == 2
    urgent = storage.tasks.record(QUEUE, ids[1])
    assert urgent is not None and urgent.priority == "high"
    # --queue and --priority still choose, for a known task too
    assert main(["enqueue", "tests.sample_tasks.add", "--args", "[1, 2]", "--queue", "other",
                 "--priority", "low", "--redis", redis_url]) == 0  # fmt: skip
    added = storage.tasks.record("other", capsys.readouterr().out.split()[0])
    assert added is not None and added.priority == "low"


@pytest.mark.slow
def test_enqueue_imports_module_function_and_sends_unknown_names_only_with_queue(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    storage = ztq.get_storage()
    # a fresh process: tests.sample_tasks is imported by its name (from the current folder)
    ztq_command = str(Path(sys.executable).with_name("ztq"))
    done = subprocess.run(
        [ztq_command, "enqueue", "tests.sample_tasks.send", "--args", '["ann"]'],
        env={**os.environ, "ZTQ_REDIS_URL": redis_url}, cwd=Path(__file__).parents[2],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == t.send.prepare(["ann"]).resolve_id()
    assert storage.queues.pending_count("mail") == 1
    # a name nothing registers: only where --queue says
    assert main(["enqueue", "billing.charge", "--redis", redis_url]) == 2
    assert "--queue QUEUE to enqueue it by name" in capsys.readouterr().err
    assert main(["enqueue", "billing.charge", "--args", "[7]", "--queue", "billing",
                 "--redis", redis_url]) == 0  # fmt: skip
    rec = storage.tasks.record("billing", capsys.readouterr().out.split()[0])
    assert rec is not None and (rec.task, rec.args) == ("billing.charge", [7])
