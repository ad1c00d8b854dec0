"""The operator's ``ztq`` commands: tables for people (colours only on a terminal,
NO_COLOR respected), ``--json`` for scripts, ``--watch``, the commands that change things
(audited, asking before destroying), and ``ztq check`` for probes and cron jobs."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import shlex
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

import ztq.core as ztq
from tests import forked_cli
from tests import sample_tasks as t
from tests.console import scenario
from ztq.core.engine.parts.leases import Finished
from ztq.core.engine.record import split_record
from ztq.core.engine.storage import Storage
from ztq.core.engine.workers import take_commands
from ztq.core.monitor import overview, streams
from ztq.worker.cli import ops, tasks, terminal
from ztq.worker.cli.commands import main

ZTQ = str(Path(sys.executable).with_name("ztq"))
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture
def store(redis_url: str) -> Storage:
    return ztq.get_storage()


def run(capsys: pytest.CaptureFixture[str], redis_url: str, *argv: str) -> tuple[int, str, str]:
    code = main([*argv, "--redis", redis_url])
    out, err = capsys.readouterr()
    return code, out, err


def in_a_terminal(redis_url: str, *argv: str, answer: str = "", env: dict[str, str] | None = None,
                  timeout: float = 30, columns: int = 200) -> tuple[int, str]:  # fmt: skip
    """Run ``ztq`` on a pseudo-terminal ``columns`` wide (as a person would), typing
    ``answer``."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    environ = {**os.environ, "ZTQ_REDIS_URL": redis_url, "COLUMNS": str(columns),
               "TERM": "xterm", **(env or {})}  # fmt: skip
    environ.pop("NO_COLOR", None) if env is None or "NO_COLOR" not in env else None
    proc = subprocess.Popen([ZTQ, *argv], stdin=slave, stdout=slave, stderr=slave, env=environ)
    os.close(slave)
    if answer:
        os.write(master, answer.encode())
    chunks, deadline = [], time.monotonic() + timeout
    while True:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
        assert time.monotonic() < deadline, b"".join(chunks).decode(errors="replace")
    os.close(master)
    return proc.wait(10), b"".join(chunks).decode(errors="replace")


def audit_actions(store: Storage) -> list[tuple[str, str]]:
    return [(e["user"], e["action"]) for e in streams.stream_page(store, "audit", limit=20).rows]


