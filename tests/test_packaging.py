"""What a pip user gets: the sdist and the wheel built as a release would build them (the
wheel from the unpacked sdist, as ``python -m build`` does), without a setuptools warning,
with the metadata PyPI shows, and a wheel that works on its own in a fresh venv: a worker
runs a task (``ztq worker --burst``) and the console serves its pages from the
``app.ini`` that ``ztq console --print-config`` prints.

No registry at test time: the builds run without isolation on this venv's setuptools (the
``test`` extra pins one the build-system accepts), and the fresh venv gets the wheel with
``--no-deps`` and reaches its dependencies through a ``.pth`` line naming this venv's
site-packages (a plain path: this venv's editable ``ztq`` finder is not loaded there).
"""

from __future__ import annotations

import email.parser
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest
import tomllib

from tests.console.conftest import SECRET
from tests.worker.cli_transcript import command_blocks
from tests.worker.test_health import free_port, get
from ztq.core.auth.passwords import hash_password

REPO = Path(__file__).resolve().parents[1]
# what the sdist is built from: the files a checkout has that packaging reads
SOURCES = (
    "pyproject.toml",
    "setup.py",
    "README.md",
    "LICENSE",
    "core",
    "worker",
    "console",
    "templates",
    "static",
)
# *.mo: compiled by the build (setup.py), as from a fresh clone, which has none
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "*.mo")

pytestmark = pytest.mark.slow


def build(backend_call: str, cwd: Path, out: Path) -> tuple[str, str]:
    """Run ``setuptools.build_meta.<backend_call>(out)`` in ``cwd``: (file name, output)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    code = f"from setuptools import build_meta as b; print(b.{backend_call}({str(out)!r}))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return done.stdout.strip().splitlines()[-1], output


def no_warnings(output: str) -> None:
    """setuptools' warnings: ``SetuptoolsDeprecationWarning``, ``... would be ignored``,
    each in a ``!!`` box."""
    found = [
        line
        for line in output.splitlines()
        if "Warning" in line or "would be ignored" in line or line.strip() == "!!"
    ]
    assert not found, "\n".join(found)


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(sdist, wheel), the wheel built from the unpacked sdist."""
    root = tmp_path_factory.mktemp("build")
    src, out = root / "src", root / "dist"
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=IGNORE)
        else:
            src.mkdir(exist_ok=True)
            shutil.copy(path, src / name)
    sdist_name, output = build("build_sdist", src, out)
    no_warnings(output)
    with tarfile.open(out / sdist_name) as tar:
        tar.extractall(root / "unpacked", filter="data")
    [unpacked] = (root / "unpacked").iterdir()
    wheel_name, output = build("build_wheel", unpacked, out)
    no_warnings(output)
    return out / sdist_name, out / wheel_name


def test_the_build_needs_a_setuptools_that_reads_its_metadata() -> None:
    """``license = "MIT"`` (an SPDX expression) and ``license-files`` need setuptools 77."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    [setuptools] = [r for r in project["build-system"]["requires"] if r.startswith("setuptools")]
    floor = tuple(int(n) for n in re.findall(r">=\s*([\d.]+)", setuptools)[0].split("."))
    assert floor >= (77,), setuptools
    assert project["project"]["license"] == "MIT"


def test_the_wheel_and_sdist_carry_what_pypi_shows(dists: tuple[Path, Path]) -> None:
    sdist, wheel = dists
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        [meta_name] = [n for n in names if n.endswith(".dist-info/METADATA")]
        meta = email.parser.Parser().parsestr(whl.read(meta_name).decode())
    assert meta["License-Expression"] == "MIT" and meta["Author"]
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "Programming Language :: Python :: 3.13" in meta.get_all("Classifier")
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert {"Homepage", "Documentation", "Source", "Issues"} <= set(urls)
    # the files that are not Python: the Lua scripts, the console's pages, assets and app.ini
    lua = {p.name for p in (REPO / "core/engine/scripts").glob("*.lua")}
    assert {n.rsplit("/", 1)[1] for n in names if n.startswith("ztq/core/engine/scripts/")} == lua
    assert "ztq/console/app.ini" in names
    # the console's catalogs: each .po with the .mo the build compiled from it
    pos = {str(p.relative_to(REPO / "console")) for p in (REPO / "console/locale").rglob("*.po")}
    assert pos and {f"ztq/console/{p}" for p in pos} <= names
    assert {f"ztq/console/{p[:-3]}.mo" for p in pos} <= names
    assert {p.name for p in (REPO / "templates").iterdir() if p.is_file()} <= {
        n.rsplit("/", 1)[1] for n in names if n.startswith("ztq/templates/")
    }
    # the extras users install (`test` and `lint` are the repository's own, docs/packaging.md)
    assert {"embedded", "run", "testing", "otel"} <= set(meta.get_all("Provides-Extra"))
    with tarfile.open(sdist) as tar:
        assert any(n.endswith("/LICENSE") for n in tar.getnames())


TASKS = """
from pathlib import Path
from ztq.core import task

