"""Rows, pages and cursors of the console's task listings, and the listings merged across
queues: errors and delayed tasks by score, running tasks by lease end.

Every function reads a window (ZRANGEBYSCORE with a limit, HMGET of one page of records),
never a whole set, so a page costs the same with ten tasks or ten million. Listings across
queues are merged in Python from one window per queue, and paged with cursors
(:class:`ZCursor`; for streams see ``ztq.core.monitor.streams``) rather than offsets.
Filtered listings scan at most ``budget`` entries per request and say where they stopped.
"""

from __future__ import annotations

import itertools
import re
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ztq.core.engine.read_models import listing_reads, task_reads
from ztq.core.engine.record import TaskRecord
from ztq.core.engine.storage import Storage

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


def clamp(limit: int, low: int = 1, high: int = MAX_PAGE) -> int:
    return max(low, min(high, int(limit)))


def fetch_records(storage: Storage, pairs: Sequence[tuple[str, str]]) -> list[TaskRecord | None]:
    """Records of (queue, id) pairs: one HMGET per queue, all in one round trip."""
    by_queue: dict[str, list[str]] = {}
    for q, i in pairs:
        by_queue.setdefault(q, []).append(i)
    if not by_queue:
        return []
    replies = task_reads.records_by_queue(storage, by_queue)
    found: dict[tuple[str, str], TaskRecord | None] = {}
    for (q, ids), raws in zip(by_queue.items(), replies, strict=True):
        for i, raw in zip(ids, raws, strict=True):
            found[(q, i)] = None if raw is None else TaskRecord.from_raw(q, i, raw)
    return [found[p] for p in pairs]


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
        windows = [(keys[q], last[q][0], last[q][1]) for q in queues]
        replies = listing_reads.score_windows(storage, windows, want, reverse=reverse)
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
    page.total = sum(listing_reads.set_sizes(storage, list(keys.values())))
    return page


def running_tasks(storage: Storage, queues: Sequence[str], limit: int = 500) -> list[Row]:
    """Leased tasks of each queue (at most ``limit`` per queue), soonest lease end first."""
    keys = [storage.keys.running(q) for q in queues]
    replies = listing_reads.first_members(storage, keys, clamp(limit))
    items = [(q, i, int(s)) for q, reply in zip(queues, replies, strict=True) for i, s in reply]
    recs = fetch_records(storage, [(q, i) for q, i, _ in items])
    rows = [Row(q, i, rec, score=s) for (q, i, s), rec in zip(items, recs, strict=True)]
    rows.sort(key=lambda r: r.score or 0)
    return rows


def oldest_errors(storage: Storage, queue: str, offset: int, count: int) -> list[Row]:
    """A window of one queue's errors, oldest first (bulk actions walk it with an offset)."""
    ids = listing_reads.error_ids(storage, queue, offset, count)
    recs = fetch_records(storage, [(queue, i) for i in ids])
    return [Row(queue, i, rec) for i, rec in zip(ids, recs, strict=True)]