def test_info_shows_queues_and_live_workers_as_tables(
    store: Storage, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario.populate(store)
    scenario.heartbeat(store, "old-1", status="stopped", threads={"default": 1})
    code, out, _ = run(capsys, redis_url, "info")
    assert code == 0 and not ANSI.search(out)  # not a terminal: no colour codes
    default = next(line for line in out.splitlines() if line.startswith("default "))
    # ready high/normal/low, delayed, running, errors, done 1h, failed 1h
    assert default.split()[:7] == ["default", "1/12/1", "3", "1", "4", "6", "4"]
    assert "active" in default
    assert re.search(r"^reports\s+0/4/0\s.*\s0\s+active$", out, re.M)  # its worker is lost
    # a lost or stopped worker uses no CPU or memory now: its last report is not shown
    assert re.search(r"^batch-7\s+lost\s+batch-7\s+4242\s+–\s+–\s+reports:4\s", out, re.M)
    assert re.search(r"^mailer-1\s+paused\s+mail-1\s+4242\s+0%\s+64\.0 MB\s+mail:2", out, re.M)
    assert "tests.sample_tasks.sleepy" in out  # app-1's current task
    assert "old-1" not in out and "1 stopped worker(s) not shown (--all shows them)" in out
    out = run(capsys, redis_url, "info", "--all")[1]
    assert re.search(r"^old-1\s+stopped\s+app-1\s+4242\s+–\s+–\s+default:1\s", out, re.M)
    workers = json.loads(run(capsys, redis_url, "workers", "--all", "--json")[1])
    kept = {w["id"]: (w["cpu_percent"], w["rss"]) for w in workers}  # --json keeps them
    assert kept["batch-7"] == kept["old-1"] == (12.5, 120 * 2**20)


def test_info_json_is_what_the_console_api_serves(
    store: Storage, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario.populate(store)
    code, out, _ = run(capsys, redis_url, "info", "--json")
    data = json.loads(out)
    api = overview.queues(store, store.queues.names(), 30.0)
    assert [q["name"] for q in data["queues"]] == [q["name"] for q in api]
    assert data["queues"][0].keys() == api[0].keys()
    # a minute of throughput a line ([minute, done, failed]), not a number a line
    assert len(data["queues"][0]["throughput"]) == 60
    assert len(re.findall(r"^ +\[\d+, \d+, \d+\],?$", out, re.M)) == 60 * len(api)
    assert not re.search(r"^\s*-?\d+,?$", out, re.M)
    assert {w["id"] for w in data["workers"]} == {"app-1.4242", "mailer-1", "batch-7"}
    assert json.loads(run(capsys, redis_url, "workers", "--json")[1])[0]["id"]


@pytest.mark.slow
def test_colours_on_a_terminal_and_none_with_no_color(store: Storage, redis_url: str) -> None:
    scenario.populate(store)
    code, shown = in_a_terminal(redis_url, "info")
    assert code == 0 and ANSI.search(shown) and "lost" in shown
    red_lost = re.search(r"\x1b\[[0-9;]*31m\s*lost", shown)
    assert red_lost, shown[:2000]
    code, plain = in_a_terminal(redis_url, "info", env={"NO_COLOR": "1"})
    assert code == 0 and "lost" in plain and not re.search(r"\x1b\[[0-9;]*3[0-7]m", plain)


def test_errors_list_filter_groups_and_one_in_full(
    store: Storage, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = scenario.populate(store)
    code, out, _ = run(capsys, redis_url, "errors")
    assert code == 0 and "disk 2 is full" in out and "550 mailbox unavailable" in out
    out = run(capsys, redis_url, "errors", "--grep", "disk 1")[1]
    assert "disk 1 is full" in out and "disk 2" not in out
    out = run(capsys, redis_url, "errors", "--queue", "mail", "--json")[1]
    [only] = json.loads(out)
    assert only["queue"] == "mail" and only["error"].startswith("SMTPRecipientsRefused")
    out = run(capsys, redis_url, "errors", "--groups")[1]
    assert re.search(r"^\s*4\s+ValueError: .*sample_tasks\.py:44 in boom", out, re.M)
    code, out, _ = run(capsys, redis_url, "errors", ids["errors"][0])
    assert code == 0 and "Traceback (most recent call last)" in out and "disk 0 is full" in out
    # times in UTC with their age, not epoch ms; --json keeps the ms
    utc = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"
    for name in ("enqueued", "started", "ended", "failed"):
        assert re.search(rf"^{name}\s+{utc} \((\d+ ms|\d+\.\d s) ago\)\s*$", out, re.M), out
    assert not re.search(r"\b1\d{12}\b", out)
    code, out, _ = run(capsys, redis_url, "task", ids["errors"][0], "--json")
    assert json.loads(out)["traceback"].startswith("Traceback")
    assert isinstance(json.loads(out)["failed"], int)
    out = run(capsys, redis_url, "task", ids["delayed"][0])[1]  # due in 10 minutes
    # (a table pads a value shorter than its column's widest with spaces)
    assert re.search(rf"^due\s+{utc} \(in 9m [0-5]\ds\)\s*$", out, re.M), out
    code, _, err = run(capsys, redis_url, "task", "0" * 32)
    assert code == 1 and "no task" in err


def test_worker_and_queue_commands_are_sent_and_audited(
    store: Storage, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario.populate(store)
    code, out, _ = run(capsys, redis_url, "workers", "pause", "app-1.4242")
    assert code == 0 and out.strip() == "sent pause to app-1.4242"
    code, out, _ = run(capsys, redis_url, "workers", "threads", "app-1.4242", "--queue",
                       "mail", "--count", "3")  # fmt: skip
    assert code == 0
    commands = take_commands(store, "app-1.4242")
    assert [(c["cmd"], c.get("threads")) for c in commands] == [("pause", None), ("set_threads", 3)]
    assert commands[0]["by"].startswith("cli:")
    code, _, err = run(capsys, redis_url, "workers", "stop", "nobody")
    assert code == 1 and "no worker nobody" in err
    assert run(capsys, redis_url, "queue", "pause", "reports")[0] == 0
    assert store.queues.is_paused("reports")
    assert run(capsys, redis_url, "queue", "resume", "reports")[0] == 0
    assert not store.queues.is_paused("reports")
    actions = audit_actions(store)
    assert [a for _, a in actions[:4]] == ["resume queue", "pause queue", "worker set_threads",
                                           "worker pause"]  # fmt: skip
    assert all(user.startswith("cli:") for user, _ in actions[:4])


def test_destroying_needs_yes_where_nobody_can_be_asked(
    store: Storage, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(5):
        t.add.delay(i, 0)
    code, _, err = run(capsys, redis_url, "purge", "default", "ready")
    assert code == 2 and "add --yes" in err and store.queues.pending_count("default") == 5
    code, out, _ = run(capsys, redis_url, "queue", "purge", "default", "ready", "--yes")
    assert code == 0 and "5 task(s) deleted from default ready" in out
    assert store.queues.pending_count("default") == 0
    assert "purge ready" in [a for _, a in audit_actions(store)]


@pytest.mark.slow
def test_a_person_is_asked_and_sees_progress(store: Storage, redis_url: str) -> None:
    for i in range(1200):
        t.boom.delay(f"job-{i}")
    scenario.work(store, fail=lambda p: "broken", limit=2000)
    code, shown = in_a_terminal(redis_url, "delete", "default", "--errors", "--all", answer="n\n")
    assert code == 2 and "Delete the errors of default (1200 to look at)?" in shown
    assert "nothing was changed" in shown
    assert store.client.zcard(store.keys.errors("default")) == 1200
    code, shown = in_a_terminal(redis_url, "redo", "default", "--grep", "job-11")
    assert code == 0 and "111 of 1200 error(s) back in default" in shown  # 11, 110..119, 1100..
    assert "[y/n]" not in shown  # a redo destroys nothing: it does not ask
    assert "━" in shown  # rich's progress bar was drawn on the terminal
    assert store.queues.pending_count("default") == 111


def test_bulk_delete_takes_only_the_matching_errors(
    store: Storage, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for to in ("ann", "bob", "bob2"):
        t.send.delay(to, "x")
    scenario.work(store, "mail", fail=lambda p: f"refused {p['args'][0]}")
    code, out, _ = run(capsys, redis_url, "delete", "mail", "--errors", "--grep", "bob", "--yes")
    assert code == 0 and "2 error(s) deleted from mail" in out
    [left] = store.client.zrange(store.keys.errors("mail"), 0, -1)
    assert "ann" in store.client.hget(store.keys.tasks("mail"), left)
    code, _, err = run(capsys, redis_url, "delete", "mail", "--errors", "--yes")
    assert code == 2 and "--errors with --all, --task or --grep" in err


TABLES = (ops.QUEUE_COLUMNS, ops.WORKER_COLUMNS, tasks.ERROR_COLUMNS, tasks.GROUP_COLUMNS)
HEADERS = {c.header for columns in TABLES for c in columns} | {"FIELD", "VALUE"}
TITLES = ("Queues", "Workers", "Errors", "Error groups")


@pytest.mark.slow
@pytest.mark.parametrize("columns", [80, 100])
def test_tables_fit_a_narrow_terminal(store: Storage, redis_url: str, columns: int) -> None:
    """On a terminal of 80 or 100 columns the tables leave out columns rather than cut a
    header, and the queue names, worker ids and task ids stay whole on one line."""
    ids = scenario.populate(store)
    t.send.enqueue(("ann@example.org",), queue="notifications")
    worker = "eu-west-1b.batch.31337"
    scenario.heartbeat(store, worker, host="eu-west-1b", threads={"notifications": 2})
    store.queues.pause("reports")
    queues = ["default", "mail", "reports", "notifications"]
    workers = ["app-1.4242", "mailer-1", "batch-7", worker]
    shown: dict[str, str] = {}
    for argv in (["info"], ["workers"], ["errors"], ["errors", "--groups"],
                 ["errors", ids["errors"][0]], ["task", ids["running"]]):  # fmt: skip
        code, out = in_a_terminal(redis_url, *argv, env={"NO_COLOR": "1"}, columns=columns)
        lines = [line.rstrip() for line in ANSI.sub("", out).replace("\r", "").splitlines()]
        text = "\n".join(lines)
        assert code == 0, text
        assert max(map(len, lines)) <= columns, text
        assert "…" not in text, text
        headers = [n for n, line in enumerate(lines) if line.startswith("FIELD ")]
        headers += [n + 1 for n, line in enumerate(lines) if line in TITLES]
        assert headers, text
        for n in headers:  # every header whole: one of the columns' names
            assert set(re.split(r"\s{2,}", lines[n].strip())) <= HEADERS, lines[n]
        shown[" ".join(argv[:2])] = text
    info = shown["info"]
    assert re.search(r"^QUEUE\s.*\sSTATE$", info, re.M) and "WORKER" in info
    for queue in queues:
        assert re.search(rf"^{queue}\s", info, re.M), info
    assert re.search(r"^reports\s.*\spaused$", info, re.M), info
    for name in workers:
        assert re.search(rf"^{re.escape(name)}\s", info, re.M), info
        assert re.search(rf"^{re.escape(name)}\s", shown["workers"], re.M), shown["workers"]
    for task_id in ids["errors"]:
        assert re.search(rf"^{task_id}\s+default\s", shown["errors"], re.M), shown["errors"]
    assert re.search(rf"^id\s+{ids['errors'][0]}$", shown[f"errors {ids['errors'][0]}"], re.M)
    assert re.search(rf"^id\s+{ids['running']}$", shown[f"task {ids['running']}"], re.M)
    assert re.search(r"^\s+4\s+ValueError: ", shown["errors --groups"], re.M)


def test_the_terminal_formats_of_times_and_json() -> None:
    """One duration format everywhere, moments in UTC with their age; JSON as json.dumps
    indents it but with each list of numbers on one line."""
    moment = 1795517081452  # 2026-11-24 10:44:41.452 UTC
    assert terminal.when(moment, now=moment / 1000 + 240) == "2026-11-24 10:44:41 UTC (4m 00s ago)"
    assert terminal.when(moment, now=moment / 1000 - 90.5) == "2026-11-24 10:44:41 UTC (in 1m 30s)"
    assert terminal.when(moment, now=moment / 1000) == "2026-11-24 10:44:41 UTC (0 ms ago)"
    assert terminal.when("soon") == "soon" and terminal.age(None) == "–"
    assert [terminal.age(ms) for ms in (640, 41_500, 201_000, 7_500_000)] == [
        "640 ms", "41.5 s", "3m 21s", "2h 05m"]  # fmt: skip
    data = {"throughput": [[29925360, 0, 1], [29925361, 12, 0]], "floats": [1.5, -2e-05, 3],
            "names": ["a", "b"], "mixed": [1, "x"], "flags": [True, None], "empty": [],
            "text": "[\n1,\n2\n]", "nested": {"deep": [[1], [2, 3]]}}  # fmt: skip
    text = terminal.dumps(data)
    assert json.loads(text) == data
    assert "\n    [29925360, 0, 1],\n    [29925361, 12, 0]\n  ]" in text
    assert '"floats": [1.5, -2e-05, 3]' in text and '"deep": [\n      [1],\n      [2, 3]\n' in text
    assert '"names": [\n    "a",' in text and '"flags": [\n    true,' in text
    assert '"text": "[\\n1,\\n2\\n]"' in text and '"empty": []' in text


def check(redis_url: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ZTQ_REDIS_URL": redis_url}
    return forked_cli.run([ZTQ, "check", *argv], env, timeout=30)


@pytest.mark.slow
def test_check_exits_non_zero_with_a_reason(store: Storage, redis_url: str) -> None:
    assert check(redis_url).returncode == 0 and check(redis_url).stdout.strip() == "ok"
    t.add.delay(1, 1)
    done = check(redis_url)
    assert done.returncode == 1
    assert "queue default: 1 task(s) and no live worker serves it" in done.stderr
    scenario.heartbeat(store, "w1", threads={"default": 1})
    assert check(redis_url).returncode == 0
    head = store.client.lindex(store.keys.ready("default", "normal"), 0)
    raw = store.client.hget(store.keys.tasks("default"), head)
    meta, payload = split_record(raw)
    old = meta | {"enqueued": int((time.time() - 900) * 1000)}
    store.client.hset(store.keys.tasks("default"), head, json.dumps(old) + "\n" + payload)
    done = check(redis_url, "--max-wait", "600", "--json")
    assert done.returncode == 1
    [reason] = json.loads(done.stdout)["problems"]
    # durations as in the tables
    waits = r"queue default: the oldest task waits 15m 0\ds \(more than 10m 00s\)"
    assert re.fullmatch(waits, reason)
    assert check(redis_url, "--max-wait", "0").returncode == 0
    down = check("redis://127.0.0.1:1/0")
    assert down.returncode == 2 and "cannot reach Redis" in down.stderr


@pytest.mark.slow
def test_watch_refreshes_until_interrupted(store: Storage, redis_url: str) -> None:
    t.add.delay(1, 1)
    env = {**os.environ, "ZTQ_REDIS_URL": redis_url, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([ZTQ, "info", "--watch", "0.2"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None
    snapshots: list[str] = []
    lines: list[str] = []
    deadline = time.monotonic() + 20
    while len(snapshots) < 3 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("-- ") and "every 0.2 s" in line:
            assert re.fullmatch(r"-- \d\d:\d\d:\d\d UTC, every 0\.2 s --\n", line)
            snapshots.append("".join(lines))
            lines = []
            if len(snapshots) == 1:
                t.add.delay(2, 2)  # a later snapshot shows it
        else:
            lines.append(line)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(10) == 0 and len(snapshots) == 3
    assert re.search(r"^default\s+0/1/0\s", snapshots[0], re.M)
    assert re.search(r"^default\s+0/2/0\s", snapshots[2], re.M)


@pytest.mark.slow
def test_every_command_of_docs_cli_md_runs(store: Storage, redis_url: str) -> None:
    """Each ``ztq ...`` line of docs/cli.md, run as written on a populated Redis (names
    in capitals filled in); --watch and the prompt for a password are left out. ``ztq
    check`` answers 0 or 1 here; its reasons are tested above. (What each one prints is
    pasted under it and compared by tests/worker/test_cli_transcript.py.)"""
    from tests.worker.cli_transcript import command_blocks

    ids = scenario.populate(store)
    t.send.delay("eve@example.org", "x")
    scenario.work(store, "mail", fail=lambda p: "550 mailbox unavailable")
    mail_error = store.client.zrange(store.keys.errors("mail"), -1, -1)[0]
    lines = [line.split(" #")[0].strip() for block in command_blocks("cli.md")
             for line in block.splitlines() if line.startswith("ztq ")]  # fmt: skip
    assert len(lines) >= 25
    fill = {"TASK_ID [TASK_ID...]": mail_error, "TASK_ID": ids["errors"][0],
            "WORKER [WORKER...]": "app-1.4242", "WORKER": "app-1.4242",
            "TOKEN_ID": "0123456789ab"}  # fmt: skip
    # ztq --system us ...: us names this Redis (docs/systems.md)
    env = {**os.environ, "ZTQ_REDIS_URL": redis_url, "ZTQ_SYSTEMS": f"us {redis_url}"}
    ran = 0
    for line in lines:
        if "--watch" in line or "hash-password" in line or line.startswith("ztq console"):
            continue
        for name, value in fill.items():
            line = line.replace(name, value)
        if "delete mail" in line and "--yes" not in line:
            line += " --yes"  # no terminal to ask on: the doc says so
        done = forked_cli.run([ZTQ, *shlex.split(line)[1:]], env, timeout=30)
        expected = {1} if "revoke" in line else {0}  # no such token
        if line.startswith(("ztq check", "ztq alerts")):
            expected = {0, 1}  # the populated Redis has a queue whose worker is lost
        if line.startswith(("ztq redo mail " + mail_error, "ztq delete mail " + mail_error)):
            expected = {0, 1}  # 1: 'queue purge mail errors' above took it (no task ...)
        if "0000dead" in line or "nosuchqueue" in line:
            expected = {1}  # docs/cli.md, "Exit codes": not found
        if line.startswith("ztq queue forget"):
            expected = {1}  # the queue holds tasks: refused, as the page shows
        if line == "ztq redo mail" or line.startswith("ztq enqueue") and "--queue" not in line:
            expected = {2}  # a usage error; shop.mail.send is not importable here
        assert done.returncode in expected, f"{line}: {done.returncode} {done.stderr}"
        ran += 1
    assert ran >= 22


def test_task_json_gives_the_result_as_json_not_as_a_string(
    store: Storage, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``"result": 15.0``, as the task returned it (it was ``"15.0"``: JSON in a string);
    the console's /api/tasks serves the same dict (``overview.task_dict``)."""
    results = {t.add.delay(7, 8.0).id: 15.0, t.add.delay(1, 1).id: {"sum": [2, "two"]},
               t.add.delay(0, 0).id: 0, t.add.delay(9, 9).id: "x" * 70_000}  # fmt: skip
    for leased in store.leases.fetch("default", "w", "t0", 60_000, limit=10):
        result = json.dumps(results[leased.id])
        store.leases.ack(
            "default", "w", [Finished(leased.id, leased.token, "tests.sample_tasks.add", result)]
        )
    for task_id, result in results.items():
        code, out, _ = run(capsys, redis_url, "task", task_id, "--json")
        data = json.loads(out)
        if isinstance(result, str):  # over the API's cap: the start of its JSON text
            assert "result" not in data
            assert data["result_truncated"] == json.dumps(result)[: len(data["result_truncated"])]
        else:
            assert code == 0 and data["result"] == result, out
    code, out, _ = run(capsys, redis_url, "task", next(iter(results)))
    assert code == 0 and "result: 15.0" in out
    zero = list(results)[2]
    assert "result: 0" in run(capsys, redis_url, "task", zero)[1]  # a falsy result is shown


@pytest.mark.slow
def test_ztq_task_cuts_large_arguments_and_full_prints_them_whole(
    store: Storage, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Arguments over ARGS_SHOWN characters are cut with their whole size (issue 39, point
    8); ``--full`` prints every byte, as JSON; small ones are shown as before."""
    big = "é" * 1_500_000  # 3,000,000 bytes as UTF-8
    task_id = t.send.prepare(("ann@example.org", big)).enqueue().id
    code, out, _ = run(capsys, redis_url, "task", task_id)
    assert code == 0 and len(out) < 20_000, len(out)
    flat = re.sub(r"\s+", " ", out)
    assert f"… 2.9 MB in all (ztq task {task_id} --full prints all)" in flat, flat[-600:]
    code, out, _ = run(capsys, redis_url, "task", task_id, "--full")
    assert code == 0 and len(out) > 1_500_000
    whole = json.loads(out.split("arguments: ", 1)[1].splitlines()[0])
    assert whole["args"] == ["ann@example.org", big] and whole["task"] == t.send.name
    code, out, _ = run(capsys, redis_url, "task", task_id, "--full", "--json")
    assert json.loads(out)["args"] == ["ann@example.org", big]
    small = t.send.prepare(("bob@example.org", "hi")).enqueue().id
    out = run(capsys, redis_url, "task", small)[1]
    assert "bob@example.org" in out and "in all" not in out


def test_queue_forget_removes_an_idle_queue_and_refuses_one_that_holds_or_is_served(
    store: Storage, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``ztq queue forget`` (issue 39, point 2: ``default = abc`` left a queue ``abc`` for
    good): refused in one line (exit 1) while the queue holds a task or a worker serves it;
    then gone from ``ztq info`` with its settings, stats and records, and audited."""
    t.add.prepare((1, 2)).with_options(queue="abc").enqueue()
    code, _, err = run(capsys, redis_url, "queue", "forget", "abc")
    assert (code, err) == (1, "ztq: abc holds 1 ready tasks (normal): not forgotten\n")
    [lease] = store.leases.fetch("abc", "w1", "x", 60_000)
    code, _, err = run(capsys, redis_url, "queue", "forget", "abc")
    assert (code, err) == (1, "ztq: abc holds 1 running tasks: not forgotten\n")
    assert store.leases.ack("abc", "w1", [Finished(lease.id, lease.token, "add", "3")]) == []
    store.queues.pause("abc")  # a setting: forgotten with the queue
    scenario.heartbeat(store, "w1", threads={"abc": 2})
    code, _, err = run(capsys, redis_url, "queue", "forget", "abc")
    assert (code, err) == (
        1,
        "ztq: 2 live worker thread(s) serve abc (see ztq workers): not forgotten\n",
    )
    scenario.heartbeat(store, "w1", status="stopped", threads={"abc": 2})
    scenario.heartbeat(store, "w2", threads={"abc": 1})
    scenario.make_lost(store, "w2")  # a lost worker serves nothing (as every page counts)
    assert "abc" in store.queues.names() and store.client.keys("*{abc}*")
    code, out, _ = run(capsys, redis_url, "queue", "forget", "abc")
    assert (code, out) == (0, "abc forgotten\n")
    assert "abc" not in store.queues.names()
    left = store.client.keys("*{abc}*")  # one request's and one fetch's ids: they expire
    assert all(store.client.pttl(k) > 0 for k in left) and len(left) <= 2, left
    assert "no queue yet" in run(capsys, redis_url, "info")[1]  # the lost w2 still names it
    assert "forget queue" in str(store.client.xrange(store.keys.audit))
    code, _, err = run(capsys, redis_url, "queue", "forget", "abc")
    assert (code, err) == (1, "ztq: no queue abc\n")


def test_info_shows_the_busiest_keys(
    store: Storage, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.key_tasks import Q, send_mail

    for i in range(4):
        send_mail.delay("acme", i)
    for key in ("k1", "k2", "k3", "k4", "k5", "k6"):
        send_mail.delay(key, 0)
    store.key_turns.pause_key(Q, "k6")
    store.leases.fetch(Q, "w", "t", 60_000, 20)  # 2 of acme (its limit), one of each other
    out = run(capsys, redis_url, "info")[1]
    assert re.search(r"^mailer\s+acme\s+2\s+2\s+running limit\s*$", out, re.M)
    assert re.search(r"^mailer\s+k6\s+1\s+0\s+paused\s*$", out, re.M)
    data = json.loads(run(capsys, redis_url, "info", "--json")[1])
    assert data["keys"][Q]["waiting"] == 3 and data["keys"][Q]["running"] == 7
