"""What a worker is configured to do: :class:`WorkerConfig`, with a :class:`ThreadSpec` per
executor thread and a :class:`ScaleSpec` per autoscaled queue."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ThreadSpec:
    """One executor: the queues it watches in order, and how it runs tasks."""

    name: str
    queues: tuple[str, ...]
    pool: str = "thread"  # "process": a killable child process slot; "async": an event loop
    concurrency: int = 1  # tasks in flight at once (an async pool's coroutines)
    shards: int = 1  # the queue's shard count, when the entry gives one (docs/scaling.md)
    fair: bool = False  # several queues: ask a different one first at each fetch (rotate)


@dataclass(frozen=True)
class ScaleSpec:
    """An autoscaled queue (``mail = 1..8``): between ``low`` and ``high`` threads (process
    slots; an async pool's tasks at once), as :mod:`ztq.worker.autoscale` decides. ``low``
    may be 0: the queue is served on demand."""

    queue: str
    low: int
    high: int
    pool: str = "thread"
    shards: int = 1

    def initial(self) -> list[ThreadSpec]:
        """The executors the worker starts with: the minimum."""
        if self.pool == "async":
            return [ThreadSpec(f"{self.queue}-0", (self.queue,), "async", self.low,
                               self.shards)] if self.low else []  # fmt: skip
        return [
            ThreadSpec(f"{self.queue}-{i}", (self.queue,), self.pool, 1, self.shards)
            for i in range(self.low)
        ]


@dataclass(frozen=True)
class WorkerConfig:
    redis_url: str = "redis://127.0.0.1:6379/0"
    prefix: str = "ztq"
    app: str = ""  # module:attribute of the App served; "" = the default app
    name: str = ""
    imports: tuple[str, ...] = ()
    threads: tuple[ThreadSpec, ...] = ()
    active_config: bool = True
    lease: float = 15.0  # seconds a fetched task is held without a heartbeat renewing it
    heartbeat: float = 3.0  # seconds between heartbeats (lease renewals, reaper, commands)
    max_lost: int = 3  # a task that lost its worker this often is a poison pill
    prefetch: int = 32  # most tasks one executor leases in one call (adaptive, see executor)
    result_ttl: float = 3600.0
    compact_finished: bool = False  # finished records keep state and times only (_lib.lua)
    history_maxlen: int = 10_000
    grace: float = 30.0  # seconds running tasks get to finish on SIGTERM
    idle_wait: float = 5.0  # longest block on the wake lists
    retry_backoff: float = 1.0  # seconds before the first retry; doubles per attempt
    burst: bool = False
    lost_after: float = 30.0
    health: str = ""  # PORT or HOST:PORT of /livez and /readyz (worker/health.py)
    scaled: tuple[ScaleSpec, ...] = ()  # autoscaled queues (their minimum is in ``threads``)
    broadcast_catch_up: float = 0.0  # seconds of older broadcasts a starting worker runs
    autoscale_cpu_max: float = 85.0  # host CPU % from which the autoscaler adds nothing
    autoscale_memory_max: float = 90.0  # host memory % from which it adds nothing, sheds one
    autoscale_threads_max: int = 0  # most threads of the autoscaled queues together; 0: no cap
    autoscale_idle_beats: int = 3  # heartbeats threads stay unneeded before they are let go

    @property
    def worker_id(self) -> str:
        return self.name or f"{socket.gethostname()}.{os.getpid()}"

    @property
    def queues(self) -> list[str]:
        seen: list[str] = []
        for spec in self.threads:
            for q in spec.queues:
                if q not in seen:
                    seen.append(q)
        return seen + [s.queue for s in self.scaled if s.queue not in seen]

    @property
    def shards(self) -> dict[str, int]:
        """The shard counts the ``[queues]`` entries give (``hot = 8 shards=3``)."""
        out: dict[str, int] = {}
        given = [(t.queues[0], t.shards) for t in self.threads]
        for queue, shards in given + [(s.queue, s.shards) for s in self.scaled]:
            if shards > 1:
                out[queue] = max(shards, out.get(queue, 1))
        return out

    def with_changes(self, **changes: object) -> WorkerConfig:
        return replace(self, **changes)  # type: ignore[arg-type]


# WorkerConfig fields that are not named like their setting
FIELD = {"modules": "imports"}
