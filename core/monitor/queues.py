"""Read models for the console: queue stats, pages of tasks and errors, search.

Every function reads a window (LRANGE / ZRANGEBYSCORE / XREVRANGE with a limit, HMGET of
one page of records), never a whole queue, so a page costs the same with ten tasks or ten
million. Listings across queues are merged in Python from one window per queue, and paged
with cursors (:class:`ZCursor`; for streams see ``ztq.core.monitor.streams``) rather than offsets.
Filtered listings scan at most ``budget`` entries per request and say where they stopped.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ztq.core.engine.keys import split_shard
from ztq.core.engine.queue_limits import QueueLimits
from ztq.core.engine.record import TaskRecord
from ztq.core.engine.storage import EnqueueEntry, Storage
from ztq.core.monitor import timings
from ztq.core.states import PRIORITIES

MAX_PAGE = 500
_ZCURSOR = re.compile(r"^(-?\d{1,16})\.(\d{1,9})$")

Match = Callable[[TaskRecord], bool]


@dataclass(frozen=True)
class ZCursor:
    """A position in scores merged across queues: after ``skip`` entries scored ``score``."""

    score: int
    skip: int

    def __str__(self) -> str:
        return f"{self.score}.{self.skip}"

    @classmethod
    def parse(cls, text: str | None) -> ZCursor | None:
        m = _ZCURSOR.match(text or "")
        return cls(int(m.group(1)), int(m.group(2))) if m else None


@dataclass
class Row:
    """One task in a listing; ``record`` is None when its record is gone (a leftover id)."""

    queue: str
    id: str
    record: TaskRecord | None
    score: int | None = None  # failed at / due at / lease deadline (ms), by listing
    position: int | None = None
    priority: str = ""


@dataclass
class Page:
    rows: list[Any]
    next: str | None = None  # cursor of the next page, None on the last one
    scanned: int = 0
    partial: bool = False  # the scan budget ran out before the page filled
    total: int | None = None


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
        sum(s.overflow for s in parts),
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


def clamp(limit: int, low: int = 1, high: int = MAX_PAGE) -> int:
    return max(low, min(high, int(limit)))


def fetch_records(storage: Storage, pairs: Sequence[tuple[str, str]]) -> list[TaskRecord | None]:
    """Records of (queue, id) pairs: one HMGET per queue, all in one round trip."""
    by_queue: dict[str, list[str]] = {}
    for q, i in pairs:
        by_queue.setdefault(q, []).append(i)
    if not by_queue:
        return []
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        for q, ids in by_queue.items():
            pipe.hmget(storage.keys.tasks(q), ids)
        replies = pipe.execute()
    found: dict[tuple[str, str], TaskRecord | None] = {}
    for (q, ids), raws in zip(by_queue.items(), replies, strict=True):
        for i, raw in zip(ids, raws, strict=True):
            found[(q, i)] = None if raw is None else TaskRecord.from_raw(q, i, raw)
    return [found[p] for p in pairs]


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
        chart, window = [], timings.Slot(0)
        for minute in span:
            slot = timings.parse(minute * 60, next(replies))
            chart.append((minute, slot.done, slot.failed))
            window.add(slot)
        errs = (int(first[0][1]) if first else None, int(last[0][1]) if last else None)
        out.append(QueueStats(q, ready, delayed, running, errors, bool(paused), None, *errs,
                              chart, window, [], overflow, limits))  # fmt: skip
    by_name = {s.name: s for s in out}
    for (q, _), rec in zip(heads, fetch_records(storage, heads), strict=True):
        enq = rec.get("enqueued") if rec and rec.state.value == "queued" else None
        if isinstance(enq, (int, float)):
            cur = by_name[q].head_enqueued
            by_name[q].head_enqueued = int(enq) if cur is None else min(cur, int(enq))
    return out


def pressure_totals(storage: Storage, queues: Sequence[str]) -> dict[str, tuple[int, int]]:
    """Per queue, since it began: enqueue attempts refused by a full queue (a blocked
    producer counts each try) and tasks that went to its overflow buffer (1 round trip)."""
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        for q in queues:
            pipe.hmget(storage.keys.totals(q), "refused", "overflowed")
        replies = pipe.execute()
    return {q: (int(r[0] or 0), int(r[1] or 0)) for q, r in zip(queues, replies, strict=True)}


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


# -- listings merged across queues ----------------------------------------------------------
# Each queue's set or stream is read in windows, the windows are merged lazily (k-way), and a
# queue is read again only when its window is used up: a page costs about one window per
# queue plus what it shows, however many queues and entries there are.
def merge_windows(
    heads: dict[str, deque[Any]], refill: Callable[[list[str]], None], order: Callable[..., Any]
) -> Iterator[tuple[str, Any]]:
    done: set[str] = set()
    while True:
        empty = [q for q, buf in heads.items() if not buf and q not in done]
        if empty:
            refill(empty)
            done.update(q for q in empty if not heads[q])
        live = [q for q, buf in heads.items() if buf]
        if not live:
            return
        q = min(live, key=lambda name: order(heads[name][0], name))
        yield q, heads[q].popleft()


def _zset_items(
    storage: Storage, keys: dict[str, str], cursor: ZCursor | None, reverse: bool, chunk: int
) -> Iterator[tuple[str, str, int, ZCursor]]:
    """(queue, id, score, cursor after it) in merged order: score, then queue name, then
    Redis' order within the queue. ``cursor.skip`` entries at ``cursor.score`` are skipped."""
    # per queue: the last score read and how many entries with that score were read
    last: dict[str, list[Any]] = {q: [cursor.score if cursor else None, 0] for q in keys}
    heads: dict[str, deque[tuple[str, int]]] = {q: deque() for q in keys}
    extra = [cursor.skip if cursor else 0]
    finished: set[str] = set()

    def refill(queues: list[str]) -> None:
        queues = [q for q in queues if q not in finished]
        want = chunk + extra[0]
        extra[0] = 0
        with storage.guard():
            pipe = storage.client.pipeline(transaction=False)
            for q in queues:
                score, seen = last[q]
                if reverse:
                    top = "+inf" if score is None else score
                    pipe.zrevrangebyscore(
                        keys[q], top, "-inf", start=seen, num=want, withscores=True
                    )
                else:
                    low = "-inf" if score is None else score
                    pipe.zrangebyscore(keys[q], low, "+inf", start=seen, num=want, withscores=True)
            replies = pipe.execute() if queues else []
        for q, reply in zip(queues, replies, strict=True):
            if len(reply) < want:
                finished.add(q)
            for member, raw in reply:
                score = int(raw)
                last[q] = [score, last[q][1] + 1] if score == last[q][0] else [score, 1]
                heads[q].append((member, score))

    def order(head: tuple[str, int], q: str) -> tuple[int, str]:
        return (-head[1] if reverse else head[1], q)

    items = merge_windows(heads, refill, order)
    cur = cursor
    if cursor is not None:  # entries at the cursor's score that earlier pages showed
        refill(list(keys))
        for _ in range(cursor.skip):
            live = [q for q in keys if heads[q]]
            best = min(live, key=lambda q: order(heads[q][0], q)) if live else None
            if best is None or heads[best][0][1] != cursor.score:
                break
            heads[best].popleft()
    for q, (member, score) in items:
        cur = ZCursor(score, cur.skip + 1 if cur and cur.score == score else 1)
        yield q, member, score, cur


