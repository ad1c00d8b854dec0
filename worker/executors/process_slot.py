"""A process slot: a child process that runs one task at a time and can be killed.

Used for queues configured with ``process``: a stuck task is killed from the console or by
its hard timeout, and the slot starts a fresh child. The child is started with ``spawn`` (no
fork of a threaded parent), imports the worker's task modules and opens its own Redis
connection for progress reports, and logs like the worker (``--log-level``,
``--log-format``) with the task's fields on each line. Parent and child exchange the payload
text and an ``Outcome`` over a pipe; middleware hear of the run in the child through
``child_start`` / ``child_end`` (with ``run.carry``, e.g. the run's trace context).
"""

from __future__ import annotations

import contextlib
import logging
import math
import multiprocessing
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, cast

from ztq.core.client.app import default_app
from ztq.core.client.apps import load_app
from ztq.core.client.calls import TaskCall
from ztq.worker.context import RunContext, reset_current, set_current
from ztq.worker.execute import Outcome, SoftTimeout, import_modules, run_payload
from ztq.worker.logs import configure_like, in_use

log = logging.getLogger(__name__)
HARD_GRACE = 5.0  # seconds past the soft timeout before the child is killed
# A child sends this when it takes a task: the hard timeout counts from then, not from the
# send (a fresh child may still be importing: seconds on a loaded machine). One that has not
# taken its task after START_LIMIT seconds is restarted, the task failed.
STARTED = "started"
START_LIMIT = 120.0


@dataclass(frozen=True)
class SlotTask:
    """What the parent sends the child for one run (pickled over the pipe)."""

    payload: str
    queue: str
    task_id: str
    token: int
    worker: str
    task: str
    on_progress: dict[str, Any] | None
    timeout: float | None
    attempt: int = 1
    carry: dict[str, str] | None = None  # run.carry: what middleware pass to the child


def _soft_timeout(signum: int, frame: Any) -> None:
    raise SoftTimeout("the task ran past its timeout")


def _child_main(
    conn: Any,
    imports: tuple[str, ...],
    url: str,
    prefix: str,
    app_spec: str,
    log_config: tuple[str, str] | None = None,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    signal.signal(signal.SIGALRM, _soft_timeout)
    if log_config is not None:  # lines as the worker's, with the task's fields
        configure_like(log_config)
    import_modules(imports)
    app = load_app(app_spec) if app_spec else default_app()
    storage = app.connect(url, prefix=prefix)
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        job: SlotTask = msg
        ctx = RunContext(
            storage,
            job.queue,
            job.task_id,
            job.token,
            job.worker,
            job.task,
            TaskCall.from_dict(job.on_progress, app) if job.on_progress else None,
            app=app,
            attempt=job.attempt,
        )
        tok = set_current(ctx)
        conn.send(STARTED)
        hooks = app.middleware
        hooks.notify("child_start", ctx, dict(job.carry or {}))
        if job.timeout:
            signal.setitimer(signal.ITIMER_REAL, job.timeout)
        try:
            outcome = run_payload(job.payload, app)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        hooks.notify("child_end", ctx, outcome)
        reset_current(tok)
        conn.send(outcome)


class ProcessSlot:
    def __init__(self, imports: tuple[str, ...], url: str, prefix: str, app: str = "") -> None:
        """A child importing ``imports`` and serving the app ``app`` names (module:attribute,
        '' for the default app) on ``url`` / ``prefix``."""
        self.imports, self.url, self.prefix, self.app = imports, url, prefix, app
        self._ctx = multiprocessing.get_context("spawn")
        self._kill = threading.Event()
        self.proc: Any = None
        self.conn: Any = None
        self._start()

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        self.proc = self._ctx.Process(
            target=_child_main,
            args=(child, self.imports, self.url, self.prefix, self.app, in_use()),
            daemon=True,
        )
        self.proc.start()
        child.close()
        self.conn = parent

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def kill(self) -> None:
        """Kill the running task (from another thread); the slot restarts its child."""
        self._kill.set()

    def _restart(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.join(5)
        self.conn.close()
        self._start()

    def run(self, job: SlotTask) -> Outcome:
        """Send one task to the child and wait for its outcome (killing it when needed)."""
        self._kill.clear()
        task, timeout = job.task, job.timeout
        self.conn.send(job)
        started_by = time.monotonic() + START_LIMIT  # until the child takes it
        hard: float | None = None
        while True:
            try:
                if self.conn.poll(0.05):
                    result: Outcome | str = self.conn.recv()
                    if result != STARTED:
                        return cast(Outcome, result)
                    started_by = math.inf
                    hard = time.monotonic() + timeout + HARD_GRACE if timeout else None
                    continue
            except (EOFError, OSError):
                self._restart()
                return Outcome(False, task, error_type="ChildDied", message="the process slot died")
            if self._kill.is_set():
                self._restart()
                return Outcome(False, task, error_type="Killed", message="killed by an operator")
            if time.monotonic() > started_by:
                self._restart()
                late = f"the process slot did not take the task in {START_LIMIT:.0f}s"
                return Outcome(False, task, error_type="ChildDied", message=late)
            if hard is not None and time.monotonic() > hard:
                self._restart()
                return Outcome(
                    False,
                    task,
                    error_type="HardTimeout",
                    message=f"killed after {timeout}s + {HARD_GRACE}s",
                )
            if not self.proc.is_alive():
                self._restart()
                return Outcome(False, task, error_type="ChildDied", message="the process slot died")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()
        if self.proc is not None and self.proc.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.join(5)
