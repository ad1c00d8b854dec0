"""The fixtures load by themselves: pytest, run as a user runs it on a project of one test
file with no conftest, finds ``ztq_worker`` through ztq's ``pytest11`` entry point; the old
``pytest_plugins`` lines keep working beside it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TEST = """
import ztq.core as ztq

@ztq.task(queue="mail")
def greet(name):
    return f"hello {name}"

def test_drained(ztq_worker):
    handle = greet.delay("ada")
    assert ztq_worker.drain() == 1
    assert handle.get(timeout=5) == "hello ada"
"""


def run_pytest(project: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "ZTQ_"))}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_user.py"],
        cwd=project, env=env, capture_output=True, text=True, timeout=110, check=False,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(
    "conftest",
    [None, "ztq.worker.testing.pytest_plugin", "ztq.worker.pytest_plugin"],
)
def test_a_project_without_configuration_gets_the_fixtures(
    tmp_path: Path, conftest: str | None
) -> None:
    (tmp_path / "test_user.py").write_text(TEST, encoding="utf-8")
    if conftest is not None:
        (tmp_path / "conftest.py").write_text(f"pytest_plugins = [{conftest!r}]\n", "utf-8")
    done = run_pytest(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
