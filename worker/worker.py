"""The worker process: executors per queue, heartbeat, commands, reaper, scheduler, cron.

``Worker.tick()`` is the one maintenance step (tests call it directly); ``run()`` starts
the executor threads and a command thread, then loops ``tick()`` every ``heartbeat``
seconds until SIGTERM/SIGINT or a ``stop`` command. What each command does (and resizing a
queue's executors) is the base class ``ztq.worker.control.Control``.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Sequence
from typing import Any

from ztq.core.client.app import App, default_app
from ztq.core.client.apps import check_shared_names, load_app, tasks_elsewhere
from ztq.core.client.cron import CronTable
from ztq.core.engine.fault_kinds import kind
from ztq.core.engine.storage import Reaped, Storage
from ztq.core.engine.workers import (
    disabled_cron,
    get_worker,
    log_event,
    nudge_commands,
    publish_cron_entries,
    take_commands,
    write_heartbeat,
)
from ztq.worker.channels import WorkerChannels
from ztq.worker.config import ThreadSpec, WorkerConfig
from ztq.worker.control import Control
from ztq.worker.execute import import_modules, wrong_pool
from ztq.worker.executors.async_pool import AsyncExecutor
from ztq.worker.executors.base import BaseExecutor
from ztq.worker.executors.batches import relay_ends
from ztq.worker.executors.threads import Executor
from ztq.worker.executors.timeouts import TimeoutWatch
from ztq.worker.health import Health, HealthServer, SysInfo, parse_address
from ztq.worker.resilience.faults import UNANSWERED, Deferred, Faults, best_effort
from ztq.worker.resilience.identity import ServerWatch
from ztq.worker.scaler import Scaler
from ztq.worker.scheduler import Scheduler
from ztq.worker.startup import check_name, check_served, start_summary

log = logging.getLogger(__name__)


class Worker(Control):
    """Serves the queues of ``cfg`` for one app: ``app``, else the one ``cfg.app`` names, else
    the default app. Tasks are looked up in that app's registry, and callbacks sent by it."""

    def __init__(
        self, cfg: WorkerConfig, storage: Storage | None = None, app: App | None = None
    ) -> None:
        self.cfg = cfg
        self.id = cfg.worker_id
        self.app = app or (load_app(cfg.app) if cfg.app else default_app())
        self.storage = storage or self.app.connect(cfg.redis_url, prefix=cfg.prefix)
        self.stopping = threading.Event()
        self.wakeup = threading.Event()  # the main loop's wait: a stop, an executor's end
        self.paused = threading.Event()
        self.executors: list[BaseExecutor] = []
        self.started = time.time()
        self.cron: CronTable | None = None
        self.next_cron: float | None = None
        self.sysinfo = SysInfo()
        self.threads_lock = threading.Lock()
        # one beat at a time, none after "stopped": a beat that read the status before a
        # pause or the stop must not write it after the newer one (the console would show it)
        self.beat_lock, self.beats_over = threading.Lock(), False
        self._signals = 0
        self.command_thread: threading.Thread | None = None
        self.scheduler: Scheduler | None = None
        self.timeouts = TimeoutWatch(self)
        self._drain_setup = False
        # Redis refusing or not answering: every thread's faults, the writes that wait
        # for Redis to take them, and which data set it holds (ztq.worker.resilience)
        self.faults = Faults(cfg.lease)
        self.deferred = Deferred(self.faults)
        self.watch = ServerWatch(self)
        self.health = Health(self.storage, cfg.heartbeat, cfg.lost_after, self.faults)
        self.health_server: HealthServer | None = None
        # queue -> its shards (just the queue when it has none), from the config, the app's
        # tasks and the shards producers registered (refreshed every heartbeat)
        self.shards: dict[str, tuple[str, ...]] = {}
        self.channels = WorkerChannels(self)  # broadcasts and subscribed tasks
        self.scaler = Scaler(self)  # the autoscaled queues' threads (docs/autoscaling.md)

    # -- setup -------------------------------------------------------------------------------
    def setup(self) -> None:
        import_modules(self.cfg.imports)
        check_served(self.cfg, self.app.registered())
        log.info("%s", start_summary(self.cfg, self.id))
        check_shared_names(self.app)
        self.check_apps()
        self.check_pools()
        self.cron = CronTable(self.app.cron_entries())
        # a Redis that answers but refuses writes (full, a replica, loading) does not stop
        # the start: what it refuses is written by the main loop once it takes writes
        self.deferred.attempt("the cron entries", self.publish_cron)
        self.deferred.attempt("the queues served", lambda: self.register_queues(self.cfg.queues))
        previous = None
        with best_effort():
            self.watch.check()
            previous = get_worker(self.storage, self.id, self.cfg.lost_after)
        check_name(previous, self.sysinfo.host)
        event = "reboot" if previous is not None else "start"
        serving = f"pid {os.getpid()} serving {', '.join(self.cfg.queues)}"
        self.deferred.attempt(f"the {event} event", lambda: log_event(
            self.storage, event, self.id, serving, ip=self.sysinfo.ip))  # fmt: skip
        with best_effort():
            self.heartbeat()

    def check_apps(self) -> None:
        """Warn of imported modules whose tasks are on another app than the one served: each
        run of them here would fail with UnknownTask (issue 24)."""
        served = self.cfg.app or "the default app"
        for module, other, names, spec in tasks_elsewhere(self.app, self.cfg.imports):
            shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            log.warning(
                "module %s defines tasks on app %r (%s), not on the app this worker serves "
                "(%s): their runs here would fail with UnknownTask; use --app %s",
                module, other.name, shown, served, spec or f"{module}:ATTRIBUTE",
            )  # fmt: skip

    def register_queues(self, queues: list[str]) -> None:
        """Record the queues served here, with every shard the config or the tasks give."""
        for queue in queues:
            self.shards.setdefault(queue, (queue,))
            n = max(self.cfg.shards.get(queue, 1), self.app.registry.shards(queue))
            if n > 1:
                self.storage.queues.register_shards(queue, n)
            else:  # the task-level rate limits of its tasks (none on a sharded queue)
                self.storage.queues.register_queue(queue)
                self.storage.queues.task_rates(queue, self.app.registry.rates(queue))
        self.refresh_shards()

    def refresh_shards(self, known: list[str] | None = None) -> None:
        """Learn the shards of the queues served here (``known``: the names of
        ``storage.queues.names()``, when already read): a producer with more shards than the
        config gives registered them, and they must not wait unserved."""
        known = self.storage.queues.names() if known is None else known
        queues = {q for ex in list(self.executors) for q in ex.spec.queues}
        queues |= set(self.cfg.queues) | set(self.shards)
        self.shards = {q: tuple(self.storage.queues.shards_of(q, known)) for q in sorted(queues)}

    def physical(self, queues: Sequence[str], turn: int = 0) -> list[str]:
        """The shards to fetch ``queues`` from, queue by queue in the order given; ``turn``
        rotates which shard of each queue is asked first, so every shard gets its turn."""
        out: list[str] = []
        for queue in queues:
            shards = self.shards.get(queue) or (queue,)
            k = turn % len(shards)
            out += shards[k:] + shards[:k]
        return out

    def check_pools(self) -> None:
        """Warn of registered tasks that a pool serving their queue here cannot run: an
        ``async def`` under threads, a plain function under an async pool (each run of
        them would go to the error list, see ``execute.pool_mismatch``)."""
        pools: dict[str, set[str]] = {}
        for spec in self.cfg.threads:
            for queue in spec.queues:
                pools.setdefault(queue, set()).add(spec.pool)
        for tf in self.app.registered().values():
            for wrong in sorted(p for p in pools.get(tf.queue, ()) if wrong_pool(tf, p)):
                kind = "an async def" if tf.is_async else "a plain function"
                pool = "an async pool" if wrong == "async" else "a thread pool"
                log.warning(
                    "task %s is %s and queue %s is served by %s here: its runs will go to "
                    "the error list (see docs/asyncio.md)", tf.name, kind, tf.queue, pool,
                )  # fmt: skip

    def publish_cron(self) -> None:
        if self.cron is None or not self.cron.entries:
            return
        publish_cron_entries(self.storage, [e.describe() for e in self.cron.entries])

    def start_executors(self) -> None:
        for spec in self.cfg.threads:
            self.add_executor(spec)

    def add_executor(self, spec: ThreadSpec) -> BaseExecutor:
        # one connection per executor thread (an async pool has its own client too), plus
        # heartbeat, commands, scheduler and timeouts, with room to spare
        self.storage.reserve_connections(len(self.executors) + 33)
        ex = AsyncExecutor(self, spec) if spec.pool == "async" else Executor(self, spec)
        with self.threads_lock:
            self.executors.append(ex)
        ex.start()
        return ex

    # -- maintenance -------------------------------------------------------------------------
    def tick(self, now: float | None = None) -> None:
        """Look at Redis's identity, renew leases, autoscale, heartbeat, write what waits,
        hand back dead workers' tasks, move due tasks, fire cron. A step that Redis refuses
        does not keep the next from trying (leases are renewed even when heartbeats are
        refused); the first fault is raised at the end, or at once when Redis does not
        answer at all."""
        now = time.time() if now is None else now
        failure: Exception | None = None
        for step in (self.watch.check, self.renew_leases, lambda: self.scaler.step(now),
                     self.heartbeat, self.channels.beat, self.deferred.retry,
                     lambda: self.maintain(now)):  # fmt: skip
            try:
                step()
            except Exception as exc:
                if kind(exc) is None:
                    raise
                failure = failure or exc
                if kind(exc) in UNANSWERED:
                    break
        if failure is not None:
            raise failure

    def maintain(self, now: float) -> None:
        """Learn new shards, reap and promote every known queue, fire cron."""
        known = self.storage.queues.names()
        self.refresh_shards(known)
        for queue in known:
            self.reap(queue)
            self.storage.tasks.promote(queue)
        # what killed workers left (docs/batches.md)
        relay_ends(self.storage, self.app, known, self.faults)
        if self.cron is not None and self.cron.entries and self.cron.due_now(now):
            _, self.next_cron = self.cron.fire(now, skip=disabled_cron(self.storage))
            self.publish_cron()

    def reap(self, queue: str) -> Reaped:
        """Hand back the tasks of dead workers in ``queue``, and log each in the event log."""
        reaped = self.storage.leases.reap(queue, self.cfg.max_lost)
        for task_id, worker, outcome in reaped.items:
            message = f"task {task_id} of queue {queue} went back to {outcome}"
            log.warning("lease of task %s (worker %s) expired: %s", task_id, worker, outcome)
            with best_effort():  # a full Redis reaps (it frees first) but refuses the event
                log_event(self.storage, "lost", worker, message)
        if any(outcome == "error" for _, _, outcome in reaped.items):  # a member may have ended
            relay_ends(self.storage, self.app, [queue], self.faults)
        return reaped

    def renew_leases(self) -> None:
        held: dict[str, list[tuple[str, int]]] = {}
        for ex in list(self.executors):
            for queue, items in ex.held_by_queue().items():
                held.setdefault(queue, []).extend(items)
        lease_ms = int(self.cfg.lease * 1000)
        for queue, items in held.items():
            lost = self.storage.leases.renew(queue, self.id, lease_ms, items)
            vanished = self.watch.gone((queue, task_id) for task_id in lost)
            for task_id in lost:
                # an executor may have acked it meanwhile: only a task held and unfinished is
                # lost; one that went with Redis's data was reported once (ServerWatch)
                key = (queue, task_id)
                if key in vanished:
                    continue
                if any(key in ex.held and not ex.settling(key) for ex in self.executors):
                    log.warning("lost the lease of %s in %s (expired, handed on?)", task_id, queue)
                    self.app.middleware.notify("on_lease_lost", self, queue, task_id)

    def heartbeat(self) -> None:
        self.write_beat()
        self.health.beating()

    def write_beat(self, final: str | None = None) -> None:
        with self.beat_lock:  # the status read under the lock: see beat_lock
            if not self.beats_over:
                paused = "paused" if self.paused.is_set() else "running"
                status = final or ("stopping" if self.stopping.is_set() else paused)
                write_heartbeat(self.storage, self.id, self.describe(status))
                self.beats_over = final is not None

    def describe(self, status: str) -> dict[str, Any]:
        threads: dict[str, int] = {}
        current: dict[str, Any] = {}
        with self.threads_lock:
            alive = [ex for ex in self.executors if ex.is_alive() and not ex.retired.is_set()]
        for ex in alive:
            for q in ex.spec.queues:
                threads[q] = threads.get(q, 0) + ex.capacity
            current.update(ex.describe_runs())
        return {
            "name": self.id,
            **self.sysinfo.sample(),
            "started": self.started,
            "status": status,
            "pool": sorted({ex.spec.pool for ex in alive}) or ["thread"],
            "threads": threads,
            "config_editable": self.cfg.active_config,
            **({"autoscale": self.scaler.describe()} if self.scaler.specs else {}),
            "current": current,
            "done": sum(ex.done_count for ex in alive),
            "failed": sum(ex.failed_count for ex in alive),
        }

    def served_queues(self) -> list[str]:
        """The queues this worker's live executors watch (changes with set_threads)."""
        queues: list[str] = []
        for ex in list(self.executors):
            if ex.is_alive() and not ex.retired.is_set():
                queues += [q for q in ex.spec.queues if q not in queues]
        return queues or list(self.cfg.queues)

    def queues_drained(self) -> bool:
        """Burst mode: nothing ready or delayed in this worker's queues, nothing running here."""
        if any(ex.busy() for ex in self.executors):
            return False
        return all(
            self.storage.queues.pending_count(q) == 0 for q in self.physical(self.cfg.queues)
        )

    # -- tests -------------------------------------------------------------------------------
    def drain(
        self,
        queues: list[str] | None = None,
        *,
        run_delayed: bool = False,
        max_tasks: int = 100_000,
    ) -> int:
        """Run every ready task of ``queues`` (default: the worker's) in the calling thread
        until none is left; return how many ran. For tests: tasks run as in a worker, with
        the app's middleware (retries, callbacks, results ...), on the same scripts. Due
        delayed tasks are promoted; ``run_delayed`` runs every delayed task and retry at
        once. No threads, heartbeats or soft timeouts; a paused queue is left alone."""
        names = list(queues or self.cfg.queues)
        if not self._drain_setup:
            import_modules(self.cfg.imports)
            self._drain_setup = True
        self.register_queues(names)
        ex = Executor(self, ThreadSpec("drain", tuple(names), "inline"))  # plain and async
        ran = 0
        while ran < max_tasks:
            leased = ex.flush()  # the last batch's acks and failures, then the next fetch
            if not leased:
                if not any(self._wake_delayed(q, run_delayed) for q in self.physical(names)):
                    break
                continue
            for lease in leased:
                ex.run_one(lease)
                ran += 1
        ex.flush(fetch=False)
        ex.run_dry_hooks()
        return ran

    def _wake_delayed(self, queue: str, all_of_them: bool) -> int:
        if not all_of_them:
            return self.storage.tasks.promote(queue).moved
        moved = 0
        while step := self.storage.tasks.requeue(queue, "delayed", oldest=500):
            moved += step
        return moved

    # -- commands (what each does: ztq.worker.control) --------------------------------------
    def command_loop(self) -> None:
        delay = 0.5
        while not self.stopping.is_set():
            try:
                for cmd in take_commands(self.storage, self.id, timeout=1.0):
                    self.handle_command(cmd)
                delay = 0.5
                self.faults.ok("commands")
            except Exception as exc:
                wait, delay = self.faults.backoff("commands", exc, delay)
                self.stopping.wait(wait)

    # -- run ---------------------------------------------------------------------------------
    def request_stop(self) -> None:
        self.stopping.set()
        self.wakeup.set()
        for ex in list(self.executors):
            ex.wake()

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._signals += 1
        if self._signals > 1:
            log.warning("second signal: exiting now; running tasks return through their leases")
            os._exit(1)
        log.info("signal %s: finishing running tasks (grace %ss)", signum, self.cfg.grace)
        self.request_stop()

    def install_signals(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def run(self) -> None:
        if self.cfg.health:  # before setup: a probe gets "not ready", not a refused port
            self.health_server = HealthServer(self.health, parse_address(self.cfg.health))
            self.health_server.start()
        self.setup()
        self.app.middleware.notify("worker_start", self)
        self.start_executors()
        self.channels.start()
        self.scheduler = Scheduler(self)
        self.scheduler.start()
        self.timeouts.start()
        with best_effort():  # the first beat with the threads (setup's came before them)
            self.heartbeat()
        self.command_thread = threading.Thread(
            target=self.command_loop, name="ztq-commands", daemon=True
        )
        self.command_thread.start()
        delay = 0.5
        while not self.stopping.is_set():
            self.health.looping()
            try:
                self.tick()
                delay = 0.5
                self.faults.ok("maintenance")
            except Exception as exc:  # a Redis fault: logged once (worker/resilience/faults.py)
                wait, delay = self.faults.backoff("maintenance", exc, delay)
                self.stopping.wait(min(wait, self.cfg.heartbeat))
                continue
            if self.cfg.burst and not any(ex.is_alive() for ex in self.executors):
                break
            wait = self.cfg.heartbeat
            if self.next_cron is not None:
                wait = max(0.05, min(wait, self.next_cron - time.time()))
            self.wakeup.wait(wait)
            self.wakeup.clear()
        self.shutdown()

    def shutdown(self) -> None:
        self.stopping.set()
        self.health.stopping = True
        # a token per idle executor, not per queue: four threads blocked on one wake list
        # took one token and the other three waited out idle_wait (a 4-thread worker took
        # 5 s to stop on SIGTERM)
        idle = [q for ex in self.executors if not ex.busy() for q in ex.wait_queues()]
        with best_effort():  # wake the idle ones: no wait of idle_wait
            self.storage.waits.nudge(sorted(idle))
            nudge_commands(self.storage, self.id)  # nor of the command thread's read
        deadline = time.monotonic() + self.cfg.grace
        for ex in list(self.executors):
            while ex.is_alive() and time.monotonic() < deadline:
                with best_effort():
                    self.renew_leases()
                    self.heartbeat()
                ex.join(min(self.cfg.heartbeat, max(0.0, deadline - time.monotonic())))
        self.channels.stop(deadline)
        with best_effort():
            for ex in self.executors:
                if ex.is_alive():  # still running after the grace period: hand its tasks back
                    for queue, held in ex.held_by_queue().items():
                        self.storage.leases.release(queue, self.id, held)
                    ex.abandon()
            self.write_beat("stopped")
            log_event(
                self.storage, "stop", self.id, f"pid {os.getpid()} stopped", ip=self.sysinfo.ip
            )
        with best_effort():
            self.app.middleware.notify("worker_stop", self)
        if (
            self.command_thread is not None
            and self.command_thread is not threading.current_thread()
        ):
            self.command_thread.join(2.0)
        if self.scheduler is not None:  # no thread of a stopped worker writes to Redis
            with best_effort():
                self.storage.waits.nudge(self.physical(self.served_queues()), schedule=True)
            self.scheduler.join(2.0)
        if self.health_server is not None:
            self.health_server.stop()
        log.info("worker %s stopped", self.id)
