"""``ztq console`` / ``python -m ztq.console``: the console served by waitress from the
settings and the environment alone (no app.ini needed); a bad setting is one line, exit 2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.console.conftest import SECRET
from tests.console.test_pserve import free_port

pytestmark = pytest.mark.slow  # the console served by real processes

ZTQ = str(Path(sys.executable).with_name("ztq"))
COMMANDS = {
    "python -m ztq.console": [sys.executable, "-m", "ztq.console"],
    "ztq console": [ZTQ, "console"],  # it runs python -m ztq.console (os.execv)
}


def _env(redis_url: str, user_lines: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZTQ_")}
    return {**env, "ZTQ_REDIS_URL": redis_url, "ZTQ_CONSOLE_SECRET": SECRET,
            "ZTQ_CONSOLE_USERS": user_lines.replace("\n", ";"), **extra}  # fmt: skip


@pytest.mark.parametrize("logging", ["default", "--log-config"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_it_serves_the_console(
    redis_url: str, user_lines: str, tmp_path: Path, command: str, logging: str
) -> None:
    """With ``--log-config``, a user's dictConfig: its handler has the console's lines."""
    port = free_port()
    flags = []
    if logging == "--log-config":
        fmt = {"format": "%(levelname)s|%(name)s|%(message)s"}
        config = {"version": 1, "formatters": {"f": fmt},
                  "handlers": {"file": {"class": "logging.FileHandler", "formatter": "f",
                                        "filename": str(tmp_path / "console.log")}},
                  "root": {"level": "INFO", "handlers": ["file"]}}  # fmt: skip
        (tmp_path / "logging.json").write_text(json.dumps(config))
        flags = ["--log-config", "logging.json"]
    proc = subprocess.Popen([*COMMANDS[command], "--host", "127.0.0.1", "--port", str(port),
                             *flags],
                            env=_env(redis_url, user_lines), cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/login", timeout=2) as r:
                    assert r.status == 200 and b"Sign in" in r.read()
                    break
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
                assert time.monotonic() < deadline, f"{command} did not answer"
                time.sleep(0.2)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert proc.stdout is not None
    log = proc.stdout.read().decode()
    assert "Traceback" not in log
    if logging == "--log-config":
        log = (tmp_path / "console.log").read_text()
        assert f"INFO|waitress|Serving on http://127.0.0.1:{port}" in log.splitlines()
    assert f"http://127.0.0.1:{port}" in log


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_bad_setting_is_one_line_and_exit_2(
    redis_url: str, user_lines: str, tmp_path: Path, command: str
) -> None:
    env = _env(redis_url, user_lines, ZTQ_CONSOLE_PAGE_SIZE="abc")
    done = subprocess.run([*COMMANDS[command], "--port", str(free_port())], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        "ztq console: environment variable ZTQ_CONSOLE_PAGE_SIZE: console.page_size must be a "
        "whole number, not 'abc'\n"
    )


def test_a_bad_setting_of_the_ini_names_its_line(
    redis_url: str, user_lines: str, tmp_path: Path
) -> None:
    ini = tmp_path / "console.ini"
    ini.write_text("[app:main]\nuse = egg:ztq\n\nztq.console.page_size = 9999\n")
    done = subprocess.run(
        [sys.executable, "-m", "ztq.console", "--ini", str(ini), "--port", str(free_port())],
        env=_env(redis_url, user_lines), cwd=tmp_path, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"ztq console: {ini}:4") and "page_size" in done.stderr


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "ztq.console", "--port", "http"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    missing = subprocess.run([sys.executable, "-m", "ztq.console", "--ini", "nowhere.ini"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert missing.returncode == 2
    assert missing.stderr.startswith("ztq console: ") and missing.stderr.count("\n") == 1
    assert "nowhere.ini" in missing.stderr
