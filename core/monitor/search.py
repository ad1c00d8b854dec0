"""Finding tasks: by id across queues, and by a filter over every record (HSCAN, with a
scan budget and a cursor)."""

from __future__ import annotations

from ztq.core.engine.record import TaskRecord
from ztq.core.engine.storage import Storage
from ztq.core.monitor.pages import Match, Page, Row, ZCursor, fetch_records


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
    at = ZCursor.parse(cursor)  # the shape of a ZCursor: two numbers, read the same way
    qi, hc = (at.score, at.skip) if at else (0, 0)
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
