"""Soft timeouts of thread-pool tasks, raised within milliseconds of the deadline.

A thread cannot be stopped from outside; the watchdog raises :class:`SoftTimeout` inside the
task's thread (``Interruptible``), which lands at its next Python instruction. It sleeps
until the earliest deadline of the running tasks and is poked when a timed task starts, so
it costs nothing while no task has a ``timeout``. Process slots time their tasks themselves
(SIGALRM in the child, then a hard kill).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Protocol

from ztq.worker.execute import SoftTimeout
from ztq.worker.executors.threads import Executor

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ztq.worker.executors.base import BaseExecutor


class Watched(Protocol):
    """What the watchdog needs of its worker: the executors to look at, the stop flag."""

    @property
    def stopping(self) -> threading.Event: ...
    @property
    def executors(self) -> Sequence[BaseExecutor]: ...


log = logging.getLogger(__name__)
IDLE = 1.0  # seconds between looks when no timed task runs (a poke wakes it sooner)
AGAIN = 0.01  # the task was not inside its own code yet (or just left it): look again soon


class TimeoutWatch(threading.Thread):
    def __init__(self, worker: Watched) -> None:
        super().__init__(name="ztq-timeouts", daemon=True)
        self.worker = worker
        self.poked = threading.Event()

    def poke(self) -> None:
        """A task with a deadline started: look again now."""
        self.poked.set()

    def check(self, now: float) -> float | None:
        """Interrupt every thread-pool task past its deadline; return the next deadline."""
        upcoming: list[float] = []
        for ex in list(self.worker.executors):
            if not isinstance(ex, Executor) or ex.slot is not None:
                continue  # async pools cancel, and process slots time, their own tasks
            cur = ex.current
            if cur is None or cur.deadline is None or cur.timed_out:
                continue
            if now < cur.deadline:
                upcoming.append(cur.deadline)
            elif ex.guard.interrupt(ex, SoftTimeout, cur):
                cur.timed_out = True
            else:
                upcoming.append(now + AGAIN)
        return min(upcoming, default=None)

    def run(self) -> None:
        while not self.worker.stopping.is_set():
            now = time.time()
            try:
                nxt = self.check(now)
            except Exception:  # never let one bad look end the timeouts of the whole worker
                log.exception("timeout watchdog")
                nxt = None
            wait = IDLE if nxt is None else min(IDLE, max(0.0, nxt - now))
            self.poked.wait(wait)
            self.poked.clear()  # the next check sees whatever poked it
