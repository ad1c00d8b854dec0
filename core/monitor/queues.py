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

from ztq.core.engine.keys import split_shard
from ztq.core.engine.queue_limits import QueueLimits
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

    @property
    def pending(self) -> int:
        return sum(self.ready.values())

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
    )  # fmt: skip


def folded_stats(
    storage: Storage, queues: Sequence[str] | None = None, *, minutes: int = 60, now: float = 0.0
) -> list[QueueStats]:
    """:func:`queue_stats` with each sharded queue as one queue, its shards folded in
    (``queues``: names of queues or of shards, each standing for its queue; default: all)."""
    known = storage.queues()
    names = [split_shard(q)[0] for q in (known if queues is None else queues)]
    groups = {q: storage.shards_of(q, known) for q in dict.fromkeys(names)}
    stats = queue_stats(storage, [s for g in groups.values() for s in g], minutes=minutes, now=now)
    by_name = {s.name: s for s in stats}
    return [fold(q, [by_name[s] for s in shards]) for q, shards in groups.items()]


# -- queues ----------------------------------------------------------------------------------
def queue_exists(storage: Storage, queue: str) -> bool:
    with storage.guard():
        return bool(storage.client.sismember(storage.keys.queues, queue))


def queue_stats(
    storage: Storage, queues: Sequence[str] | None = None, *, minutes: int = 60, now: float = 0.0
) -> list[QueueStats]:
    """Counts, head age, error times, per-minute throughput and the waiting and run times of
    the last ``minutes`` of each queue (2 round trips)."""
    names = list(storage.queues() if queues is None else queues)
    k = storage.keys
    this_minute = int((now or time.time()) // 60)
    span = list(range(this_minute - minutes + 1, this_minute + 1))
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        for q in names:
            for p in PRIORITIES:
                pipe.llen(k.ready(q, p))
                pipe.lindex(k.ready(q, p), 0)
            pipe.hmget(k.tasks(q), LEFTOVER_COUNTS)
            pipe.zcard(k.delayed(q))
            pipe.zcard(k.running(q))
            pipe.zcard(k.errors(q))
            pipe.exists(k.paused(q))
            pipe.zrange(k.errors(q), 0, 0, withscores=True)
            pipe.zrange(k.errors(q), -1, -1, withscores=True)
            pipe.llen(k.overflow(q))
            pipe.hgetall(k.config(q))
            pipe.hgetall(k.rate(q))
            for minute in span:
                pipe.hgetall(k.stats(q, minute))
        replies = iter(pipe.execute())
    out: list[QueueStats] = []
    heads: list[tuple[str, str]] = []
    for q in names:
        ready: dict[str, int] = {}
        for p in PRIORITIES:
            ready[str(p)] = int(next(replies))
            head = next(replies)
            if head is not None:  # a leftover at the head: its record says so (below)
                heads.append((q, entry_id(head)))
        left = dict(zip(LISTS, (int(n or 0) for n in next(replies)), strict=True))
        ready = {p: n - left[p] for p, n in ready.items()}
        delayed, running, errors, paused = (int(next(replies)) for _ in range(4))
        first, last = next(replies), next(replies)
        overflow = int(next(replies)) - left["overflow"]
        limits = QueueLimits.from_hash(next(replies))
        rate_state = {str(f): str(v) for f, v in (next(replies) or {}).items()}
        chart, window = [], timings.Slot(0)
        for minute in span:
            slot = timings.parse(minute * 60, next(replies))
            chart.append((minute, slot.done, slot.failed))
            window.add(slot)
        errs = (int(first[0][1]) if first else None, int(last[0][1]) if last else None)
        out.append(QueueStats(q, ready, delayed, running, errors, bool(paused), None, *errs,
                              chart, window, [], overflow, limits))  # fmt: skip
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
    with storage.guard():
        secs, micros = storage.client.time()
    return int(secs) * 1000 + int(micros) // 1000


def pressure_totals(storage: Storage, queues: Sequence[str]) -> dict[str, tuple[int, int, int]]:
    """Per queue, since it began: enqueue attempts refused by a full queue (a blocked
    producer counts each try), tasks that went to its overflow buffer, and fetches its rate
    limit held back (1 round trip)."""
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        for q in queues:
            pipe.hmget(storage.keys.totals(q), "refused", "overflowed", "throttled")
        replies = pipe.execute()
    return {q: (int(r[0] or 0), int(r[1] or 0), int(r[2] or 0))
            for q, r in zip(queues, replies, strict=True)}  # fmt: skip


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
    storage: Storage, queue: str, offset: int, limit: int, *, budget: int = 1000
) -> Page:
    """Tasks waiting in one queue, in run order: the ready lists (high, normal, low; FIFO
    within a level), then the overflow buffer (priority "overflow": they enter the ready
    lists in this order as the queue drains).

    ``offset`` and ``next`` count list entries, leftovers included, and so does a row's
    ``position`` (leftovers ahead of a task are dropped by the next fetch that meets them);
    ``total`` counts tasks. Leftovers are skipped: a page reads at most ``limit + budget``
    entries, so a run of them makes a page ``partial`` (with a ``next``), never slow."""
    k = storage.keys
    limit, offset = clamp(limit), max(0, int(offset))
    keys = [k.ready(queue, p) for p in PRIORITIES] + [k.overflow(queue)]
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        for key in keys:
            pipe.llen(key)
        pipe.hmget(k.tasks(queue), LEFTOVER_COUNTS)
        *lengths, left = pipe.execute()
    counts = [int(n) for n in lengths]
    marked = {name for name, n in zip(LISTS, left, strict=True) if int(n or 0) > 0}
    rows: list[Row] = []
    position, scanned = offset, 0
    while len(rows) < limit and scanned < limit + budget and position < sum(counts):
        window = _entries(storage, keys, counts, position, min(limit - len(rows), 500))
        position += len(window)
        scanned += len(window)
        rows += _live(storage, queue, window, marked)
    nxt = str(position) if position < sum(counts) else None
    return Page(rows, nxt, scanned, partial=nxt is not None and len(rows) < limit,
                total=sum(counts) - sum(int(n or 0) for n in left))  # fmt: skip


def _entries(
    storage: Storage, keys: list[str], counts: list[int], start: int, want: int
) -> list[tuple[str, int, str]]:
    """(list, position, entry) of ``want`` entries from ``start``, across the lists in order."""
    plan: list[tuple[str, int]] = []
    first = start
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        for name, key, n in zip(LISTS, keys, counts, strict=True):
            if want <= 0:
                break
            if start >= n:
                start -= n
                continue
            take = min(want, n - start)
            pipe.lrange(key, start, start + take - 1)
            plan.append((name, take))
            want -= take
            start = 0
        windows = pipe.execute() if plan else []
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
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        pipe.hmget(storage.keys.tasks(queue), ids)
        pipe.hmget(storage.keys.tasks(queue), marks if marked else ["#"])
        raws, flags = pipe.execute()
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
    reply = storage.call(*storage.enqueue_op(queue, entries))
    return sum(1 for outcome in reply[1::2] if outcome == "moved")
