"""Read models for the console: queue stats and the page of a queue's waiting tasks.

Every function reads a window (LRANGE, HMGET of one page of records), never a whole queue,
so a page costs the same with ten tasks or ten million. The rest of the console's read
models live next door and are imported here, so that ``monitor.<name>`` keeps naming them
all: rows, pages, cursors and the listings merged across queues in ``pages``, lookup and
search in ``search``, the cron table in ``cron``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ztq.core.engine.keys import split_shard
from ztq.core.engine.queue_limits import QueueLimits
from ztq.core.engine.read_models import queue_reads as reads
from ztq.core.engine.read_models.task_reads import (
    key_list_lengths,
    list_lengths,
    list_windows,
    records_and_marks,
)
from ztq.core.engine.record import TaskRecord
from ztq.core.engine.storage import EnqueueEntry, Storage
from ztq.core.monitor import timings
from ztq.core.monitor.cron import cron_table
from ztq.core.monitor.pages import (
    MAX_PAGE,
    Match,
    Page,
    Row,
    ZCursor,
    clamp,
    fetch_records,
    merge_windows,
    oldest_errors,
    running_tasks,
    score_page,
)
from ztq.core.monitor.search import find_task, search
from ztq.core.states import PRIORITIES

__all__ = [
    "LEFTOVER_COUNTS",
    "LISTS",
    "MAX_PAGE",
    "Match",
    "Page",
    "QueueStats",
    "Row",
    "ZCursor",
    "clamp",
    "cron_table",
    "entry_id",
    "fetch_records",
    "find_task",
    "fold",
    "folded_stats",
    "merge_windows",
    "oldest_errors",
    "pending_page",
    "pressure_totals",
    "redis_memory",
    "queue_exists",
    "queue_stats",
    "run_first",
    "running_tasks",
    "score_page",
    "search",
]


@dataclass
class QueueStats:
    name: str
    ready: dict[str, int]
    delayed: int
    running: int
    errors: int
    paused: bool
    head_enqueued: int | None  # enqueued (ms) of the oldest task at the head of a ready list
    first_error: int | None
    last_error: int | None
    throughput: list[tuple[int, int, int]] = field(default_factory=list)  # (minute, done, failed)
    window: timings.Slot = field(default_factory=lambda: timings.Slot(0))  # runs of the window
    shards: list[str] = field(default_factory=list)  # a folded queue's shards ([] when none)
    overflow: int = 0  # tasks in the overflow buffer (``when_full = buffer``)
    limits: QueueLimits = field(default_factory=QueueLimits)  # max_running, max_pending, ...
    rate_held: int = 0  # ready tasks the rate limit holds back now (no token for them)
    keyed: int = 0  # ready tasks waiting in their keys' lists (docs/queue-controls.md)

    @property
    def pending(self) -> int:
        return sum(self.ready.values()) + self.keyed

    @property
    def full(self) -> bool:
        """The queue holds ``max_pending`` tasks waiting: new ones are refused, wait for room
        or go to the overflow buffer, as its ``when_full`` says."""
        limit = self.limits.max_pending
        return limit is not None and self.pending >= limit


def fold(name: str, parts: Sequence[QueueStats]) -> QueueStats:
    """One queue's stats from its shards' (counts and times added; paused if any is)."""
    if len(parts) == 1 and parts[0].name == name:
        return parts[0]

    def pick(values: Iterable[int | None], best: Callable[..., int]) -> int | None:
        found = [v for v in values if v is not None]
        return best(found) if found else None

    ready = {p: sum(s.ready.get(p, 0) for s in parts) for p in map(str, PRIORITIES)}
    chart = [
        (minute, sum(s.throughput[i][1] for s in parts), sum(s.throughput[i][2] for s in parts))
        for i, (minute, _, _) in enumerate(parts[0].throughput)
    ]
    window = timings.Slot(0)
    for s in parts:
        window.add(s.window)
    return QueueStats(
        name, ready, sum(s.delayed for s in parts), sum(s.running for s in parts),
        sum(s.errors for s in parts), any(s.paused for s in parts),
        pick((s.head_enqueued for s in parts), min), pick((s.first_error for s in parts), min),
        pick((s.last_error for s in parts), max), chart, window, [s.name for s in parts],
        sum(s.overflow for s in parts), rate_held=sum(s.rate_held for s in parts),
        keyed=sum(s.keyed for s in parts),
    )  # fmt: skip


def folded_stats(
    storage: Storage, queues: Sequence[str] | None = None, *, minutes: int = 60, now: float = 0.0
) -> list[QueueStats]:
    """:func:`queue_stats` with each sharded queue as one queue, its shards folded in
    (``queues``: names of queues or of shards, each standing for its queue; default: all)."""
    known = storage.queues.names()
    names = [split_shard(q)[0] for q in (known if queues is None else queues)]
    groups = {q: storage.queues.shards_of(q, known) for q in dict.fromkeys(names)}
    stats = queue_stats(storage, [s for g in groups.values() for s in g], minutes=minutes, now=now)
    by_name = {s.name: s for s in stats}
    return [fold(q, [by_name[s] for s in shards]) for q, shards in groups.items()]


# -- queues ----------------------------------------------------------------------------------
def queue_exists(storage: Storage, queue: str) -> bool:
    return reads.queue_known(storage, queue)


def queue_stats(
    storage: Storage, queues: Sequence[str] | None = None, *, minutes: int = 60, now: float = 0.0
) -> list[QueueStats]:
    """Counts, head age, error times, per-minute throughput and the waiting and run times of
    the last ``minutes`` of each queue (2 round trips)."""
    names = list(storage.queues.names() if queues is None else queues)
    this_minute = int((now or time.time()) // 60)
    span = list(range(this_minute - minutes + 1, this_minute + 1))
    out: list[QueueStats] = []
    heads: list[tuple[str, str]] = []
    counted = [*LEFTOVER_COUNTS, "#keyed"]  # and the tasks waiting in keyed lists
    for q, r in zip(names, reads.queue_reads(storage, names, counted, span), strict=True):
        ready = {str(p): n for p, n in zip(PRIORITIES, r.ready, strict=True)}
        # a leftover at the head: its record says so (below)
        heads += [(q, entry_id(head)) for head in r.heads if head is not None]
        left = dict(zip(LISTS, (int(n or 0) for n in r.leftovers[:-1]), strict=True))
        ready = {p: n - left[p] for p, n in ready.items()}
        first, last = r.first_error, r.last_error
        overflow = r.overflow - left["overflow"]
        limits = QueueLimits.from_hash(r.config)
        rate_state = {str(f): str(v) for f, v in r.rate.items()}
        chart, window = [], timings.Slot(0)
        for minute, raw in zip(span, r.minutes, strict=True):
            slot = timings.parse(minute * 60, raw)
            chart.append((minute, slot.done, slot.failed))
            window.add(slot)
        errs = (int(first[0][1]) if first else None, int(last[0][1]) if last else None)
        out.append(QueueStats(q, ready, r.delayed, r.running, r.errors, bool(r.paused), None,
                              *errs, chart, window, [], overflow, limits,
                              keyed=int(r.leftovers[-1] or 0)))  # fmt: skip
        if limits.rate_limit is not None or limits.task_rates:
            now_ms = redis_now(storage)
            out[-1].rate_held = limits.rate_held(sum(ready.values()), rate_state, now_ms)
    by_name = {s.name: s for s in out}
    for (q, _), rec in zip(heads, fetch_records(storage, heads), strict=True):
        enq = rec.get("enqueued") if rec and rec.state.value == "queued" else None
        if isinstance(enq, (int, float)):
            cur = by_name[q].head_enqueued
            by_name[q].head_enqueued = int(enq) if cur is None else min(cur, int(enq))
    return out


def redis_now(storage: Storage) -> int:
    """Redis's clock (ms): what a rate limit's tokens are counted on."""
    return reads.redis_time_ms(storage)


PRESSURE = ("refused", "overflowed", "throttled", "oom_compact", "oom_dropped")


def pressure_totals(storage: Storage, queues: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """Per queue, since it began, the counts of :data:`PRESSURE`: enqueue attempts refused
    by a full queue (a blocked producer counts each try), tasks that went to its overflow
    buffer, fetches its rate limit held back, and under a full Redis the ends kept compact
    and the finished records dropped early (docs/design.md, "A full Redis"). 1 round trip."""
    replies = reads.total_counts(storage, queues, PRESSURE)
    return {q: tuple(int(x or 0) for x in r) for q, r in zip(queues, replies, strict=True)}


MEMORY_WARN = 0.8  # share of maxmemory from which `ztq info` and the console warn


def redis_memory(storage: Storage, queues: Sequence[str]) -> dict[str, Any]:
    """Redis's memory against its limit (docs/deploy.md, "Sizing Redis"): ``used`` and
    ``maxmemory`` bytes (0: no limit), ``finished``: about the bytes finished records hold
    (per queue, its kept records x the average record of its tasks hash by ``MEMORY
    USAGE``'s sampling, plus the ``done`` index), what yielded under maxmemory since each
    queue began (``oom_compact``, ``oom_dropped``: docs/design.md, "A full Redis"), and
    ``warning``: a sentence from 80% of maxmemory, else ''. 2 round trips."""
    info, replies = reads.memory_reads(storage, queues)
    used, limit = int(info["used_memory"]), int(info.get("maxmemory", 0))
    finished = compact = dropped = 0
    for i in range(0, len(replies), 5):
        kept, records, size, index, (c, d) = replies[i : i + 5]
        finished += int(kept * (size or 0) / records) + (index or 0) if records else 0
        compact, dropped = compact + int(c or 0), dropped + int(d or 0)
    warning = ""
    if limit and used >= MEMORY_WARN * limit:
        warning = (f"Redis uses {used / limit:.0%} of its maxmemory, finished records about "
                   f"{finished / used:.0%} of it: shorten result_ttl or raise maxmemory "
                   "(docs/deploy.md, Sizing Redis)")  # fmt: skip
    return {"used": used, "maxmemory": limit, "finished": finished,
            "oom_compact": compact, "oom_dropped": dropped, "warning": warning}  # fmt: skip


# The lists a queue's waiting tasks are in, in run order, and the fields of its tasks hash
# that count each list's leftovers: entries of deleted or moved tasks left in place (no LREM)
# and marked ``#<list>:<entry>``; a fetch or a purge drops them (see _lib.lua, docs/design.md).
LISTS = (*map(str, PRIORITIES), "overflow")
LEFTOVER_COUNTS = [f"#{name}" for name in LISTS]


def entry_id(entry: str) -> str:
    """The task id of a list entry: ``<id>`` or ``<id>#<n>`` (an id pushed where a leftover
    of it was still waiting)."""
    return entry.partition("#")[0]


def pending_page(
    storage: Storage,
    queue: str,
    offset: int,
    limit: int,
    *,
    key: str | None = None,
    budget: int = 1000,
) -> Page:
    """Tasks waiting in one queue, in run order: the ready lists (high, normal, low; FIFO
    within a level), then the overflow buffer (priority "overflow": they enter the ready
    lists in this order as the queue drains). With ``key``: that key's tasks instead, in
    the order its turns take them (its lists by level, ``_keyed.lua``); keyed tasks are
    never in the plain lists.

    ``offset`` and ``next`` count list entries, leftovers included, and so does a row's
    ``position`` (leftovers ahead of a task are dropped by the next fetch that meets them);
    ``total`` counts tasks. Leftovers are skipped: a page reads at most ``limit + budget``
    entries, so a run of them makes a page ``partial`` (with a ``next``), never slow."""
    k = storage.keys
    limit, offset = clamp(limit), max(0, int(offset))
    if key is None:
        names: Sequence[str] = LISTS
        keys = [k.ready(queue, p) for p in PRIORITIES] + [k.overflow(queue)]
        counts, left = list_lengths(storage, keys, queue, LEFTOVER_COUNTS)
        marked = {name for name, n in zip(LISTS, left, strict=True) if int(n or 0) > 0}
        total = sum(counts) - sum(int(n or 0) for n in left)
    else:  # a key's entries are unique (`<id>#k<n>`): a leftover is told by its record
        names, marked = tuple(map(str, PRIORITIES)), set()
        keys = [k.key_ready(queue, p, key) for p in PRIORITIES]
        counts, total = key_list_lengths(storage, queue, key)
    rows: list[Row] = []
    position, scanned = offset, 0
    while len(rows) < limit and scanned < limit + budget and position < sum(counts):
        window = _entries(storage, names, keys, counts, position, min(limit - len(rows), 500))
        position += len(window)
        scanned += len(window)
        rows += _live(storage, queue, window, marked)
    nxt = str(position) if position < sum(counts) else None
    return Page(rows, nxt, scanned, partial=nxt is not None and len(rows) < limit, total=total)


def _entries(
    storage: Storage,
    names: Sequence[str],
    keys: list[str],
    counts: list[int],
    start: int,
    want: int,
) -> list[tuple[str, int, str]]:
    """(list, position, entry) of ``want`` entries from ``start``, across the lists in order."""
    plan: list[tuple[str, int]] = []
    ranges: list[tuple[str, int, int]] = []
    first = start
    for name, key, n in zip(names, keys, counts, strict=True):
        if want <= 0:
            break
        if start >= n:
            start -= n
            continue
        take = min(want, n - start)
        ranges.append((key, start, start + take - 1))
        plan.append((name, take))
        want -= take
        start = 0
    windows = list_windows(storage, ranges)
    out: list[tuple[str, int, str]] = []
    for (name, _), entries in zip(plan, windows, strict=True):
        out += [(name, first + len(out) + n, entry) for n, entry in enumerate(entries)]
    return out


def _live(
    storage: Storage, queue: str, window: list[tuple[str, int, str]], marked: set[str]
) -> list[Row]:
    """The rows of the entries that are live (what a fetch would take: see ``popped`` in
    _lib.lua): not marked as leftovers, and the entry of a record waiting in that list."""
    if not window:
        return []
    ids = [entry_id(entry) for _, _, entry in window]
    marks = [f"#{name}:{entry}" for name, _, entry in window]
    raws, flags = records_and_marks(storage, queue, ids, marks if marked else ["#"])
    rows = []
    for n, ((name, pos, entry), i, raw) in enumerate(zip(window, ids, raws, strict=True)):
        if raw is None or (marked and flags[n] is not None):
            continue
        rec = TaskRecord.from_raw(queue, i, raw)
        want = "overflow" if name == "overflow" else "queued"
        same_list = name == "overflow" or rec.priority == name
        if rec.state.value == want and same_list and (rec.get("entry") or i) == entry:
            rows.append(Row(queue, i, rec, position=pos, priority=name))
    return rows


# -- writes the console needs beyond Storage's ------------------------------------------------
def run_first(storage: Storage, queue: str, ids: Sequence[str]) -> int:
    """Move pending (queued or delayed) tasks to the head of their ready list, in one round
    trip; the first id given runs first. Returns how many were moved."""
    recs = fetch_records(storage, [(queue, i) for i in ids])
    entries = [
        EnqueueEntry(r.id, r.payload_text, r.priority, first=True)
        for r in reversed([r for r in recs if r is not None])
        if r.state.value in ("queued", "overflow", "delayed")
    ]
    if not entries:
        return 0
    reply = storage.call(*storage.tasks.enqueue_op(queue, entries))
    return sum(1 for outcome in reply[1::2] if outcome == "moved")
