"""``--log-config FILE`` (docs/worker.md, "Your own logging configuration"): a user's
dictConfig (.json) or fileConfig (.ini) replaces ztq's handler, and its own formatter still
sees the task's fields (``%(task_id)s``, ``%(task)s``, ``%(queue)s``, ``%(attempt)s``), in the
worker's threads and in a process slot's child; a file logging cannot use is one line on
stderr and exit 2, for the worker, the other commands and the console alike."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ztq.core as ztq
from tests import sample_tasks

pytestmark = pytest.mark.slow  # real worker processes, a second or more each

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
FIELDS = "%(levelname)s|%(name)s|%(task_id)s|%(task)s|%(queue)s|%(attempt)s|%(message)s"


def dict_config(out: Path) -> dict:
    """A user's dictConfig as logging's docs write one: its own formatter and file handler,
    nothing of ztq's named (disable_existing_loggers left out: ztq's default is false)."""
    return {
        "version": 1,
        "formatters": {"mine": {"format": FIELDS}},
        "handlers": {
            "file": {"class": "logging.FileHandler", "filename": str(out), "formatter": "mine"}
        },
        "root": {"level": "INFO", "handlers": ["file"]},
    }


INI = """[loggers]
keys = root

[handlers]
keys = file

[formatters]
keys = mine

[logger_root]
level = INFO
handlers = file

[handler_file]
class = FileHandler
args = ({out!r},)
formatter = mine

[formatter_mine]
format = {fields}
"""


def run_worker(
    redis_url: str, config: Path, *flags: str, by: str = "flag"
) -> subprocess.CompletedProcess[str]:
    """``ztq --log-config FILE worker ...`` (or ZTQ_LOG_CONFIG=FILE, ``by="environment"``)."""
    env = {**os.environ, "ZTQ_REDIS_URL": redis_url}
    given = ["--log-config", str(config)]
    if by == "environment":
        env["ZTQ_LOG_CONFIG"], given = str(config), []
    return subprocess.run(
        [str(BIN / "ztq"), *given, "worker", "--import", "tests.sample_tasks", "--burst",
         *flags],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def lines_of(out: Path) -> list[list[str]]:
    return [x for line in out.read_text().splitlines() if len(x := line.split("|", 6)) == 7]


@pytest.mark.parametrize("kind", ["json", "ini"])
def test_a_users_formatter_sees_the_task_fields(redis_url: str, tmp_path: Path, kind: str) -> None:
    out = tmp_path / "ztq.log"
    config = tmp_path / f"logging.{kind}"
    if kind == "json":
        config.write_text(json.dumps(dict_config(out)))
    else:
        config.write_text(INI.format(out=str(out), fields=FIELDS))  # read raw
    h = sample_tasks.chatter.delay("said by the task")
    proc = run_worker(redis_url, config)
    assert proc.returncode == 0, proc.stderr
    assert ztq.ping(h) == "done"
    got = lines_of(out)
    task = "tests.sample_tasks.chatter"
    assert ["WARNING", "tests.child", h.id, task, "default", "1", "said by the task"] in got
    [run] = [x for x in got if x[1] == "ztq.runs" and x[2] == h.id]
    assert run[:6] == ["INFO", "ztq.runs", h.id, task, "default", "1"]
    assert run[6].startswith(f"task done id={h.id} ")
    outside = [x for x in got if x[1] == "ztq.worker.startup" or x[1].startswith("ztq.worker")]
    assert outside and all(x[2:6] == ["", "", "", "0"] for x in outside)  # not in a run


def test_a_process_slot_child_logs_through_the_users_file_from_the_environment(
    redis_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "ztq.log"
    config = tmp_path / "logging.json"
    config.write_text(json.dumps(dict_config(out)))
    h = sample_tasks.chatter.delay("said in the child")
    proc = run_worker(redis_url, config, "--queue", "default:1:process", by="environment")
    assert proc.returncode == 0, proc.stderr
    assert ztq.ping(h) == "done"
    got = lines_of(out)
    said = ["WARNING", "tests.child", h.id, "tests.sample_tasks.chatter", "default", "1",
            "said in the child"]  # fmt: skip
    assert said in got


BAD = {
    "missing.json": None,
    "not-json.json": "{version: 1",
    "a-list.json": "[1, 2]",
    "no-such-class.json": json.dumps(
        {"version": 1, "handlers": {"h": {"class": "no.Such"}}, "root": {"handlers": ["h"]}}
    ),
    "missing.ini": None,
    "no-sections.ini": "[loggers]\nkeys = root\n",
}


@pytest.mark.parametrize("name", sorted(BAD))
@pytest.mark.parametrize("command", [["info"], ["worker", "--burst"], ["console"]])
def test_a_file_logging_cannot_use_is_one_line_and_exit_2(
    tmp_path: Path, name: str, command: list[str]
) -> None:
    config = tmp_path / name
    if BAD[name] is not None:
        config.write_text(BAD[name])
    env = {**os.environ, "ZTQ_REDIS_URL": "redis://127.0.0.1:1/0"}  # never reached
    argv = [str(BIN / "ztq"), *command, "--log-config", str(config)]
    if command == ["info"]:  # before the command, as a global flag
        argv = [str(BIN / "ztq"), "--log-config", str(config), "info"]
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"ztq: --log-config {config}: "), line


def test_the_console_reads_a_log_config_after_its_ini(tmp_path: Path) -> None:
    """`python -m ztq.console --log-config`: a bad file is its own one line too."""
    config = tmp_path / "bad.json"
    config.write_text("{")
    proc = subprocess.run([sys.executable, "-m", "ztq.console", "--log-config", str(config)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"ztq console: --log-config {config}: JSONDecodeError"), line


def test_the_docs_example_runs_as_shown(redis_url: str, tmp_path: Path) -> None:
    """docs/worker.md's logging.json and its command line, with tests.sample_tasks as the
    tasks: the task's own line reads as the page says."""
    page = (ROOT / "docs" / "worker.md").read_text("utf-8")
    section = page.split("### Your own logging configuration", 1)[1]
    example = re.search(r"```json\n(.*?)```", section, re.S)
    command = re.search(r"```sh\n(ztq .*?)\n```", section, re.S)
    assert example is not None and command is not None
    config = tmp_path / "logging.json"
    config.write_text(example[1])
    argv = command[1].replace("myapp.tasks", "tests.sample_tasks").split()
    assert argv[:3] == ["ztq", "--log-config", "logging.json"]
    h = sample_tasks.chatter.delay("said by the task")
    env = {**os.environ, "ZTQ_REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([str(BIN / "ztq"), *argv[1:], "--burst"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    said = (f"WARNING tests.child task=tests.sample_tasks.chatter id={h.id} queue=default "
            "attempt=1 said by the task")  # fmt: skip
    assert said in proc.stderr.splitlines()
    assert re.search(rf"^INFO ztq.runs task=\S+ id={h.id} .* task done ", proc.stderr, re.M)
