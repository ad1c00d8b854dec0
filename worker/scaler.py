"""The autoscaler in the worker: measure each autoscaled queue, decide, apply, log.

On every heartbeat (``Worker.tick``) :meth:`Scaler.step` reads the backlog of the
autoscaled queues (ready tasks and the oldest one's age, every shard, and the run times
every worker recorded in the last two minutes: one round trip plus one for the oldest
records, ``monitor.queue_stats``), sums what their executors measured
since the last beat (busy seconds, runs ended, their seconds and CPU seconds), asks the
policy (:mod:`ztq.worker.autoscale`) and resizes through the path the set-threads command
takes (``Worker.resize``). Each change goes to the worker log as an ``autoscale`` event
(``mail 2 → 5 threads: 340 waiting, CPU 41%``) with its figures as fields. A queue an
operator set the threads of is pinned: left alone until the ``autoscale`` command.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ztq.core.engine.workers import log_event
from ztq.core.monitor import queues as monitor
from ztq.core.monitor import timings
from ztq.worker.autoscale import Autoscaler, Decision, Host, Limits, Load
from ztq.worker.config import ScaleSpec

if TYPE_CHECKING:
    from ztq.worker.executors.base import BaseExecutor
    from ztq.worker.executors.host import ExecutorHost
    from ztq.worker.health import SysInfo

    class Scaled(ExecutorHost, Protocol):
        """What the autoscaler needs of its worker: an executor's host, its executors and
        the one path that resizes them (``Control.resize``)."""

        executors: list[BaseExecutor]
        threads_lock: threading.Lock
        sysinfo: SysInfo

        def live_executors(self, queue: str) -> list[BaseExecutor]: ...
        def resize(
            self, queue: str, threads: Any, *, event: bool = True, pin: bool = False
        ) -> bool: ...


log = logging.getLogger(__name__)


@dataclass
class Totals:
    """What a queue's executors measured so far (those gone included)."""

    runs: int = 0
    run_seconds: float = 0.0
    cpu_seconds: float = 0.0
    busy: float = 0.0  # run seconds, with the running part of the runs in progress


