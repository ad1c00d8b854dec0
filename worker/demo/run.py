"""``make run``: Redis (embedded unless ``ZTQ_REDIS_URL``), a worker, the console, demo tasks.

On a Redis it did not start (``ZTQ_REDIS_URL``) the demo keeps to its own key prefix,
``ztq-demo``, whatever ``ZTQ_PREFIX`` says: its tasks, errors, worker and cron entry never
mix with the user's own queues, and its console shows only them. The summary says so.

The terminal keeps the demo's own summary (console URL, login, Redis, what runs, where the
logs are) and one status line; the worker, the console and an embedded Redis log to files
in ``.run/`` (``--run-dir``). Enter prints the login again; Ctrl-C or SIGTERM prints it once
more, then stops everything this process started, by PID (so does a closed terminal: SIGHUP).
Stop on the demo worker's console page ends only the worker's process: the demo says so and
starts it again (the console and Redis keep serving).
"""

from __future__ import annotations

import argparse
import configparser
import contextlib
import os
import random
import secrets
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO

import ztq.core as ztq
from ztq.core.auth.passwords import hash_password
from ztq.core.errors import ConfigError, ZtqError
from ztq.worker.demo import RESTART_AFTER
from ztq.worker.demo import tasks as demo
from ztq.worker.demo.screen import Screen, Tally, mask_url
from ztq.worker.embedded import RedisProcess, parent_death_signal

ROOT = Path(__file__).resolve().parents[2]  # worker/demo/run.py -> the repo root
WORKER = "demo-worker"
QUEUES = ("default:2", "mail:1", "pdf:1:process")  # --queue flags of the demo's worker
USER = "admin"
EMBEDDED_PREFIX = "ztq"  # its own redis-server: ztq's default, as `ztq info` reads it
DEMO_PREFIX = "ztq-demo"  # a Redis it did not start: apart from the user's keys


def produce_some() -> None:
    """A handful of demo tasks: most succeed, some fail, retry or report progress."""
    n = random.randint(0, 10_000)
    demo.resize_image.delay(f"photo-{n}.jpg", random.choice([320, 640, 1280]))
    to = random.choice(["ann@example.org", "bob@example.org", "invalid@example.org"])
    demo.send_mail.delay(to, f"Your order {n}")
    if random.random() < 0.3:
        demo.convert_pdf.enqueue((f"report-{n}", random.randint(3, 8)))
    site = random.choice(["https://example.org/a", "https://example.org/broken"])
    demo.crawl.enqueue((f"{site}?{n}",), delay=random.choice([0, 0, 5, 30]))
    if random.random() < 0.1:
        demo.resize_image.enqueue((f"urgent-{n}.jpg", 64), priority="high")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m ztq.worker.demo.run",
        description="make run: Redis, a worker, the console and demo tasks; logs in .run/",
    )
    p.add_argument("--port", type=int, default=6543, help="the console's port (6543)")
    p.add_argument("--run-dir", type=Path, default=ROOT / ".run",
                   help="where the logs go (.run/ in the repository)")  # fmt: skip
    p.add_argument("--every", type=float, default=None,
                   help="seconds between status lines (2 on a terminal, else 10)")  # fmt: skip
    return p


def _shown(path: Path) -> str:
    """``path`` relative to the current directory when it lies below it."""
    with contextlib.suppress(ValueError):
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    return str(path)


def _queues_text() -> str:
    out = []
    for flag in QUEUES:
        name, threads, *pool = flag.split(":")
        out.append(f"{name} ({threads} thread{'s' if threads != '1' else ''}"
                   f"{', process slot' if pool else ''})")  # fmt: skip
    return ", ".join(out)


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as waitress binds
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _interrupt_once() -> Callable[[int, object], None]:
    """A handler for SIGINT, SIGTERM and SIGHUP: the first signal stops the demo as Ctrl-C
    does, later ones are ignored (a second Ctrl-C, or the SIGHUP of a closing terminal, must
    not cut the cleanup short)."""
    fired = False

    def handler(signum: int, frame: object) -> None:
        nonlocal fired
        if not fired:
            fired = True
            raise KeyboardInterrupt

    return handler


