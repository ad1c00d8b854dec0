"""``pserve app.ini`` serves the console (the paste entry point, the ini, the environment)."""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.console.conftest import PASSWORD, SECRET

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_pserve_app_ini(redis_url: str, user_lines: str, tmp_path: Path) -> None:
    port = free_port()
    ini = (REPO / "app.ini").read_text().replace("127.0.0.1:6543", f"127.0.0.1:{port}")
    (tmp_path / "app.ini").write_text(ini)
    env = {
        **os.environ,
        "ZTQ_REDIS_URL": redis_url,
        "ZTQ_CONSOLE_SECRET": SECRET,
        "ZTQ_CONSOLE_USERS": user_lines.replace("\n", ";"),
    }
    pserve = Path(sys.executable).with_name("pserve")
    proc = subprocess.Popen([str(pserve), str(tmp_path / "app.ini")], env=env, cwd=tmp_path,
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
                assert time.monotonic() < deadline, "pserve did not answer"
                time.sleep(0.2)
        request = urllib.request.Request(f"http://127.0.0.1:{port}/api/queues")
        token = base64.b64encode(f"vic:{PASSWORD}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(request, timeout=5) as r:
            assert r.status == 200 and r.headers["Content-Type"].startswith("application/json")
    finally:
        proc.terminate()
        proc.wait(10)


def test_pserve_refuses_to_start_without_a_secret(redis_url: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZTQ_CONSOLE_")}
    pserve = Path(sys.executable).with_name("pserve")
    done = subprocess.run([str(pserve), str(REPO / "app.ini")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    assert done.returncode != 0
    assert "no secret" in done.stderr + done.stdout