class Scaler:
    def __init__(self, worker: Scaled) -> None:
        cfg = worker.cfg
        self.worker = worker
        self.specs: dict[str, ScaleSpec] = {s.queue: s for s in cfg.scaled}
        self.policy = Autoscaler(
            Limits(
                cfg.autoscale_cpu_max,
                cfg.autoscale_memory_max,
                cfg.autoscale_threads_max,
                cfg.autoscale_idle_beats,
                cfg.heartbeat,
            )  # fmt: skip
        )
        self.pinned: set[str] = set()
        self.last: dict[str, dict[str, str]] = {}  # queue -> the last decision (its event)
        self._gone: dict[str, Totals] = {}  # what pruned executors measured
        self._before: dict[str, Totals] = {}
        self._at: float | None = None
        self._lock = threading.Lock()  # the command thread pins while the main one decides

    def manages(self, queue: str) -> bool:
        return queue in self.specs

    def pin(self, queue: str) -> bool:
        """An operator set the queue's threads: autoscale it no more (until :meth:`unpin`)."""
        with self._lock:
            if queue not in self.specs or queue in self.pinned:
                return False
            self.pinned.add(queue)
            return True

    def unpin(self, queue: str) -> bool:
        with self._lock:
            if queue not in self.pinned:
                return False
            self.pinned.discard(queue)
            return True

    def describe(self) -> dict[str, dict[str, Any]]:
        """The heartbeat's ``autoscale``: range, pool, pinned and the last decision per queue
        (read back by ``ztq.core.engine.workers.autoscale_of``)."""
        return {
            q: {
                "min": s.low,
                "max": s.high,
                "pool": s.pool,
                "pinned": q in self.pinned,
                "last": self.last.get(q, {}),
            }  # fmt: skip
            for q, s in sorted(self.specs.items())
        }

    # -- one heartbeat -----------------------------------------------------------------------
    def step(self, now: float) -> list[Decision]:
        """Measure, decide and apply (nothing while the worker is paused or stopping)."""
        w = self.worker
        if not self.specs or w.stopping.is_set() or w.paused.is_set():
            self._at = None  # the next beat starts a fresh measure
            return []
        loads = self.measure(now)
        cpu, memory = w.sysinfo.host_load()
        decisions = self.policy.decide(loads, Host(cpu, memory))
        for d in decisions:
            with self._lock:
                if d.queue in self.pinned:  # pinned while this beat decided
                    continue
                if d.after != d.before:
                    w.resize(d.queue, d.after, event=False)
            fields = {"queue": d.queue, "before": str(d.before), "after": str(d.after),
                      "why": d.why, **d.facts}  # fmt: skip
            self.last[d.queue] = {"message": d.message, **fields}
            log.info("autoscale: %s", d.message)
            log_event(w.storage, "autoscale", w.id, d.message, **fields)
        return decisions

    def measure(self, now: float) -> list[Load]:
        w = self.worker
        queues = sorted(self.specs)
        shards = {q: w.physical([q]) for q in queues}
        stats = monitor.queue_stats(w.storage, [s for q in queues for s in shards[q]], minutes=2,
                                    now=now)  # fmt: skip
        by_shard = {s.name: s for s in stats}
        totals = self._totals(now)
        interval = None if self._at is None else now - self._at
        loads = []
        for q in queues:
            spec, mine = self.specs[q], [by_shard[s] for s in shards[q]]
            ready = sum(sum(s.ready.values()) for s in mine if not s.paused)
            heads = [s.head_enqueued for s in mine if s.head_enqueued and not s.paused]
            ran = timings.merged(s.window for s in mine).run
            oldest = max(0.0, now - min(heads) / 1000) if heads and ready else 0.0
            t, before = totals[q], self._before.get(q, Totals())
            runs = t.runs - before.runs
            seconds = t.run_seconds - before.run_seconds
            if interval is not None and interval > 0.05:
                busy = max(0.0, (t.busy - before.busy) / interval)
            else:  # the first beat: the threads busy now
                busy = float(sum(ex.busy() for ex in self._executors(q)))
            cpu = (t.cpu_seconds - before.cpu_seconds) / seconds if seconds > 0 else None
            mean = seconds / runs if runs else None
            prior = ran.total_ms / ran.count / 1000 if ran.count else None
            loads.append(
                Load(
                    q,
                    self._threads(q),
                    spec.low,
                    spec.high,
                    ready,
                    oldest,
                    busy,
                    runs,
                    mean,
                    cpu,
                    spec.pool,
                    q in self.pinned,
                    prior,
                )  # fmt: skip
            )
        self._before, self._at = totals, now
        return loads

    def _executors(self, queue: str, *, live: bool = True) -> list[BaseExecutor]:
        if live:
            return self.worker.live_executors(queue)
        with self.worker.threads_lock:
            return [ex for ex in self.worker.executors if ex.spec.queues == (queue,)]

    def _threads(self, queue: str) -> int:
        return sum(ex.capacity for ex in self._executors(queue))

    def _totals(self, now: float) -> dict[str, Totals]:
        """Every autoscaled queue's totals; executors that exited are folded in and pruned
        from the worker's list (threads come and go all day)."""
        out: dict[str, Totals] = {}
        for q in self.specs:
            gone = self._gone.setdefault(q, Totals())
            t = Totals(gone.runs, gone.run_seconds, gone.cpu_seconds, gone.busy)
            for ex in self._executors(q, live=False):
                dead = ex.ended() and not ex.held
                for acc in (t, gone) if dead else (t,):
                    acc.runs += ex.runs_ended
                    acc.run_seconds += ex.run_seconds
                    acc.cpu_seconds += ex.cpu_seconds
                    acc.busy += ex.run_seconds
                if dead:
                    with self.worker.threads_lock:
                        if ex in self.worker.executors:
                            self.worker.executors.remove(ex)
                else:
                    runs = ex.describe_runs().values()
                    t.busy += sum(max(0.0, now - float(r.get("started") or now)) for r in runs)
            out[q] = t
        return out
