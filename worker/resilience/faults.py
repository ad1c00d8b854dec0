"""The Redis faults a worker's threads meet, in one place: what they log, how long they wait,
what ``/readyz`` says and what ``/metrics`` counts.

Every thread that calls Redis (the main loop, each executor, the scheduler, the command
thread, the broadcast readers) reports a failed call with :meth:`Faults.failed` and a call
that went through with :meth:`Faults.ok`. A fault is logged once when a thread first meets
its kind (``OOM``, ``READONLY``, ``LOADING`` ...) and once more when that thread's calls go
through again; the calls in between are only counted. The thread waits the delay it is
given (doubling from 0.1 s, capped at a quarter of the lease, so that leases are renewed
as soon as Redis takes writes again) and keeps what it holds.

Writes that are not needed to run tasks (registering the queues, the worker's start event,
the cron entries it publishes) go to :class:`Deferred` when Redis refuses them: the worker
starts and serves its queues, and the main loop writes them once Redis takes writes.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ztq.core.engine.fault_kinds import KINDS, describe, kind
from ztq.core.errors import ZtqError

log = logging.getLogger("ztq.worker")

FIRST_DELAY = 0.1  # seconds before the first retry of a failed call
UNANSWERED = ("connection", "timeout")  # kinds where Redis did not answer at all
WHERE = "registering the worker"  # what the deferred writes are, in logs and /readyz


@dataclass
class Fault:
    """The fault a thread is in: its kind, Redis's words, since when, how many calls."""

    kind: str
    text: str
    since: float  # monotonic
    calls: int = 1
    delay: float = FIRST_DELAY


class Faults:
    """The faults of one worker's threads (thread-safe)."""

    def __init__(self, lease: float) -> None:
        self.lock = threading.Lock()
        self.active: dict[str, Fault] = {}  # thread (what it does) -> its fault
        self.counts: Counter[str] = Counter()  # kind -> failed calls, since the start
        self.data_lost = 0  # times Redis came back without its data (identity.py)
        self.max_delay = max(0.2, min(5.0, lease / 4))

    def failed(self, where: str, exc: BaseException) -> float | None:
        """``where`` (a thread, by what it does) met ``exc``: the seconds to wait before it
        tries again, or ``None`` when ``exc`` is not a Redis fault (the caller raises it)."""
        k = kind(exc)
        if k is None:
            return None
        text = describe(exc)
        with self.lock:
            self.counts[k] += 1
            fault = self.active.get(where)
            if fault is not None and fault.kind == k:
                fault.calls += 1
                fault.text = text
                fault.delay = min(fault.delay * 2, self.max_delay)
                return fault.delay
            delay = FIRST_DELAY if fault is None else fault.delay
            self.active[where] = Fault(k, text, time.monotonic(), delay=delay)
        log.warning("%s: %s (%s); retrying with backoff, keeping the tasks it holds",
                    where, KINDS[k], text)  # fmt: skip
        return delay

    def backoff(self, where: str, exc: Exception, delay: float) -> tuple[float, float]:
        """How long the loop ``where`` waits after ``exc``, and its next fallback delay: a
        Redis fault's backoff (told once per kind, :meth:`failed`); another ZtqError waits
        ``delay``, doubling up to 5 s (told each time); any other error is raised (a bug:
        the caller's crash handling)."""
        wait = self.failed(where, exc)
        if wait is not None:
            return wait, delay
        if not isinstance(exc, ZtqError):
            raise exc
        log.warning("%s: %s; retrying in %.1fs", where, exc, delay)
        return delay, min(delay * 2, 5.0)

    def ok(self, where: str) -> None:
        """A call of ``where`` went through: the end of its fault, if it was in one."""
        if where not in self.active:  # the hot path: no lock
            return
        with self.lock:
            fault = self.active.pop(where, None)
        if fault is not None:
            log.warning("%s: Redis takes its calls again, after %.1f s (%d failed: %s)",
                        where, time.monotonic() - fault.since, fault.calls, fault.text)  # fmt: skip

    def forget(self, where: str) -> None:
        """``where`` ended (a retired executor): its fault is no reason to be unready."""
        with self.lock:
            self.active.pop(where, None)

    def reason(self) -> str | None:
        """Why the worker is not ready, from the longest fault now: Redis's words, which
        thread and since when; ``None`` when no thread is in one."""
        with self.lock:
            if not self.active:
                return None
            where, fault = min(self.active.items(), key=lambda item: item[1].since)
            others = len(self.active) - 1
        age = time.monotonic() - fault.since
        more = f" and {others} other thread{'s' if others > 1 else ''}" if others else ""
        return f"{fault.text} ({where}{more}, for {age:.0f} s)"

    def metrics(self) -> str:
        """The worker's ``/metrics`` (Prometheus text)."""
        with self.lock:
            counts = dict(self.counts)
            faulty = len(self.active)
        lines = [
            "# HELP ztq_worker_redis_errors_total Redis calls of this worker that failed, "
            "by kind of fault.",
            "# TYPE ztq_worker_redis_errors_total counter",
            *(f'ztq_worker_redis_errors_total{{kind="{k}"}} {counts.get(k, 0)}' for k in KINDS),
            "# HELP ztq_worker_redis_data_lost_total Times this worker found Redis back "
            "without its data (restarted empty, flushed or replaced).",
            "# TYPE ztq_worker_redis_data_lost_total counter",
            f"ztq_worker_redis_data_lost_total {self.data_lost}",
            "# HELP ztq_worker_redis_faulty_threads Threads of this worker whose Redis calls "
            "fail now.",
            "# TYPE ztq_worker_redis_faulty_threads gauge",
            f"ztq_worker_redis_faulty_threads {faulty}",
        ]
        return "\n".join(lines) + "\n"


@contextlib.contextmanager
def best_effort() -> Iterator[None]:
    """A write that may be lost (a stopping worker's last heartbeat and event): a Redis
    fault, or any ztq error, ends it quietly."""
    try:
        yield
    except Exception as exc:
        if kind(exc) is None and not isinstance(exc, ZtqError):
            raise


class Deferred:
    """Writes that wait until Redis takes writes (a worker started under a full Redis):
    tried in order, each at most once per :meth:`retry`; one that fails stops the round."""

    def __init__(self, faults: Faults) -> None:
        self.faults = faults
        self.lock = threading.Lock()
        self.todo: list[tuple[str, Callable[[], object]]] = []

    def attempt(self, what: str, write: Callable[[], object], *, always: bool = False) -> bool:
        """Write now; when Redis answers with a refusal (full, read-only, loading), or with
        ``always`` when it does not answer either, keep the write for :meth:`retry` and
        return False. Any other error is raised."""
        try:
            write()
        except Exception as exc:
            k = kind(exc)
            if k is None or (k in UNANSWERED and not always):
                raise
            self.faults.failed(WHERE, exc)
            with self.lock:
                self.todo.append((what, write))
            return False
        return True

    def retry(self) -> None:
        """Write what waits, oldest first; a failure is raised (the main loop's fault)."""
        while True:
            with self.lock:
                if not self.todo:
                    return
                what, write = self.todo[0]
            write()
            left = 1
            with self.lock:
                if self.todo and self.todo[0][1] is write:
                    self.todo.pop(0)
                    left = len(self.todo)
            if not left:
                self.faults.ok(WHERE)
            log.info("written now that Redis takes writes: %s", what)
