"""tests/forked_cli.py runs a ``ztq`` command as the script would: the same output on stdout
and stderr, the same exit status, for a success, a usage error and a Redis that is down."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests import forked_cli

pytestmark = pytest.mark.slow  # the forked CLI against the script itself: processes


@pytest.mark.parametrize(
    "argv", [["--help"], ["info", "--no-such-flag"], ["info"], ["--version"]]
)  # fmt: skip
def test_a_forked_command_prints_and_exits_as_the_script_does(argv: list[str]) -> None:
    env = {**os.environ, "ZTQ_REDIS_URL": "redis://127.0.0.1:1/0", "COLUMNS": "100"}
    argv = [str(forked_cli.SCRIPT), *argv]
    real = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    forked = forked_cli.run(argv, env, timeout=60)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        real.returncode, real.stdout, real.stderr
    )  # fmt: skip
    merged = forked_cli.run(argv, env, merge_stderr=True, timeout=60)
    assert (merged.returncode, merged.stdout) == (real.returncode, real.stdout + real.stderr)
