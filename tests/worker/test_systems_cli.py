"""``ztq --system NAME`` and ``ztq systems`` (docs/systems.md) on two real redis-servers:
the suite's own (``eu``, the default system) and its Redis 6.2 (``us``), and a third that
is killed to be unreachable."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import ztq.core as ztq
from tests import sample_tasks as t
from tests.console import scenario
from tests.test_doc_examples import code_blocks
from ztq.core.engine.connection import make_client
from ztq.core.engine.storage import Storage
from ztq.core.monitor import queues as monitor
from ztq.worker.cli.commands import main
from ztq.worker.embedded import RedisProcess


@pytest.fixture
def ini(
    redis_url: str, redis_62: RedisProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """app.ini naming eu (the default) and us; eu has 2 errors in alpha, us 3 in beta."""
    monkeypatch.delenv("ZTQ_REDIS_URL")  # the file's ztq.redis_url: the default system
    redis.Redis(port=redis_62.port).flushall()
    for url, queue, n in ((redis_62.url, "beta", 3), (redis_url, "alpha", 2)):
        storage = ztq.connect(url)
        for i in range(n):
            t.boom.enqueue((f"{queue} {i}",), queue=queue)
        scenario.work(storage, queue, fail=lambda p: p["args"][0])
        scenario.heartbeat(storage, f"{queue}-worker", threads={queue: 1})
    path = tmp_path / "app.ini"
    path.write_text(
        "[app:main]\nuse = egg:ztq\n"
        f"ztq.redis_url = {redis_url}\n"
        f"ztq.systems =\n    eu {redis_url}\n    us {redis_62.url}\n"
    )
    yield path


def storage_at(url: str) -> Storage:
    """A storage of its own (the command in this process replaces ztq's default one)."""
    return Storage(make_client(url), url=url)


def test_ztq_systems_lists_each_with_its_health(
    ini: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["systems", "-c", str(ini), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    got = [(r["name"], r["default"], r["reachable"], r["workers"], r["queues"], r["errors"])
           for r in rows]  # fmt: skip
    assert got == [("eu", True, True, 1, 1, 2), ("us", False, True, 1, 1, 3)]
    assert main(["systems", "-c", str(ini)]) == 0
    out = capsys.readouterr().out
    assert "eu (default)" in out and "us" in out and "unreachable" not in out


@pytest.mark.slow
def test_an_unreachable_system_is_named_and_the_exit_code_says_so(
    ini: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    down = RedisProcess().start()
    down.stop()
    try:
        monkeypatch.setenv("ZTQ_SYSTEMS", ini.read_text().split("ztq.systems =")[1].strip()
                           .replace("\n", ";") + f"; asia {down.url}")  # fmt: skip
        assert main(["systems", "-c", str(ini), "--json"]) == 1
        rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
        assert not rows["asia"]["reachable"] and "cannot reach Redis" in rows["asia"]["problem"]
        assert rows["us"]["reachable"] and rows["us"]["errors"] == 3
        assert main(["systems", "-c", str(ini)]) == 1
        captured = capsys.readouterr()
        assert "unreachable" in captured.out and "ztq systems: asia:" in captured.err
    finally:
        down.cleanup()


def test_system_picks_the_redis_of_every_command(
    ini: Path, redis_url: str, redis_62: RedisProcess, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    assert main(["--system", "us", "errors", "-c", str(ini), "--json"]) == 0
    assert {e["queue"] for e in json.loads(capsys.readouterr().out)} == {"beta"}
    assert main(["errors", "--system", "us", "-c", str(ini), "--json"]) == 0  # after it too
    assert len(json.loads(capsys.readouterr().out)) == 3
    assert main(["errors", "-c", str(ini), "--json"]) == 0  # none: the default, eu
    assert {e["queue"] for e in json.loads(capsys.readouterr().out)} == {"alpha"}
    monkeypatch.setenv("ZTQ_SYSTEM", "us")
    assert main(["redo", "beta", "--all", "-c", str(ini)]) == 0
    us = storage_at(redis_62.url)
    assert us.client.zcard(us.keys.errors("beta")) == 0
    eu = storage_at(redis_url)
    assert eu.client.zcard(eu.keys.errors("alpha")) == 2
    [entry] = [f for _, f in us.client.xrange(us.keys.audit) if f["action"] == "bulk redo"]
    assert entry["system"] == "us" and entry["user"].startswith("cli:")


def test_system_errors_are_clear(ini: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--system", "nope", "info", "-c", str(ini)]) == 2
    assert "flag system: no system named 'nope'; known: eu, us" in capsys.readouterr().err
    assert main(["--system", "us", "info", "-c", str(ini), "--redis", "redis://h/0"]) == 2
    assert "give a system or a Redis URL and prefix" in capsys.readouterr().err
    assert main(["--system", "b/d", "info", "-c", str(ini)]) == 2
    assert "flag system: system must be 1-32" in capsys.readouterr().err


def test_an_application_never_reads_ztq_system(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZTQ_SYSTEM", "us")
    assert ztq.connect(redis_url).url == redis_url  # only the ztq commands choose systems


@pytest.mark.slow
def test_a_worker_serves_the_system_it_is_given(
    ini: Path, redis_url: str, redis_62: RedisProcess
) -> None:
    """``ztq --system us worker``: the worker runs us's tasks, and leaves eu's alone."""
    t.add.enqueue((1, 2), queue="gamma")  # on eu, the default connection
    ztq.connect(redis_62.url)
    t.add.enqueue((20, 22), queue="gamma")  # on us
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZTQ_")}
    done = subprocess.run(
        [sys.executable, "-m", "ztq.worker", "--system", "us", "-c", str(ini),
         "--queue", "gamma", "--import", "tests.sample_tasks", "--burst"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    us, eu = storage_at(redis_62.url), storage_at(redis_url)
    assert [s.pending for s in monitor.queue_stats(us, ["gamma"])] == [0]
    assert [s.pending for s in monitor.queue_stats(eu, ["gamma"])] == [1]


def test_the_commands_of_docs_systems_md_run_as_written(
    ini: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    [shell] = [b for b in code_blocks("systems.md") if "ztq systems" in b]
    lines = [line.split(" #")[0].strip() for line in shell.strip().splitlines()]
    assert len(lines) == 3
    outputs = []
    for line in lines:
        env, _, command = line.rpartition("ztq ")
        for assignment in env.split():
            monkeypatch.setenv(*assignment.split("=", 1))
        argv = [str(ini) if w == "app.ini" else w for w in shlex.split(command)]
        assert main(argv) == 0, line
        outputs.append(capsys.readouterr().out)
    assert "eu (default)" in outputs[0] and "us" in outputs[0]
    assert "beta" in outputs[1] and "alpha" not in outputs[1]  # us's queues
    assert "in boom  beta (3)" in outputs[2]  # us's three errors, one group, in queue beta
