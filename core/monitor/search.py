"""Finding tasks: by id across queues, and by a filter over every record (HSCAN, with a
scan budget and a cursor)."""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from ztq.core.engine.read_models.task_reads import scan_records
from ztq.core.engine.record import TaskRecord
from ztq.core.engine.storage import Storage
from ztq.core.monitor.pages import Match, Page, Row, ZCursor, fetch_records


def find_task(storage: Storage, task_id: str, queue: str | None = None) -> list[TaskRecord]:
    """Records with this id, in ``queue`` (each of its shards) or in every known queue."""
    queues = storage.queues.shards_of(queue) if queue else storage.queues.names()
    recs = fetch_records(storage, [(q, task_id) for q in queues])
    return [r for r in recs if r is not None]


KEEP = 1000  # matches one search page keeps (the newest), however many the scan finds


def newest(rec: TaskRecord) -> float:
    """A record's latest moment (ended, started, failed or enqueued; ms): what search
    results are ordered by, newest first."""
    best = 0.0
    for name in ("ended", "started", "failed", "enqueued"):
        try:
            value = float(rec.get(name) or 0)
        except (TypeError, ValueError):
            continue
        if value > best and value == value and value != float("inf"):
            best = value
    return best


@dataclass
class SearchPage(Page):
    """A search page: ``rows`` the newest ``limit`` matches of the records scanned, newest
    first; ``matched`` how many matched in those records (``capped`` when more than
    :data:`KEEP`, of which the newest are kept); ``next`` where the scan goes on (None
    when every record was scanned)."""

    matched: int = 0
    capped: bool = False


def search(
    storage: Storage,
    match: Match,
    cursor: str | None = None,
    limit: int = 50,
    *,
    budget: int = 2000,
) -> SearchPage:
    """Records of any state that ``match``, newest first, walking each queue's records with
    HSCAN.

    A page scans HSCAN batches until it has ``limit`` matches or has scanned about
    ``budget`` records (all of them when there are fewer). When one scan saw every record it
    shows the newest ``limit`` matches; otherwise every match of the batches it scanned,
    newest first (a few more than ``limit`` when the last batch brought several: a batch
    cannot be left half-read). The cursor is ``<queue index>.<HSCAN cursor>``, where the
    next page's scan starts, so following the pages shows each record once. HSCAN has no
    order, so "newest" is of the records scanned: the page says how many it scanned and
    matched.
    """
    queues = storage.queues.names()
    at = ZCursor.parse(cursor)  # the shape of a ZCursor: two numbers, read the same way
    qi, hc = (at.score, at.skip) if at else (0, 0)
    found: list[tuple[float, int, Row]] = []  # a heap of the newest KEEP matches
    matched = 0
    scanned = 0
    may_match = getattr(match, "may_match", None)  # rules records out before parsing them
    while qi < len(queues) and scanned < budget and matched < limit:
        q = queues[qi]
        hc, batch = scan_records(storage, q, hc)
        for i, raw in batch.items():
            if i.startswith("#"):  # the ready lists' leftover marks (pending_page)
                continue
            scanned += 1
            if may_match is not None and not may_match(i, raw):
                continue
            rec = TaskRecord.from_raw(q, i, raw)
            if match(rec):
                matched += 1
                item = (newest(rec), matched, Row(q, i, rec))
                if len(found) < KEEP:
                    heapq.heappush(found, item)
                else:
                    heapq.heappushpop(found, item)
        if int(hc) == 0:
            qi, hc = qi + 1, 0
    nxt = f"{qi}.{hc}" if qi < len(queues) else None
    # one scan that saw every record shows the newest ``limit`` (the page offers the rest);
    # a page the scan goes on from shows every match it scanned, or the next would skip some
    rows = [row for _, _, row in heapq.nlargest(
        limit if nxt is None and cursor is None else len(found), found)]  # fmt: skip
    return SearchPage(
        rows, nxt, scanned, partial=nxt is not None, matched=matched, capped=matched > KEEP
    )
