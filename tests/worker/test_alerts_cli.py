"""``ztq alerts``: exit codes, ``--json``, ``--loop`` as a process, and the ini block of
docs/alerts.md loaded and run as written."""

from __future__ import annotations

import json
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from tests.alert_receiver import Receiver
from tests.console import scenario
from ztq.core.alerts.alerter import current
from ztq.core.alerts.webhook import message
from ztq.core.engine.storage import Storage
from ztq.worker.cli.commands import main

DOCS = Path(__file__).resolve().parents[2] / "docs" / "alerts.md"


@pytest.fixture
def store(redis_url: str) -> Storage:
    return ztq.get_storage()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["alerts", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_exit_0_when_nothing_fires_1_when_something_does(
    capsys: pytest.CaptureFixture[str], redis_url: str, store: Storage
) -> None:
    rules = ("--rule", "no_worker *", "--rule", "worker_lost", "--redis", redis_url)
    assert run(capsys, *rules) == (0, "ok: nothing fires (2 rules)\n", "")
    t.add.enqueue((1, 2))
    code, out, _ = run(capsys, *rules)
    assert code == 1
    line = r"^FIRING   no_worker \*  \[default\]  queue default: 1 task waits and no live "
    assert re.match(line + r"worker serves it \(since \d{4}-\d\d-\d\d [\d:]+ UTC\)\n$", out)
    code, out, _ = run(capsys, *rules, "--json")
    report = json.loads(out)
    assert code == 1 and report["ok"] is False and report["pending"] == []
    assert [(a["rule"], a["subject"], a["value"]) for a in report["firing"]] == [
        ("no_worker *", "default", 1)
    ]
    scenario.work(store, "default")
    code, out, _ = run(capsys, *rules, "--json")
    assert code == 0 and json.loads(out)["firing"] == [] and current(store) == []


@pytest.mark.slow
def test_exit_2_on_bad_settings_or_no_redis(
    capsys: pytest.CaptureFixture[str], redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = run(capsys, "--redis", redis_url)
    assert code == 2 and "no alert rules: give --rule" in err
    code, _, err = run(capsys, "--redis", redis_url, "--rule", "no_worker * > 1")
    assert code == 2
    assert err == ("ztq: flag alerts.rules: alerts.rules rule 1 ('no_worker * > 1'): unexpected "
                   "'> 1': write 'no_worker QUEUE [for 1m]'\n")  # fmt: skip
    code, _, err = run(capsys, "--redis", "redis://127.0.0.1:1/0", "--rule", "worker_lost")
    assert code == 2 and "cannot reach Redis at redis://127.0.0.1:1/0" in err
    monkeypatch.setenv("ZTQ_ALERTS_RULES", "worker_lost")
    assert run(capsys, "--redis", redis_url)[0] == 0


@pytest.mark.slow
def test_loop_prints_changes_until_sigterm(redis_url: str, store: Storage) -> None:
    argv = [str(Path(sys.executable).with_name("ztq")), "alerts", "--loop", "--every", "0.1",
            "--rule", "no_worker *", "--redis", redis_url]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
    try:
        t.add.enqueue((1, 2))
        assert lines.get(timeout=20).startswith("FIRING   no_worker *  [default]")
        scenario.work(store, "default")
        assert lines.get(timeout=20) == "RESOLVED no_worker *  [default]\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_the_ini_of_docs_alerts_md_loads_and_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], redis_url: str, store: Storage,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    text = DOCS.read_text("utf-8")
    [ini] = re.findall(r"^```ini\n(.*?)^```", text, re.S | re.M)
    path = tmp_path / "app.ini"
    path.write_text(ini, encoding="utf-8")
    with Receiver() as hook:
        # the file's Redis and webhook are examples: the environment wins over the file
        monkeypatch.setenv("ZTQ_REDIS_URL", redis_url)
        monkeypatch.setenv("ZTQ_ALERTS_WEBHOOK", hook.url)
        from ztq.worker.cli.alerts import load

        cfg = load(main.__globals__["build_parser"]().parse_args(["alerts", "-c", str(path)]))
        assert [r.kind for r in cfg.rules] == ["error_rate", "error_rate", "oldest_wait",
                                               "no_worker", "worker_lost"]  # fmt: skip
        assert (cfg.every, cfg.repeat_minutes, cfg.webhook) == (30.0, 60.0, hook.url)

        for n in range(11):  # 11 failed runs of mail: both error_rate rules fire
            t.send.enqueue((f"user{n}@example.org",))
        scenario.work(store, "mail", fail=lambda p: "550 mailbox unavailable")
        scenario.heartbeat(store, "box-1")
        scenario.make_lost(store, "box-1")
        code, out, _ = run(capsys, "-c", str(path))
        assert code == 1
        got = sorted((b["rule"], b["subject"]) for b in [hook.next() for _ in range(3)])
        assert got == [("error_rate * > 20% in 15m", "mail"),
                       ("error_rate mail > 10 in 5m", "mail"),
                       ("worker_lost", "box-1")]  # fmt: skip
        assert run(capsys, "-c", str(path))[0] == 1 and hook.drain() == []  # sent once


def test_the_json_example_of_docs_alerts_md_has_the_fields_sent() -> None:
    [shown] = [json.loads(b) for b in re.findall(r"^```json\n(.*?)^```", DOCS.read_text("utf-8"),
                                                   re.S | re.M)]  # fmt: skip
    state = {"rule": shown["rule"], "subject": shown["subject"], "since": shown["since_ms"],
             "value": 14, "threshold": 10,
             "text": "queue mail: 14 failed runs in the last 5 min (more than 10)"}  # fmt: skip
    assert message("firing", state) == shown
