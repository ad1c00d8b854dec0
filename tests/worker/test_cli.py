"""The ``ztq`` commands: ``redo --all`` is bounded; -c/--prefix choose the Redis keys."""

from __future__ import annotations

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
    while leased := storage.fetch(QUEUE, "failing-worker", "t0", 60_000, limit=500):
        for task in leased:
            storage.fail(QUEUE, "failing-worker", task.id, task.token, "x", "boom", "")
            failed += 1
    return failed


class FailsAgainAtOnce:
    """The storage, with a worker that fails every redone task before the next batch."""

    MAX_CALLS = 50  # far more than a bounded redo needs: an unbounded one would loop forever

    def __init__(self, storage: Storage) -> None:
        self.storage, self.calls = storage, 0

    def requeue(self, queue: str, state: str, ids: Any = (), *, oldest: int = 0) -> int:
        self.calls += 1
        if self.calls > self.MAX_CALLS:
            raise AssertionError("redo --all chases the tasks it redid: it never ends")
        moved = self.storage.requeue(queue, state, ids, oldest=oldest)
        _fail_everything_ready(self.storage)
        return moved

    def __getattr__(self, name: str) -> Any:
        return getattr(self.storage, name)


def test_redo_all_is_bounded_by_the_errors_present_at_the_start(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    storage = ztq.get_storage()
    with ztq.transaction():
        for i in range(1200):
            t.noop.delay(i)
    assert _fail_everything_ready(storage) == 1200
    wrapped = FailsAgainAtOnce(storage)
    monkeypatch.setattr(cli, "_connect", lambda args: wrapped)
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
    assert storage.pending_count(QUEUE) == 3


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
