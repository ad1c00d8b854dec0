"""The benchmark's own virtualenv (``.venv-bench``) and what the report says about the machine.

The peers pin redis-py differently from ztq's dev tools, so they live in a separate venv;
``run.py`` builds it on first use (again when the requirement list changes) and re-executes
itself inside it.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from bench.common import ROOT

VENV = ROOT / ".venv-bench"
PYTHON = VENV / "bin" / "python"
STAMP = VENV / ".bench-installed"
REQUIREMENTS = [
    "rq",
    "huey",
    "dramatiq[redis]",
    "celery[redis]",
    "pyinstrument",
    "py-spy",
    "webtest",
    "-e",
    ".",
]
OPTIONAL = ["arq"]  # installed only if it fits beside the others without moving redis-py
PACKAGES = ("ztq", "redis", "hiredis", "rq", "huey", "dramatiq", "celery", "kombu", "arq")


def inside() -> bool:
    return Path(sys.prefix).resolve() == VENV.resolve()


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(PYTHON), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args]
    return subprocess.run(cmd, cwd=ROOT, text=True, capture_output=True)


def ensure_venv() -> None:
    """Create ``.venv-bench`` and install the peers, ztq (editable) and the profilers."""
    wanted = " ".join(REQUIREMENTS + OPTIONAL)
    if STAMP.exists() and STAMP.read_text() == wanted:
        return
    if not PYTHON.exists():
        print("bench: creating .venv-bench", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    print("bench: installing " + " ".join(REQUIREMENTS), flush=True)
    done = _pip(*REQUIREMENTS)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit("bench: pip install failed")
    redis_version = subprocess.run(
        [str(PYTHON), "-c", "import redis; print(redis.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    pin = VENV / "constraints.txt"
    pin.write_text(f"redis=={redis_version}\n")
    for extra in OPTIONAL:
        if _pip(extra, "-c", str(pin)).returncode != 0:
            print(f"bench: {extra} does not install beside redis {redis_version}; skipped")
    STAMP.write_text(wanted)


def reexec_inside(argv: list[str]) -> None:
    os.execv(str(PYTHON), [str(PYTHON), "-m", "bench.run", *argv])


def versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def git_state() -> str:
    """The last commit that changed ztq's code, and whether the tree differs (read-only git)."""
    try:
        head = subprocess.run(
            ["git", "log", "-1", "--format=%h", "--", "core", "worker", "console"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "core", "worker", "console"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return f"{head or 'unknown'}{' + uncommitted changes' if dirty else ''}"


def machine(redis_version: str) -> dict[str, str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": str(os.cpu_count()),
        "cpu": cpu,
        "python": platform.python_version(),
        "redis": redis_version,
        "os": f"{platform.system()} {platform.release()}",
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }
