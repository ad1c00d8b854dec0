"""How each Redis system is doing, in one line: reachable, workers, queues, waiting, errors.

The console's overview of its systems (``/systems``) and ``ztq systems`` show the same
:class:`Health`. The systems themselves are settings (:func:`ztq.core.settings.systems`);
each is asked in a thread of its own, so one Redis that does not answer costs its own
connect timeout and retries, never the sum of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from typing import Any

from ztq.core.engine.storage import Storage, safe_url
from ztq.core.engine.workers import DEFAULT_LOST_AFTER
from ztq.core.errors import ZtqError
from ztq.core.monitor import queues as monitor
from ztq.core.monitor.workers import fleet
from ztq.core.settings import System

LIVE = ("running", "paused", "stopping", "other")


@dataclass(frozen=True)
class Health:
    """One system at a glance; the counts are 0 when ``reachable`` is False."""

    name: str
    redis: str  # the URL, passwords masked
    prefix: str
    default: bool
    reachable: bool
    problem: str = ""  # why it is not reachable
    workers: int = 0  # live: running, paused or stopping
    lost: int = 0
    queues: int = 0
    paused: int = 0  # queues paused
    waiting: int = 0  # ready to run
    delayed: int = 0
    running: int = 0
    errors: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def health(system: System, storage: Storage, lost_after: float = DEFAULT_LOST_AFTER) -> Health:
    """Ask ``storage`` (the system's) how it is doing: the workers' counts (2 round trips)
    and every queue's counts, shards folded (as the queues page reads them)."""
    unreachable = Health(
        name=system.name,
        redis=safe_url(system.redis_url),
        prefix=system.prefix,
        default=system.default,
        reachable=False,
    )
    try:
        counts = fleet(storage, lost_after).counts
        stats = monitor.folded_stats(storage, minutes=0)
    except ZtqError as exc:
        return replace(unreachable, problem=str(exc))
    return replace(
        unreachable,
        reachable=True,
        workers=sum(counts.get(s, 0) for s in LIVE),
        lost=counts.get("lost", 0),
        queues=len(stats),
        paused=sum(1 for s in stats if s.paused),
        waiting=sum(s.pending for s in stats),
        delayed=sum(s.delayed for s in stats),
        running=sum(s.running for s in stats),
        errors=sum(s.errors for s in stats),
    )


def health_of_all(
    systems: Sequence[System],
    storage_of: Callable[[System], Storage],
    lost_after: float = DEFAULT_LOST_AFTER,
) -> list[Health]:
    """:func:`health` of every system, asked at the same time, in the order given."""
    if not systems:
        return []

    def ask(system: System) -> Health:
        try:
            storage = storage_of(system)
        except ZtqError as exc:  # a URL the client refuses
            return Health(system.name, safe_url(system.redis_url), system.prefix,
                          system.default, reachable=False, problem=str(exc))  # fmt: skip
        return health(system, storage, lost_after)

    with ThreadPoolExecutor(max_workers=min(16, len(systems))) as pool:
        return list(pool.map(ask, systems))