def _collect(
    storage: Storage,
    items: Iterator[tuple[str, str, int, Any]],
    limit: int,
    match: Match | None,
    budget: int,
    batch: int,
) -> Page:
    rows: list[Row] = []
    scanned = 0
    while True:
        chunk = list(itertools.islice(items, batch))
        if not chunk:
            return Page(rows, None, scanned)
        recs = fetch_records(storage, [(q, i) for q, i, _, _ in chunk])
        for pos, ((q, i, score, after), rec) in enumerate(zip(chunk, recs, strict=True)):
            scanned += 1
            if match is None or (rec is not None and match(rec)):
                rows.append(Row(q, i, rec, score=score))
            full, spent = len(rows) >= limit, scanned >= budget
            if full or spent:
                more = pos + 1 < len(chunk) or next(items, None) is not None
                return Page(rows, str(after) if more else None, scanned, spent and not full)


def score_page(
    storage: Storage,
    which: str,
    queues: Sequence[str],
    cursor: str | None = None,
    limit: int = 50,
    *,
    match: Match | None = None,
    budget: int = 2000,
) -> Page:
    """Tasks of ``which`` set merged across ``queues``; ``total`` counts the set.

    ``'errors'``: failed tasks, newest first, ``score`` = failed at (ms). ``'delayed'``:
    delayed tasks and retries by due time, soonest first, ``score`` = due at (ms).
    """
    reverse = which == "errors"
    key_of = storage.keys.errors if reverse else storage.keys.delayed
    keys = {q: key_of(q) for q in sorted(queues)}
    limit = clamp(limit, high=10_000)
    batch = limit if match is None else 200
    budget = limit if match is None else max(budget, limit)
    items = _zset_items(storage, keys, ZCursor.parse(cursor), reverse, batch + 1)
    page = _collect(storage, items, limit, match, budget, batch)
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        for key in keys.values():
            pipe.zcard(key)
        page.total = sum(int(n) for n in pipe.execute())
    return page


