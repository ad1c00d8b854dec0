"""Waiting and run times per queue: the histograms that ack.lua and fail.lua count.

Every finished run (done, failed or retried) adds its *waiting time* (from when it was
ready, ``max(enqueued, due)``, to when a worker leased it) and its *run time* (from the
lease to the ack or failure, so a task's wait in its worker's prefetch buffer counts as run
time) to three stats hashes of its queue (see ``_lib.lua``): this minute's (kept 2 hours),
these five minutes' (kept 25 hours) and the totals. Memory is bounded: at most 102 small
fields per hash, 120 minute and 300 five-minute hashes per queue.

Bucket ``b`` counts times ``t`` (ms) with ``2**((b-1)/2) < t <= 2**(b/2)``: steps of
√2, so a percentile read from them is within about 20 % of the true one — enough to tell
10 ms from 100 ms from 1 s, which is what an operator looks for.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ztq.core.engine.read_models.queue_reads import stat_hashes
from ztq.core.engine.storage import Storage

BUCKETS = 49  # 0: <= 1 ms ... 47: <= 2**23.5 ms (3.3 h); 48: the rest
PROMETHEUS_EVERY = 4  # /metrics shows every 4th bound: 1 ms, 4 ms, 16 ms ... 4194 s


def bucket_of(ms: float) -> int:
    """The bucket of a time, as _lib.lua's time_bucket computes it."""
    if ms <= 1:
        return 0
    return min(BUCKETS - 1, math.ceil(2 * math.log(ms) / math.log(2) - 1e-9))


def upper_ms(bucket: int) -> float:
    """The largest time (ms) of a bucket; the last one has none."""
    return math.inf if bucket >= BUCKETS - 1 else 2 ** (bucket / 2)


@dataclass
class Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * BUCKETS)
    total_ms: int = 0

    @property
    def count(self) -> int:
        return sum(self.counts)

    def add(self, other: Histogram) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.total_ms += other.total_ms

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile (0..1) in ms, interpolated within its bucket; None if empty."""
        n = self.count
        if not n:
            return None
        rank = q * n
        seen = 0
        for b, c in enumerate(self.counts):
            if c and seen + c >= rank:
                low = 0.0 if b == 0 else 2 ** ((b - 1) / 2)
                if b == BUCKETS - 1:
                    return low
                high = upper_ms(b)
                part = (rank - seen) / c
                if low <= 0:
                    return high * part
                return float(low * (high / low) ** part)  # geometric: buckets grow by √2
            seen += c
        return upper_ms(BUCKETS - 2)

    def percentiles(self) -> dict[str, float | None]:
        return {name: self.quantile(q) for name, q in (("p50", 0.5), ("p95", 0.95),
                                                       ("p99", 0.99))}  # fmt: skip

    def cumulative(self, every: int = PROMETHEUS_EVERY) -> list[tuple[float, int]]:
        """(upper bound in seconds, runs at or below it) at every ``every``-th bound, then
        (inf, all): a Prometheus histogram's buckets."""
        out, running = [], 0
        for b, c in enumerate(self.counts[: BUCKETS - 1]):
            running += c
            if b % every == 0:
                out.append((upper_ms(b) / 1000, running))
        out.append((math.inf, self.count))
        return out


@dataclass
class Slot:
    """The runs that finished in one minute, five minutes, or ever."""

    start: int  # epoch seconds (0 for the totals)
    done: int = 0
    failed: int = 0
    expired: int = 0  # tasks not started before their expiry (not runs: no times)
    wait: Histogram = field(default_factory=Histogram)
    run: Histogram = field(default_factory=Histogram)

    def add(self, other: Slot) -> None:
        self.done += other.done
        self.failed += other.failed
        self.expired += other.expired
        self.wait.add(other.wait)
        self.run.add(other.run)


def parse(start: int, raw: Mapping[str, str]) -> Slot:
    """A stats hash as Redis returns it (HGETALL); unknown or odd fields are skipped."""
    slot = Slot(start)
    for key, value in raw.items():
        try:
            n = int(value)
        except (TypeError, ValueError):
            continue
        if key in ("done", "failed", "expired"):
            setattr(slot, key, n)
        elif key in ("wsum", "rsum"):
            (slot.wait if key == "wsum" else slot.run).total_ms = n
        elif key[:1] in ("w", "r") and key[1:].isdigit() and int(key[1:]) < BUCKETS:
            (slot.wait if key[0] == "w" else slot.run).counts[int(key[1:])] = n
    return slot


def merged(slots: Iterable[Slot]) -> Slot:
    out = Slot(0)
    for s in slots:
        out.add(s)
    return out


def summary(slot: Slot) -> dict[str, dict[str, float | None]]:
    """What the console and /api show: waiting and run time percentiles (ms)."""
    return {"wait_ms": slot.wait.percentiles(), "run_ms": slot.run.percentiles()}


def day_slots(
    storage: Storage, queue: str | Sequence[str], hours: int = 24, now: float = 0.0
) -> list[Slot]:
    """Five-minute slots of the last ``hours``, oldest first (one round trip); ``queue``
    may be the shards of a queue, added up."""
    shards = [queue] if isinstance(queue, str) else list(queue)
    this = int((now or time.time()) // 300)
    starts = list(range(this - hours * 12 + 1, this + 1))
    raws = iter(stat_hashes(storage, [storage.keys.stats5(q, n) for n in starts for q in shards]))
    out = []
    for n in starts:
        slot = Slot(n * 300)
        for _ in shards:
            slot.add(parse(n * 300, next(raws)))
        out.append(slot)
    return out


def totals(storage: Storage, queues: Iterable[str]) -> dict[str, Slot]:
    """Every queue's runs since it began (for /metrics; two round trips), the shards of a
    sharded queue added up under its name."""
    known = storage.queues.names()
    groups = {q: storage.queues.shards_of(q, known) for q in queues}
    keys = [storage.keys.totals(q) for shards in groups.values() for q in shards]
    raws = iter(stat_hashes(storage, keys))
    out: dict[str, Slot] = {}
    for q, shards in groups.items():
        out[q] = Slot(0)
        for _ in shards:
            out[q].add(parse(0, next(raws)))
    return out
