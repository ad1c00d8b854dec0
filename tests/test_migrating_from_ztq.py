"""docs/migrating-from-ztq.md runs as written: each step's files are written out, a real
``ztq worker`` process serves them (ZTQ's own worker.ini in step 2), the sending script runs
in a process of its own, and the worker prints what the page says it prints.

The page shows the usual Redis address (``localhost``, port 6379); the files are written
with the port of the test's private redis-server instead, and nothing else is changed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.worker.conftest import stop_process, wait_for
from ztq.core import get_storage
from ztq.core.engine.workers import get_worker
from ztq.worker.embedded import RedisProcess

pytestmark = pytest.mark.slow  # real worker and sender processes

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "migrating-from-ztq.md"
FENCE = re.compile(r"^```([a-z0-9]*)\n(.*?)^```", re.S | re.M)


def sections() -> dict[str, list[tuple[str, str]]]:
    """The fenced blocks (language, text) under each ``## `` heading of the page."""
    out: dict[str, list[tuple[str, str]]] = {}
    for part in re.split(r"^## ", DOC.read_text("utf-8"), flags=re.M)[1:]:
        title = part.split("\n", 1)[0]
        out[title] = FENCE.findall(part)
    return out


def step(n: int) -> list[tuple[str, str]]:
    [blocks] = [b for title, b in sections().items() if title.startswith(f"Step {n}:")]
    return blocks


def files(blocks: list[tuple[str, str]], port: int) -> dict[str, str]:
    """The page's Python and ini blocks by the file each names on its first line, with the
    private Redis's port for 6379."""
    out = {}
    for lang, text in blocks:
        if lang in ("python", "ini"):
            first, _, _ = text.partition("\n")
            assert first.startswith("# ") and "." in first, f"a {lang} block names no file"
            assert text.count("6379") <= 1
            out[first[2:].strip()] = text.replace("6379", str(port))
    return out


def test_every_block_is_run_or_is_zqs_old_code() -> None:
    """Python and ini blocks are files the tests below run; python2 blocks are ZTQ's code
    (Python 2: not run); text blocks are what the worker prints (checked below)."""
    langs = [lang for blocks in sections().values() for lang, _ in blocks]
    assert set(langs) == {"python2", "python", "ini", "text"}
    run = [(title, lang) for title, blocks in sections().items() for lang, _ in blocks
           if lang in ("python", "ini")]  # fmt: skip
    assert [t.split(":")[0] for t, _ in run] == ["Step 1", "Step 2", "Step 3", "Step 4", "Step 4",
                                                 "Step 4"]  # fmt: skip


def printed_lines() -> list[str]:
    [(_, text)] = [b for b in step(3) if b[0] == "text"]
    return text.strip().splitlines()


@pytest.fixture
def project(tmp_path: Path, redis_url: str) -> Iterator[Path]:
    (tmp_path / "ztq_demo").mkdir()
    (tmp_path / "ztq_demo" / "__init__.py").write_text("")
    yield tmp_path


def came_out(text: str, line: str) -> bool:
    """``line`` was printed: whole on a line of its own, or woven with another thread's
    print() (whose pieces, "START:" then " " then the body, are separate writes)."""
    if line in text.splitlines():
        return True
    woven = iter(text)
    return all(ch in woven for ch in line)  # a subsequence of the output, in order


def run(
    project: Path, written: dict[str, str], server: RedisProcess, expected: list[str]
) -> tuple[str, str, str]:
    """Start a worker on ``worker.ini``, run ``my_send.py``; the worker's output once it
    printed every line the page shows, its log, and the script's output."""
    for name, text in written.items():
        (project / name).write_text(text, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZTQ_")}
    env["PYTHONUNBUFFERED"] = "1"  # the tasks' print() lines reach the file as they come
    out, err = project / "worker.out", project / "worker.err"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        worker = subprocess.Popen([sys.executable, "-m", "ztq.worker", "-c", "worker.ini"],
                                  cwd=project, stdout=stdout, stderr=stderr, env=env)  # fmt: skip
    storage = get_storage()
    assert storage.url == server.url
    try:

        def started() -> bool:
            assert worker.poll() is None, err.read_text()
            return get_worker(storage, "w01") is not None

        wait_for(started, timeout=30)
        sent = subprocess.run([sys.executable, "my_send.py"], cwd=project, env=env,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert sent.returncode == 0, sent.stderr

        def printed() -> bool:
            assert worker.poll() is None, err.read_text()
            text = out.read_text()
            return all(came_out(text, line) for line in expected)

        wait_for(printed, timeout=30)
        beat = get_worker(storage, "w01")
        assert beat is not None and beat.get("config_editable") is False  # active_config
        assert beat.get("threads") == {"default": 1, "mail": 2, "index": 1}
    finally:
        stop_process(worker)
    assert worker.returncode == 0, err.read_text()
    return out.read_text(), err.read_text(), sent.stdout


def test_steps_1_to_3_ztqs_code_and_worker_ini_on_ztq(
    project: Path, redis_server: RedisProcess
) -> None:
    written = {**files(step(1), redis_server.port), **files(step(2), redis_server.port),
               **files(step(3), redis_server.port)}  # fmt: skip
    assert sorted(written) == ["my_send.py", "worker.ini", "ztq_demo/tasks.py"]
    assert "host = localhost" in written["worker.ini"]  # ZTQ's file, as ZTQ wrote it
    printed, log, said = run(project, written, redis_server, printed_lines())
    assert came_out(printed, "START: succeed!")
    assert came_out(printed, "FAILED CALLBACK: Exception Exception: connection error...")
    assert "[log] is ZTQ's logging section and is not read" in log
    assert said.splitlines() == ["none", "none"]  # ping_task before the commit; never sent


def test_step_4_the_same_application_on_ztqs_api(project: Path, redis_server: RedisProcess) -> None:
    written = files(step(4), redis_server.port)
    assert sorted(written) == ["my_send.py", "worker.ini", "ztq_demo/tasks.py"]
    expected = [line.replace("Exception Exception:", "Exception") for line in printed_lines()]
    printed, _, said = run(project, written, redis_server, expected)
    assert came_out(printed, "FAILED CALLBACK: Exception connection error...")
    assert "Exception Exception:" not in printed
    assert said.strip() in ("queued", "running", "done")