def running_tasks(storage: Storage, queues: Sequence[str], limit: int = 500) -> list[Row]:
    """Leased tasks of each queue (at most ``limit`` per queue), soonest lease end first."""
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        for q in queues:
            pipe.zrange(storage.keys.running(q), 0, clamp(limit) - 1, withscores=True)
        replies = pipe.execute()
    items = [(q, i, int(s)) for q, reply in zip(queues, replies, strict=True) for i, s in reply]
    recs = fetch_records(storage, [(q, i) for q, i, _ in items])
    rows = [Row(q, i, rec, score=s) for (q, i, s), rec in zip(items, recs, strict=True)]
    rows.sort(key=lambda r: r.score or 0)
    return rows


def oldest_errors(storage: Storage, queue: str, offset: int, count: int) -> list[Row]:
    """A window of one queue's errors, oldest first (bulk actions walk it with an offset)."""
    with storage.guard():
        ids = storage.client.zrange(storage.keys.errors(queue), offset, offset + count - 1)
    recs = fetch_records(storage, [(queue, i) for i in ids])
    return [Row(queue, i, rec) for i, rec in zip(ids, recs, strict=True)]


# -- cron, lookup and search -----------------------------------------------------------------
def cron_table(storage: Storage) -> list[dict[str, Any]]:
    """Cron entries as workers published them (``disabled`` added), soonest next run first."""
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        pipe.hgetall(storage.keys.cron)
        pipe.hkeys(storage.keys.cron_off)
        raw, off = pipe.execute()
    out = []
    for name, text in raw.items():
        try:
            entry = json.loads(text)
        except ValueError:
            continue
        if isinstance(entry, dict):
            entry.setdefault("name", name)
            entry["disabled"] = name in off
            out.append(entry)
    return sorted(out, key=lambda e: (_when(e.get("next")), str(e["name"])))


def _when(value: Any) -> float:
    """A time to sort by: what a worker wrote (ms), else 0 (the hash is readable by anyone
    who shares the Redis; one odd entry must not make the whole table unreadable)."""
    try:
        number = float(value or 0)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return number if number == number else 0.0  # NaN sorts nowhere


def find_task(storage: Storage, task_id: str, queue: str | None = None) -> list[TaskRecord]:
    """Records with this id, in ``queue`` (each of its shards) or in every known queue."""
    queues = storage.shards_of(queue) if queue else storage.queues()
    recs = fetch_records(storage, [(q, task_id) for q in queues])
    return [r for r in recs if r is not None]


def search(
    storage: Storage,
    match: Match,
    cursor: str | None = None,
    limit: int = 50,
    *,
    budget: int = 2000,
) -> Page:
    """Records of any state that ``match``, walking each queue's records with HSCAN.

    The cursor is ``<queue index>.<HSCAN cursor>``; a page holds at most about ``limit``
    rows and scans at most about ``budget`` records.
    """
    queues = storage.queues()
    m = _ZCURSOR.match(cursor or "")
    qi, hc = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    rows: list[Row] = []
    scanned = 0
    may_match = getattr(match, "may_match", None)  # rules records out before parsing them
    while qi < len(queues) and scanned < budget and len(rows) < limit:
        q = queues[qi]
        with storage.guard():
            hc, batch = storage.client.hscan(storage.keys.tasks(q), hc, count=100)
        for i, raw in batch.items():
            if i.startswith("#"):  # the ready lists' leftover marks (pending_page)
                continue
            scanned += 1
            if may_match is not None and not may_match(i, raw):
                continue
            rec = TaskRecord.from_raw(q, i, raw)
            if match(rec):
                rows.append(Row(q, i, rec))
        if int(hc) == 0:
            qi, hc = qi + 1, 0
    nxt = f"{qi}.{hc}" if qi < len(queues) else None
    return Page(rows, nxt, scanned, partial=nxt is not None and len(rows) < limit)


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
