"""What an operator's commands do to a running worker: pause, resume, stop, set_threads,
autoscale and kill, and the one path that changes a queue's executors (``resize``, which the
autoscaler takes too).

``Control`` is a base class of :class:`ztq.worker.worker.Worker`: its methods are the
worker's (``worker.set_threads(...)``, ``worker.resize(...)``), kept here so that the
worker module holds the process's life (setup, maintenance, run, shutdown). The command
thread that reads the commands (``Worker.command_loop``) stays with the worker.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from typing import TYPE_CHECKING, Any

from ztq.core.engine.keys import check_queue
from ztq.core.engine.workers import log_event
from ztq.worker.config import MAX_ASYNC, MAX_THREADS, ThreadSpec
from ztq.worker.executors.async_pool import AsyncExecutor

if TYPE_CHECKING:
    import threading

    from ztq.core.engine.storage import Storage
    from ztq.worker.config import WorkerConfig
    from ztq.worker.executors.base import BaseExecutor
    from ztq.worker.health import SysInfo
    from ztq.worker.scaler import Scaler

# the worker's logger: these lines were the worker module's before they moved here
log = logging.getLogger("ztq.worker.worker")


class Control:
    """The command handling of :class:`~ztq.worker.worker.Worker` (its base class)."""

    if TYPE_CHECKING:  # what the worker provides
        cfg: WorkerConfig
        id: str
        storage: Storage
        sysinfo: SysInfo
        scaler: Scaler
        paused: threading.Event
        executors: list[BaseExecutor]
        threads_lock: threading.Lock

        def heartbeat(self) -> None: ...
        def request_stop(self) -> None: ...
        def register_queues(self, queues: list[str]) -> None: ...
        def add_executor(self, spec: ThreadSpec) -> BaseExecutor: ...

    def handle_command(self, cmd: dict[str, Any]) -> None:
        name = cmd.get("cmd")
        log.info("command %s from %s", name, cmd.get("by", "?"))
        if name == "pause":
            self.paused.set()
        elif name == "resume":
            self.paused.clear()
        elif name == "stop":
            self.request_stop()
        elif name == "set_threads":
            self.set_threads(str(cmd.get("queue", "")), cmd.get("threads"))
        elif name == "autoscale":
            self.autoscale(str(cmd.get("queue", "")))
        elif name == "kill":
            self.kill(str(cmd.get("thread", "")), str(cmd.get("task_id", "")))
        self.heartbeat()
        if name != "refresh":
            log_event(
                self.storage,
                "command",
                self.id,
                f"{name} by {cmd.get('by', '?')}",
                ip=self.sysinfo.ip,
            )

    def set_threads(self, queue: str, threads: Any) -> None:
        """The operator's set-threads command: run ``threads`` executors on ``queue`` (an async
        pool: that many tasks at once, on its one event loop); the queue keeps the pool kind
        it has, or was configured with. An autoscaled queue is pinned: left at that count
        until the ``autoscale`` command gives it back to the autoscaler."""
        if not self.cfg.active_config:
            log.warning("set_threads refused: active_config is off for this worker")
            return
        check_queue(queue)
        self.resize(queue, threads, pin=True)

    def autoscale(self, queue: str) -> None:
        """The ``autoscale`` command: the autoscaler decides ``queue``'s threads again."""
        if not self.cfg.active_config:
            log.warning("autoscale refused: active_config is off for this worker")
        elif self.scaler.unpin(queue):
            log_event(
                self.storage,
                "config",
                self.id,
                f"threads for {queue}: autoscaled again",
                ip=self.sysinfo.ip,
            )
        elif not self.scaler.manages(queue):
            log.warning("autoscale: queue %s has no range here (QUEUE = MIN..MAX)", queue)

    def live_executors(self, queue: str) -> list[BaseExecutor]:
        """The executors serving ``queue`` alone, alive and not retired (what a resize and
        the autoscaler count)."""
        with self.threads_lock:
            return [
                ex
                for ex in self.executors
                if ex.spec.queues == (queue,) and not ex.retired.is_set() and ex.is_alive()
            ]

    def resize(self, queue: str, threads: Any, *, event: bool = True, pin: bool = False) -> bool:
        """The one path that changes a queue's executors (set-threads, the autoscaler).

        An operator's count (``pin``) pins the queue before the executors are counted: the
        pin waits for an autoscaler decision in progress (``Scaler.step`` resizes under the
        lock the pin takes), so the count applies to what that decision left, and no later
        decision resizes the queue."""
        configured = [spec.pool for spec in self.cfg.threads if spec.queues == (queue,)]
        configured += [spec.pool for spec in self.cfg.scaled if spec.queue == queue]
        mine = self.live_executors(queue)
        pool = mine[0].spec.pool if mine else configured[0] if configured else "thread"
        top = MAX_ASYNC if pool == "async" else MAX_THREADS
        if isinstance(threads, bool) or not isinstance(threads, int) or not 0 <= threads <= top:
            log.warning("set_threads refused: bad count %r for %s (0-%d)", threads, queue, top)
            return False
        pinned = " (pinned: not autoscaled)" if pin and self.scaler.pin(queue) else ""
        if pin:
            mine = self.live_executors(queue)
        if pool == "async":
            self._resize_async(queue, mine, threads, pinned if event else None)
            return True
        for ex in mine[threads:]:
            ex.retired.set()
        taken = {ex.spec.name for ex in self.executors if ex.is_alive()}
        i = 0
        for _ in range(threads - len(mine)):
            while f"{queue}-{i}" in taken:
                i += 1
            taken.add(f"{queue}-{i}")
            self.add_executor(ThreadSpec(f"{queue}-{i}", (queue,), pool))
        self.register_queues([queue])
        if event:
            message = f"threads for {queue}: {len(mine)} -> {threads}{pinned}"
            log_event(self.storage, "config", self.id, message, ip=self.sysinfo.ip)
        return True

    def _resize_async(
        self, queue: str, mine: list[BaseExecutor], tasks: int, note: str | None = ""
    ) -> None:
        """An async pool is one event loop: its number of tasks at once changes (0 retires it,
        and a later count starts it again)."""
        before = mine[0].capacity if mine else 0
        for ex in mine[1:] if tasks else mine:
            ex.retired.set()
        if tasks and mine and isinstance(mine[0], AsyncExecutor):
            mine[0].resize(tasks)
        elif tasks:
            taken = {ex.spec.name for ex in self.executors if ex.is_alive()}
            name = next(
                f"{queue}-{i}" for i in range(len(taken) + 1) if f"{queue}-{i}" not in taken
            )
            self.add_executor(ThreadSpec(name, (queue,), "async", tasks))
        self.register_queues([queue])
        if note is not None:  # None: the autoscaler logs it
            message = f"async tasks for {queue}: {before} -> {tasks}{note}"
            log_event(self.storage, "config", self.id, message, ip=self.sysinfo.ip)

    def kill(self, thread: str, task_id: str) -> bool:
        """Kill the task running on ``thread`` if it is still ``task_id`` (and the child
        process it published with ``report_job(pid=...)``)."""
        for ex in list(self.executors):
            run = next((r for r in ex.describe_runs().values() if r["id"] == task_id), None)
            if run is None:
                continue
            rec = self.storage.tasks.record(run["queue"], task_id)
            pid = rec.get("pid") if rec else None
            if not ex.kill(thread, task_id):
                continue
            if isinstance(pid, str) and pid.isdigit() and int(pid) > 1 and int(pid) != os.getpid():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(pid), signal.SIGKILL)
            return True
        log.warning("kill: no task %s on thread %s", task_id, thread)
        return False
