"""The scheduler thread: delayed tasks (and retries) become ready on time, and the tasks of a
dead worker go back to ready as soon as their lease expires.

It sleeps until the next due time or lease deadline of the worker's queues and is woken
early by the ``schedule`` list when a delayed task arrives. Redis fires a BLPOP timeout
only on its own clock tick (up to 100 ms late with the default ``hz 10``), so the last
stretch before an instant is waited on the client, on Redis's clock as the scripts report
it. Any number of workers may run it; ``promote`` and ``reap`` are idempotent.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ztq.core.engine.storage import Reaped
    from ztq.worker.executors.host import ExecutorHost

    class Scheduled(ExecutorHost, Protocol):
        """What the scheduler needs of its worker: an executor's host, and its reaper."""

        def reap(self, queue: str) -> Reaped: ...


log = logging.getLogger(__name__)
PRECISE = 0.15  # seconds before a due time that are waited on the client


class Scheduler(threading.Thread):
    def __init__(self, worker: Scheduled) -> None:
        super().__init__(name="ztq-scheduler", daemon=True)
        self.worker = worker

    def run(self) -> None:
        delay = 0.5
        while not self.worker.stopping.is_set():
            try:
                self.step()
                delay = 0.5
                self.worker.faults.ok("scheduler")
            except Exception as exc:  # a Redis fault: logged once
                wait, delay = self.worker.faults.backoff("scheduler", exc, delay)
                self.worker.stopping.wait(wait)

    def step(self) -> float:
        """Promote what is due, reap expired leases, then wait until the next instant that
        matters (due time or lease deadline); returns the wait."""
        queues = self.worker.physical(self.worker.served_queues())  # every shard of each
        waits = [self.worker.storage.tasks.promote(q).wait for q in queues]
        waits += [self.worker.reap(q).wait for q in queues]
        due = [w for w in waits if w is not None]
        timeout = min([self.worker.cfg.idle_wait, *due])
        if due and timeout <= PRECISE:
            self.worker.stopping.wait(timeout)
        else:
            self.worker.storage.waits.wait(queues, max(0.001, timeout - PRECISE), schedule=True)
        return timeout