class Demo:
    """The processes of one ``make run`` and what its terminal shows."""

    def __init__(self, args: argparse.Namespace, screen: Screen) -> None:
        self.port: int = args.port
        self.run_dir: Path = args.run_dir
        self.every: float = args.every or (2.0 if screen.tty else 10.0)
        self.screen = screen
        self.console_url = f"http://127.0.0.1:{self.port}"
        self.password = secrets.token_urlsafe(9)
        self.redis_proc: RedisProcess | None = None
        self.redis_text = ""
        self.prefix = EMBEDDED_PREFIX
        self.storage: ztq.Storage | None = None
        self.tally = Tally(self.every)
        self.children: dict[str, subprocess.Popen[bytes]] = {}  # worker, console
        self.logs: dict[str, Path] = {}
        self._files: list[IO[bytes]] = []
        self.worker_args: list[str] = []
        self.env: dict[str, str] = {}
        self.worker_started = 0.0
        self.restarts = 0  # times the worker was started again after a Stop

    # -- processes ---------------------------------------------------------------------------
    def start(self) -> None:
        if not _port_free(self.port):
            raise ConfigError(
                f"port {self.port} is in use (another make run?); "
                f"choose another: python -m ztq.worker.demo.run --port {self.port + 1}"
            )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        url = os.environ.get("ZTQ_REDIS_URL")
        self.screen.block("", "  ztq demo: starting Redis, a worker and the console ...")
        if url:
            self.prefix = DEMO_PREFIX
            self.redis_text = (f"{mask_url(url)} (from ZTQ_REDIS_URL), prefix {DEMO_PREFIX}: "
                               "the demo's keys only, yours are left alone")  # fmt: skip
        else:
            (self.run_dir / "redis.log").unlink(missing_ok=True)  # redis-server appends
            self.redis_proc = RedisProcess(
                directory=str(self.run_dir), die_with_parent=True
            ).start()
            url = self.redis_proc.url
            self.logs["redis"] = self.run_dir / "redis.log"
            self.redis_text = (f"embedded redis-server on port {self.redis_proc.port} "
                               f"(pid {self.redis_proc.pid}), stopped at exit")  # fmt: skip
        self.storage = ztq.connect(url, prefix=self.prefix)  # the demo tasks go there too
        self.tally.look(self.storage)  # the baseline of the done / failed counts
        env = {
            **os.environ,
            "ZTQ_REDIS_URL": url,  # in the environment, not on a command line that ps shows
            "ZTQ_PREFIX": self.prefix,  # the worker's and the console's, over an exported one
            "ZTQ_CONSOLE_SECRET": secrets.token_hex(32),
            "ZTQ_CONSOLE_USERS": f"{USER} operator {hash_password(self.password)}",
        }
        # a grace shorter than the 15 s stop() waits: the worker ends its runs itself
        worker_args = [sys.executable, "-m", "ztq.worker", "--name", WORKER,
                       "--import", "ztq.worker.demo.tasks", "--grace", "10"]  # fmt: skip
        for flag in QUEUES:
            worker_args += ["--queue", flag]
        self.worker_args, self.env = worker_args, env
        self._spawn("worker", worker_args, env)
        self._spawn("console", [str(Path(sys.executable).parent / "pserve"), str(self._ini())], env)
        self._wait_for_console()

    def _ini(self) -> Path:
        """app.ini with the demo's port, in the run directory."""
        ini = configparser.RawConfigParser()
        ini.optionxform = str  # type: ignore[assignment,method-assign]
        ini.read(ROOT / "app.ini")
        ini.set("server:main", "listen", f"127.0.0.1:{self.port}")
        path = self.run_dir / "console.ini"
        with path.open("w") as f:
            f.write("# written by python -m ztq.worker.demo from app.ini; rewritten each run\n")
            ini.write(f)
        return path

    def _spawn(self, role: str, args: list[str], env: dict[str, str], append: bool = False) -> None:
        log = self.run_dir / f"{role}.log"
        out = log.open("ab" if append else "wb")  # this run's lines only
        self._files.append(out)
        self.logs[role] = log
        # own sessions: Ctrl-C reaches only this process, which stops the children in order
        # (and should it be killed, Linux sends them SIGTERM); no stdin: an Enter typed in
        # the terminal is for the demo
        self.children[role] = subprocess.Popen(
            args, env=env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=parent_death_signal(),
        )  # fmt: skip
        if role == "worker":
            self.worker_started = time.monotonic()

    def _wait_for_console(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self._check_children()
            try:
                with urllib.request.urlopen(self.console_url + "/login", timeout=2):
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    raise ConfigError(
                        f"the console did not answer in {timeout:.0f}s; "
                        f"see {_shown(self.logs['console'])}"
                    ) from None
                time.sleep(0.2)

    def _check_children(self) -> None:
        """:class:`ConfigError` naming the first process that exited, and its log; a worker
        that exited after running a while (Stop in the console) is started again."""
        for role, child in self.children.items():
            if child.poll() is not None and role == "worker" and self._restart_worker():
                continue
            if child.poll() is not None:
                raise ConfigError(
                    f"the {role} exited (code {child.returncode}); see {_shown(self.logs[role])}"
                )
        redis_proc = self.redis_proc.proc if self.redis_proc is not None else None
        if redis_proc is not None and redis_proc.poll() is not None:
            raise ConfigError(f"redis-server exited; see {_shown(self.logs['redis'])}")

    def _restart_worker(self) -> bool:
        """Start the worker again once it exited (the console's Stop ends its process, which
        no supervisor starts again here), unless it ran less than :data:`RESTART_AFTER`
        seconds: a worker that cannot start is an error, not a loop."""
        child = self.children["worker"]
        if time.monotonic() - self.worker_started < RESTART_AFTER:
            return False
        self.restarts += 1
        self.screen.block(
            f"  worker    {WORKER} (pid {child.pid}) exited (code {child.returncode}): "
            "Stop in the console ends a worker's process; the demo starts it again"
        )
        self._spawn("worker", self.worker_args, self.env, append=True)
        self.screen.block(f"  worker    {WORKER} started again (pid {self.children['worker'].pid})")
        return True

    def stop(self) -> None:
        running = [f"the {role} (pid {c.pid})" for role, c in self.children.items()]
        if self.redis_proc is not None and self.redis_proc.pid is not None:
            running.append(f"Redis (pid {self.redis_proc.pid})")
        if running:
            self.screen.block("", f"  stopping {', '.join(running)} ...")
        for child in self.children.values():
            if child.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGTERM)
        for child in self.children.values():
            try:
                child.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGKILL)
                child.wait(5)
        if self.redis_proc is not None:
            self.redis_proc.cleanup()  # by PID; the run directory and its redis.log stay
        for f in self._files:
            f.close()
        if self.logs:
            self.screen.block(f"  stopped; the logs stay in {_shown(self.run_dir)}/")

    # -- the terminal ------------------------------------------------------------------------
    def login_line(self) -> str:
        return f"  login     {USER} / {self.password}"

    def summary(self) -> None:
        logs = "  ".join(_shown(p) for p in self.logs.values())
        self.screen.block(
            "",
            f"  console   {self.console_url}",
            self.login_line() + "   (Enter prints it again)",
            f"  redis     {self.redis_text}",
            f"  worker    {WORKER} (pid {self.children['worker'].pid}): {_queues_text()}",
            f"  pserve    pid {self.children['console'].pid}",
            f"  logs      {logs}",
            "  tasks     a few every second (resize_image, send_mail, convert_pdf, crawl);"
            " nightly_report every minute",
            f"  status    every {self.every:g}s below; Ctrl-C stops everything"
            " (Stop in the console stops the worker only: the demo restarts it)",
            "",
        )

    def run(self) -> None:
        """Enqueue demo tasks and show the status until a process exits (ConfigError)."""
        assert self.storage is not None, "start() first"
        stdin = _stdin_fd()
        next_task = next_status = time.monotonic()
        while True:
            self._check_children()
            now = time.monotonic()
            try:
                if now >= next_task:
                    produce_some()
                    next_task = now + random.uniform(0.5, 2.0)
                if now >= next_status:
                    self.screen.status(self.tally.look(self.storage).line(self.every))
                    next_status = now + self.every
            except ZtqError as exc:  # Redis went away: say so, and keep trying
                self.screen.status(f"  Redis: {exc}")
                next_task = next_status = now + self.every
            wait = max(0.0, min(next_task, next_status) - time.monotonic())
            ready, _, _ = select.select([stdin] if stdin is not None else [], [], [], wait)
            if ready:
                data = os.read(stdin, 1024) if stdin is not None else b""
                if not data:
                    stdin = None  # end of input (</dev/null, a closed pipe): no more Enters
                elif b"\n" in data:
                    if self.screen.tty:
                        self.screen.typed_enter()
                    self.screen.block(self.login_line(), f"  console   {self.console_url}")


def _stdin_fd() -> int | None:
    try:
        fd = sys.stdin.fileno()
        os.fstat(fd)
    except (AttributeError, ValueError, OSError):
        return None
    return fd


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    screen = Screen(sys.stdout, sys.stdout.isatty())
    d = Demo(args, screen)
    handler = _interrupt_once()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # a closed terminal: SIGHUP
        signal.signal(sig, handler)
    code = 0
    try:
        d.start()
        d.summary()
        d.run()
    except KeyboardInterrupt:
        if d.children:
            screen.block("", d.login_line() + f"   (console {d.console_url})")
    except ZtqError as exc:
        screen.block("", f"  ztq demo: {exc}")
        code = 1
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        d.stop()
    return code


if __name__ == "__main__":
    sys.exit(main())
