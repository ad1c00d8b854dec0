"""Which Redis, and which data set, a worker talks to: a Redis back without its data is
reported once, with what the worker held, and the worker carries on.

Two things name what the worker talks to (``server_identity``): ``INFO``'s ``run_id``, new
at every start of a server (and another on another server), and a marker key ztq writes
once (``SET NX``) and never changes, which lives as long as the data set does: it survives
a restart that loads the data (RDB, AOF) and a failover to a replica that has the data,
and is gone after a restart without them, a ``FLUSHALL`` or a move to another Redis.

So the marker decides: the same marker under a new run id is a restart (or failover) with
the data, logged at INFO; a marker gone or changed is a loss, reported once as an ERROR
line naming the leases and unwritten results the worker held, an event in the worker log
(the console's), and ``ztq_worker_redis_data_lost_total`` on ``/metrics``. The acks and
renewals Redis then refuses for those tasks are not reported one by one.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from ztq.core.engine.connection import server_identity
from ztq.core.engine.fault_kinds import kind
from ztq.core.engine.workers import log_event
from ztq.core.settings.redis_urls import safe_url

if TYPE_CHECKING:
    from ztq.core.engine.storage import Storage
    from ztq.worker.executors.base import BaseExecutor
    from ztq.worker.health import SysInfo
    from ztq.worker.resilience.faults import Deferred, Faults

    class Watched(Protocol):
        """What the watch needs of its worker: who it is, what it holds, and how to put
        back its own records after Redis lost them."""

        id: str
        storage: Storage
        executors: list[BaseExecutor]
        faults: Faults
        deferred: Deferred
        sysinfo: SysInfo

        def served_queues(self) -> list[str]: ...
        def register_queues(self, queues: list[str]) -> None: ...
        def publish_cron(self) -> None: ...


log = logging.getLogger("ztq.worker")

Key = tuple[str, str]  # (queue, task id)


class ServerWatch:
    """The identity of the worker's Redis, read by the main loop every heartbeat and by a
    thread whose write Redis refused (:meth:`gone`), so that a refusal after a loss is
    explained by the loss, whichever thread sees it first."""

    def __init__(self, worker: Watched) -> None:
        self.worker = worker
        self.lock = threading.Lock()
        self.run_id = ""
        self.marker: str | None = None
        self.adopt = True  # take the next marker seen as this data set's (first look, a loss)
        self.vanished: set[Key] = set()  # what the worker held when Redis lost its data
        self.losses = 0

    def check(self) -> bool:
        """Read the identity; True when Redis turned out to be back without its data (then
        reported, once)."""
        with self.lock:
            new = f"{uuid.uuid4().hex[:16]} {int(time.time())} {self.worker.id}"
            run_id, marker, fresh = server_identity(self.worker.storage, new)
            before, self.run_id = self.run_id, run_id or self.run_id
            if marker is not None and (self.adopt or marker == self.marker):
                if not self.adopt and before and run_id and run_id != before:
                    url = safe_url(self.worker.storage.url)
                    log.info("Redis at %s restarted or failed over with its data "
                             "(run id %s -> %s)", url, before, run_id)  # fmt: skip
                self.marker, self.adopt = marker, False
                return False
            if self.adopt:  # no marker yet (Redis refuses to write one): nothing to compare
                return False
            self.marker, self.adopt = marker, marker is None
            restarted = bool(before and run_id and run_id != before)
            held, unsent = self._held()
            self.losses += 1
        gone = marker is None or fresh  # else: another data set, with a marker of its own
        self.report(gone, before, run_id if restarted else "", held, unsent)
        return True

    def _held(self) -> tuple[Counter[str], int]:
        """The leases every executor holds now, by queue, and how many of them ran to the
        end with their ack or failure not yet written; remembered as vanished."""
        held: Counter[str] = Counter()
        keys: set[Key] = set()
        unsent = 0
        for ex in list(self.worker.executors):
            for key in list(ex.held):
                keys.add(key)
                held[key[0]] += 1
                unsent += ex.settling(key)
        self.vanished = keys
        return held, unsent

    def report(self, gone: bool, run_before: str, run_now: str, held: Counter[str],
               unsent: int) -> None:  # fmt: skip
        """The one ERROR line, the event, the counter; then the worker's own records (queue
        names, cron entries) are written again, as at its start."""
        w = self.worker
        why = "the marker ztq keeps there was gone" if gone else "it holds another data set"
        if run_now:
            why += f"; it restarted (run id {run_before[:8]} -> {run_now[:8]})"
        n = sum(held.values())
        by_queue = ", ".join(f"{q} {c}" for q, c in sorted(held.items())) or "none"
        message = (
            f"Redis at {safe_url(w.storage.url)} is back without its data ({why}): this "
            f"worker held {n} task lease{'s' if n != 1 else ''} ({by_queue}), {unsent} of "
            f"them finished with the result not yet written; those tasks, and every task "
            f"that was queued there, are gone from Redis and ztq will not run them again "
            f"(enqueue them again if they matter). The worker carries on with its queues "
            f"({', '.join(w.served_queues())})."
        )
        log.error("%s", message)
        w.faults.data_lost += 1
        w.storage.queues.forget_registrations()  # the set of queues went with the data
        w.deferred.attempt("the queues served", lambda: w.register_queues(w.served_queues()),
                           always=True)  # fmt: skip
        w.deferred.attempt("the cron entries", w.publish_cron, always=True)
        w.deferred.attempt(
            "the data-loss event",
            lambda: log_event(
                w.storage,
                "redis",
                w.id,
                message,
                ip=w.sysinfo.ip,
                pid=os.getpid(),
                leases=n,
                unsent=unsent,
            ),  # fmt: skip
            always=True,
        )

    def gone(self, keys: Iterable[Key]) -> set[Key]:
        """Of these tasks, whose ack, failure or renewal Redis refused: the ones that went
        with its data. A refusal not yet explained makes this look at the identity first
        (the main loop may not have since Redis came back)."""
        keys = set(keys)
        if keys and not keys <= self.vanished:
            try:
                self.check()
            except Exception as exc:
                if kind(exc) is None:
                    raise
        return keys & self.vanished
