"""The exit codes of ``ztq`` (docs/cli.md, "Exit codes"): 0 done, 1 not found or a check
failed, 2 usage, configuration or Redis unreachable; every error is one line on stderr,
with no traceback, and a command that fails changes nothing."""

from __future__ import annotations

import socket
from typing import Any

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from ztq.core.engine.storage import Storage
from ztq.worker.cli.commands import main

MISSING = "0" * 32  # a task id that is nowhere


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _seed(storage: Storage) -> str:
    """Three tasks ready in default, one in mail's errors; returns the failed task's id."""
    for i in range(3):
        t.noop.delay(i)
    failed = t.send.delay("eve@example.org").id
    for task in storage.leases.fetch("mail", "w", "t0", 60_000, limit=10):
        storage.leases.fail("mail", "w", task.id, task.token, "SMTPError", "550", "")
    return failed


def _snapshot(storage: Storage) -> dict[str, Any]:
    client = storage.client
    return {k: client.dump(k) for k in sorted(client.keys("*"))}


# (argv with {url} / {port} / {db99} / {secret99} / {closed} filled in, exit code, stderr line)
CASES = [
    (["redo", "mail", MISSING, "--redis", "{url}"], 1,
     f"ztq: no task {MISSING} in the errors of mail"),
    (["redo", "nosuchqueue", "--all", "--redis", "{url}"], 1, "ztq: no queue nosuchqueue"),
    (["redo", "nosuchqueue", MISSING, "--redis", "{url}"], 1, "ztq: no queue nosuchqueue"),
    (["redo", MISSING, "--redis", "{url}"], 2,
     "ztq: name task ids or --all: ztq redo QUEUE ID... | ztq redo QUEUE --all "
     "[--task TEXT] [--grep TEXT]"),
    (["delete", "mail", MISSING, "--yes", "--redis", "{url}"], 1,
     f"ztq: no task {MISSING} in mail"),
    (["delete", "nosuchqueue", "--errors", "--all", "--yes", "--redis", "{url}"], 1,
     "ztq: no queue nosuchqueue"),
    (["purge", "nosuchqueue", "ready", "--yes", "--redis", "{url}"], 1,
     "ztq: no queue nosuchqueue"),
    (["queue", "pause", "nosuchqueue", "--redis", "{url}"], 1, "ztq: no queue nosuchqueue"),
    (["task", MISSING, "--redis", "{url}"], 1, f"ztq: no task {MISSING}"),
    (["info", "--redis", "{db99}"], 2,
     "ztq: Redis at {db99} refused the connection: DB index is out of range"),
    (["info", "--redis", "{secret99}"], 2,
     "ztq: Redis at {masked99} refused the connection: DB index is out of range"),
    (["check", "--redis", "{db99}"], 2,
     "ztq check: Redis at {db99} refused the connection: DB index is out of range"),
    (["info", "--redis", "redis://127.0.0.1:{closed}/0"], 2,
     "ztq: cannot reach Redis at redis://127.0.0.1:{closed}/0: Error 111 connecting to "
     "127.0.0.1:{closed}. Connection refused."),
    (["enqueue", "nosuch.task", "--redis", "{url}"], 2,
     "ztq: cannot find task nosuch.task (not registered, and no module.function of that "
     "name imports): give --queue QUEUE to enqueue it by name"),
    (["enqueue", "tests.sample_tasks.add", "--args", "[1,", "--redis", "{url}"], 2,
     "ztq: --args/--kwargs must be JSON: Expecting value: line 1 column 4 (char 3)"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "code", "line"), CASES, ids=[" ".join(c[0][:3]) for c in CASES])
def test_exit_code_and_one_line_on_stderr(
    redis_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    code: int,
    line: str,
) -> None:
    monkeypatch.delenv("ZTQ_REDIS_URL", raising=False)
    monkeypatch.delenv("ZTQ_SYSTEM", raising=False)
    storage = ztq.get_storage()
    _seed(storage)
    before = _snapshot(storage)
    capsys.readouterr()
    port = redis_url.rsplit(":", 1)[1].split("/")[0]
    values = {
        "url": redis_url,
        "db99": f"redis://127.0.0.1:{port}/99",
        "secret99": f"redis://:hunter2@127.0.0.1:{port}/99",
        "masked99": f"redis://:***@127.0.0.1:{port}/99",
        "closed": str(_closed_port()),
    }
    argv = [a.format(**values) for a in argv]
    got = main(argv)
    out, err = capsys.readouterr()
    assert got == code, (out, err)
    assert "Traceback" not in err and "hunter2" not in err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.rstrip("\n") == line.format(**values)
    assert _snapshot(storage) == before  # a command that fails changes nothing


def test_redo_of_ids_redoes_those_found_and_names_the_others(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    storage = ztq.get_storage()
    failed = _seed(storage)
    assert main(["redo", "mail", failed, MISSING, "--redis", redis_url]) == 1
    out, err = capsys.readouterr()
    assert out == "1 task(s) back in mail\n"
    assert err == f"ztq: no task {MISSING} in the errors of mail\n"
    assert storage.queues.pending_count("mail") == 1
    assert main(["redo", "mail", "--all", "--redis", redis_url]) == 0  # a queue, no errors
    assert capsys.readouterr().out == "0 of 0 error(s) back in mail\n"
