"""``make run`` (``python -m ztq.worker.demo``) as a newcomer sees it: a short terminal with
the console URL and login, the worker's and the console's lines in log files, a clean stop."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from ztq.core.engine.connection import make_client
from ztq.core.engine.storage import Storage
from ztq.core.engine.workers import get_worker, send_command
from ztq.worker.demo import RESTART_AFTER
from ztq.worker.demo.screen import mask_url

pytestmark = pytest.mark.slow  # the demo's processes (Redis, worker, console)

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Demo:
    """The demo as a subprocess; its stdout read line by line on a thread."""

    def __init__(self, run_dir: Path, env: dict[str, str], every: float = 1.0) -> None:
        self.port = free_port()
        self.run_dir = run_dir
        args = [sys.executable, "-m", "ztq.worker.demo", "--port", str(self.port),
                "--run-dir", str(run_dir), "--every", str(every)]  # fmt: skip
        self.proc = subprocess.Popen(
            args, env=env, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()

    def wait_for(self, what: Callable[[list[str]], object], timeout: float = 60.0) -> object:
        """Wait until ``what(lines)`` is truthy; fail with the output so far."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not (found := what(list(self.lines))):
                left = deadline - time.monotonic()
                assert left > 0 and self.proc.poll() is None, self.report()
                self._changed.wait(min(left, 0.5))
        return found

    def report(self) -> str:
        """What the demo said so far; its exit code and stderr once it has exited."""
        text = "\n".join(self.lines)
        if self.proc.poll() is not None and self.proc.stderr is not None:
            text += f"\nexit code {self.proc.returncode}\n{self.proc.stderr.read()}"
            for log in sorted(self.run_dir.glob("*.log")):
                tail = log.read_text(errors="replace").splitlines()[-15:]
                text += f"\n--- {log.name}\n" + "\n".join(tail)
        return text

    def summary_pid(self, label: str) -> int:
        """The pid the summary gives on the line that starts with ``label``."""
        for line in self.lines:
            m = re.match(rf"\s+{label}\s.*?pid (\d+)", line)
            if m:
                return int(m.group(1))
        raise AssertionError(f"no {label} pid in\n" + "\n".join(self.lines))

    def finish(self, timeout: float = 30.0) -> tuple[int, str]:
        """Exit code and stderr, once the demo has exited (bounded; killed otherwise)."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        self._reader.join(5)
        assert self.proc.stderr is not None
        return code, self.proc.stderr.read()


def descendants(root: int) -> set[int]:
    """Every process below ``root`` now (from /proc: the demo's children and theirs)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rpartition(")")[2].split()[1])
    found: set[int] = set()
    todo = [root]
    while todo:
        pid = todo.pop()
        for child, parent in parents.items():
            if parent == pid and child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(pids: set[int], timeout: float = 20.0) -> set[int]:
    deadline = time.monotonic() + timeout
    while {p for p in pids if alive(p)} and time.monotonic() < deadline:
        time.sleep(0.1)
    return {p for p in pids if alive(p)}


def done_counts(lines: list[str]) -> list[int]:
    return [int(m.group(1)) for line in lines if (m := re.search(r"\bdone (\d+)", line))]


def test_the_terminal_keeps_the_login_and_the_logs_go_to_files(
    redis_url: str, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    demo = Demo(run_dir, {**os.environ, "ZTQ_REDIS_URL": redis_url})
    try:
        first = demo.wait_for(lambda lines: [x for x in lines if "login" in x] and lines)
        # the summary comes after the worker's start: its age counts from no later than now
        # (from the test's start, a loaded machine's slow spawn made the stop below come
        # before RESTART_AFTER, and the demo rightly took it for a worker that cannot start)
        started = time.monotonic()
        assert isinstance(first, list)
        url = f"http://127.0.0.1:{demo.port}"
        assert any(line.split() == ["console", url] for line in first), first
        m = re.search(r"login\s+admin / (\S+)", "\n".join(first))
        assert m, first
        password = m.group(1)
        with urllib.request.urlopen(url + "/login", timeout=5) as page:  # it answers already
            assert page.status == 200
        # the summary says where everything is, then the counts go up
        demo.wait_for(lambda lines: any(f"{redis_url} (from ZTQ_REDIS_URL)" in x for x in lines))
        demo.wait_for(lambda lines: sum(done_counts(lines)) >= 5, timeout=30)
        assert any(str(run_dir / "worker.log") in line for line in demo.lines)
        pids = descendants(demo.proc.pid)
        assert {demo.summary_pid("worker"), demo.summary_pid("pserve")} <= pids

        # Stop in the console ends the worker's process only: the demo starts it again,
        # the console and Redis keep serving (issue 30)
        storage = Storage(make_client(redis_url), prefix="ztq-demo", url=redis_url)
        old = demo.summary_pid("worker")
        # a worker that exits sooner is taken for one that cannot start (not restarted)
        time.sleep(max(0.0, RESTART_AFTER + 0.5 - (time.monotonic() - started)))
        assert send_command(storage, "demo-worker", "stop", by="test")
        demo.wait_for(lambda lines: any("started again (pid" in x for x in lines), timeout=30)
        assert not alive(old) and demo.proc.poll() is None
        with urllib.request.urlopen(url + "/login", timeout=5) as page:
            assert page.status == 200
        again = demo.wait_for(lambda lines: [x for x in lines if "started again (pid" in x])
        new = int(re.findall(r"pid (\d+)", str(again))[-1])

        def reporting() -> bool:
            w = get_worker(storage, "demo-worker")
            return w is not None and w.status == "running" and w.get("pid") == new

        demo.wait_for(lambda lines: reporting(), timeout=30)
        storage.client.close()
        pids = descendants(demo.proc.pid)

        assert demo.proc.stdin is not None
        demo.proc.stdin.write("\n")  # Enter: the login again
        demo.proc.stdin.flush()
        demo.wait_for(lambda lines: sum(password in x for x in lines) == 2, timeout=10)

        demo.proc.send_signal(signal.SIGINT)
        code, stderr = demo.finish()
    finally:
        if demo.proc.poll() is None:
            demo.proc.kill()
    out = demo.lines
    # the point of it all: tasks ran, yet the terminal stayed short and free of their lines
    said = [x for x in out if not re.match(r"\s+\d\d:\d\d:\d\d\s", x)]  # but the status lines
    assert len(said) < 25, "\n".join(out)
    assert not any("task start" in line or "INFO" in line for line in out), "\n".join(out)
    assert code == 0 and stderr == "", stderr  # nothing else on the terminal, no traceback
    assert sum(password in x for x in out) == 3  # the summary, Enter, the exit
    assert out[-1].strip().startswith("stopped")
    worker_log = (run_dir / "worker.log").read_text()  # the tasks' lines are here instead
    assert "task done id=" in worker_log
    assert "Serving on" in (run_dir / "console.log").read_text()
    assert wait_gone(pids) == set()


def test_embedded_redis_is_stopped_by_pid_on_sigterm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ZTQ_REDIS_URL")
    run_dir = tmp_path / "run"
    demo = Demo(run_dir, dict(os.environ), every=5)
    try:
        demo.wait_for(lambda lines: any("login" in x for x in lines))
        redis_pid = demo.summary_pid("redis")
        assert alive(redis_pid) and (run_dir / "redis.log").exists()
        pids = descendants(demo.proc.pid) | {redis_pid}
        demo.proc.send_signal(signal.SIGTERM)
        code, stderr = demo.finish()
    finally:
        if demo.proc.poll() is None:
            demo.proc.kill()
    assert code == 0 and stderr == "", stderr
    assert sum("login" in x for x in demo.lines) == 2
    assert wait_gone(pids) == set()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG")
def test_a_killed_demo_leaves_no_process_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ZTQ_REDIS_URL")
    demo = Demo(tmp_path / "run", dict(os.environ), every=5)
    try:
        demo.wait_for(lambda lines: any("login" in x for x in lines))
        pids = descendants(demo.proc.pid)
        assert len(pids) >= 3  # Redis, the worker, pserve (and the worker's process slot)
    finally:
        demo.proc.kill()  # no cleanup of its own: Linux signals the children
        demo.proc.wait(10)
    assert wait_gone(pids) == set()


def test_the_redis_password_is_masked() -> None:
    assert mask_url("redis://:s3cret@db:6379/0") == "redis://:***@db:6379/0"
    assert mask_url("rediss://ann:s3cret@db/1") == "rediss://ann:***@db/1"
    assert mask_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def test_the_demo_masks_a_sentinel_password_too() -> None:
    shown = mask_url("redis+sentinel://:pw@h1:26379,h2:26379/main/0?sentinel_password=s3")
    assert "pw" not in shown and "s3" not in shown and shown.count("***") == 2


def test_on_a_users_redis_the_demo_keeps_to_its_own_prefix(redis_url: str, tmp_path: Path) -> None:
    """Issue 24: with ``ZTQ_REDIS_URL`` exported (and ``ZTQ_PREFIX`` too) the demo wrote its
    tasks, errors and worker into the user's own keys. It uses ``ztq-demo`` there, and says
    so; the user's keys under ``ztq`` stay as they were, byte for byte."""
    import redis

    import ztq.core as ztq
    from tests import sample_tasks as t

    t.add.enqueue((1, 2))  # the user's own data, under the prefix ztq
    t.boom.enqueue(("b.bad",), queue="mail")
    client = redis.Redis.from_url(redis_url)
    assert ztq.get_storage().keys.prefix == "ztq"

    def users_keys() -> dict[bytes, bytes | None]:
        return {k: client.dump(k) for k in client.scan_iter(match="ztq:*")}

    before = users_keys()
    assert before
    env = {**os.environ, "ZTQ_REDIS_URL": redis_url, "ZTQ_PREFIX": "ztq"}
    demo = Demo(tmp_path / "run", env)
    try:
        demo.wait_for(lambda lines: sum(done_counts(lines)) >= 3, timeout=40)
        demo.wait_for(lambda lines: any(re.search(r"errors [1-9]", x) for x in lines), timeout=40)
        banner = "\n".join(demo.lines)
        demo.proc.send_signal(signal.SIGINT)
        code, stderr = demo.finish()
    finally:
        if demo.proc.poll() is None:
            demo.proc.kill()
    assert code == 0 and stderr == "", stderr
    assert users_keys() == before  # nothing of the demo among the user's keys
    assert re.search(r"redis\s.*\(from ZTQ_REDIS_URL\).*prefix ztq-demo", banner), banner
    ours = {k.decode() for k in client.scan_iter(match="ztq-demo:*")}
    assert any("mail" in k for k in ours) and any("default" in k for k in ours), ours
    strays = {k.decode() for k in client.scan_iter()} - ours - {k.decode() for k in before}
    assert not strays, strays
    client.close()


def test_the_test_process_holds_none_of_the_demo_tasks() -> None:
    """Importing the demo's run module registers its tasks, a cron entry among them, on the
    default app: every in-process worker of the test run would then fire it into its
    queues (issue 30's demo test did, and other worker tests failed at minute boundaries)."""
    import ztq.core as ztq

    assert not [e for e in ztq.cron_entries() if e.name.startswith("ztq.worker.demo")]