@task(queue="default")
def touch(path: str) -> None:
    Path(path).write_text("ran")
"""


def test_the_wheel_runs_a_worker_and_the_console_in_a_fresh_venv(
    dists: tuple[Path, Path], redis_url: str, tmp_path: Path
) -> None:
    _, wheel = dists
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        check=True,
        timeout=300,
    )
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    # the dependencies from this venv, as a plain path (its .pth files, the editable ztq
    # finder among them, are not run there)
    Path(purelib, "_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    code = "import ztq.core, ztq.console; print(ztq.core.__file__, ztq.console.__file__)"
    where = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert where.count(purelib) == 2, where  # the wheel's, not the checkout's

    (tmp_path / "pkg_tasks.py").write_text(TASKS)
    env = {
        **os.environ,
        "ZTQ_REDIS_URL": redis_url,
        "PYTHONPATH": str(tmp_path),
        "ZTQ_PREFIX": "wheel",
    }
    env.pop("ZTQ_MODULES", None)
    marker = tmp_path / "ran.txt"
    subprocess.run(
        [str(python), "-c", f"import pkg_tasks; pkg_tasks.touch.delay({str(marker)!r})"],
        env=env,
        check=True,
        timeout=60,
    )
    done = subprocess.run(
        [
            str(venv / "bin" / "ztq"),
            "worker",
            "--burst",
            "--queue",
            "default",
            "--import",
            "pkg_tasks",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "ran"

    # the commands of docs/packaging.md and the README, as written there
    readme = (REPO / "README.md").read_text()
    for line in ("ztq console --print-config > app.ini", "ztq console --ini app.ini"):
        assert line in command_blocks("packaging.md")[0] and line in readme, line
    printed = subprocess.run(
        [str(venv / "bin" / "ztq"), "console", "--print-config"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert printed == (REPO / "console" / "app.ini").read_text()
    port = free_port()
    ini = tmp_path / "app.ini"
    ini.write_text(printed.replace("127.0.0.1:6543", f"127.0.0.1:{port}"))
    env.update(
        ZTQ_CONSOLE_SECRET=SECRET, ZTQ_CONSOLE_USERS=f"ann operator {hash_password('pw', n=1024)}"
    )
    proc = subprocess.Popen(
        [str(venv / "bin" / "ztq"), "console", "--ini", "app.ini"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                status, body = get(base + "/healthz")
                break
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None, proc.stderr.read().decode()  # type: ignore[union-attr]
                assert time.monotonic() < deadline, "the console did not answer"
                time.sleep(0.2)
        assert (status, json.loads(body)) == (200, {"ok": True})
        status, page = get(base + "/login")  # a template of the wheel
        assert status == 200 and "<form" in page
        [asset] = re.findall(r'href="(/[^"]+\.css)', page)[:1]  # an asset of the wheel
        assert get(base + asset)[0] == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
