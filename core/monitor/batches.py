"""The batches read model (docs/batches.md): the list of batches, one batch with its
members page by page, and the redo of a batch's failed members. What the console's Batches
page, its JSON API and ``ztq batch`` show.

Every read is O(page): the list reads one record per batch shown; a batch's page reads its
members' slice of the enqueue order and one ``HMGET`` per queue for their states. Only
:func:`redo_failed` walks a whole batch, in chunks, through the console's bounded redo
(``redo.lua``, each chunk followed under the batch's name).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ztq.core.engine.storage import Storage
from ztq.core.errors import NotFound

PAGE = 50
REDO_CHUNK = 500


def _ids_ok(batch_id: str) -> bool:
    return 0 < len(batch_id) <= 64 and all(c.isalnum() or c in "_.-" for c in batch_id)


def _count(rec: dict[str, str], name: str) -> int | None:
    value = rec.get(name, "")
    return int(value) if value.isdigit() else None


def summary(batch_id: str, rec: dict[str, str]) -> dict[str, Any]:
    """A batch record as the list shows it (no member read: ``open`` counts the members
    that have not ended, running or not). A record another writer left without its counts,
    or under an id in another format, is a row marked ``unreadable`` (the reason), so one
    such entry never fails the whole list."""
    counts = [_count(rec, n) for n in ("total", "done", "failed")]
    created = rec.get("created", "0") or "0"
    why = "" if _ids_ok(batch_id) else "batch id in another format"
    if None in counts or not created.isdigit():
        why = why or "record without its counts"
    if why:
        return {"id": batch_id, "description": rec.get("description", ""), "created_ms": 0,
                "total": 0, "done": 0, "failed": 0, "open": 0, "state": "none", "parent": "",
                "percent": 0, "unreadable": why}  # fmt: skip
    total, done, failed = (int(c or 0) for c in counts)
    state = "success" if rec.get("success") else "complete" if rec.get("complete") else "open"
    return {
        "id": batch_id,
        "description": rec.get("description", ""),
        "created_ms": int(rec.get("created", 0)),
        "total": total,
        "done": done,
        "failed": failed,
        "open": total - done - failed,
        "state": state,
        "parent": rec.get("parent", ""),
        "percent": 100 if total == 0 else round(100 * (done + failed) / total),
        "unreadable": "",
    }


def batch_list(storage: Storage, offset: int = 0, limit: int = PAGE) -> dict[str, Any]:
    """The newest batches first, a page; a batch whose record expired meanwhile is left out
    of the page (its index entry goes with the next trim)."""
    ids = storage.batches.list_batches(offset, limit)
    rows = []
    for batch_id, _ in ids:
        rec = storage.batches.batch_record(batch_id)
        if rec is not None:
            rows.append(summary(batch_id, rec))
    return {
        "batches": rows,
        "total": storage.batches.count_batches(),
        "offset": offset,
        "limit": limit,
    }


def batch_page(storage: Storage, batch_id: str, offset: int = 0, limit: int = PAGE) -> dict:
    """One batch: its status (``running`` read from its members' records) and a page of its
    members in enqueue order, each with its state and its last end. :class:`NotFound` for
    an unknown or expired batch."""
    if not _ids_ok(batch_id):
        raise NotFound(f"no batch {batch_id!r}")
    status = storage.batches.batch_status(batch_id)
    rec = storage.batches.batch_record(batch_id) or {}
    page = storage.batches.batch_page(batch_id, offset, limit)
    by_queue: dict[str, list[int]] = {}
    members: list[dict[str, Any]] = []
    for n, (member, ended) in enumerate(page):
        outcome, _, fence = ended.partition("\t")
        row: dict[str, Any] = {"member": member, "ended": outcome, "fence": fence, "state": ""}
        if member.startswith("@"):
            child = storage.batches.batch_record(member[1:])
            row |= {"queue": "", "id": member[1:], "child": True,
                    "state": summary(member[1:], child)["state"] if child else "none"}  # fmt: skip
        else:
            queue, _, task_id = member.partition(":")
            row |= {"queue": queue, "id": task_id, "child": False}
            by_queue.setdefault(queue, []).append(n)
        members.append(row)
    for queue, positions in by_queue.items():
        states = storage.batches.task_states(queue, [members[p]["id"] for p in positions])
        for p, state in zip(positions, states, strict=True):
            members[p]["state"] = state
    head = summary(batch_id, rec) if rec else {}
    return {**head, "running": status.running, "pending": status.pending, "members": members,
            "offset": offset, "limit": limit}  # fmt: skip


def redo_failed(
    storage: Storage, batch_id: str, note: Callable[[str, int], None] | None = None
) -> int:
    """Put the batch's failed members back to run (those still in their queue's error
    list), chunk by chunk through ``redo.lua``; their later acks make them done in the
    batch, and ``on_success`` runs when the last one is. Returns how many went back;
    ``note(queue, n)`` hears of each chunk (the caller's audit)."""
    if not _ids_ok(batch_id) or storage.batches.batch_record(batch_id) is None:
        raise NotFound(f"no batch {batch_id!r}")
    moved = offset = 0
    while page := storage.batches.batch_page(batch_id, offset, REDO_CHUNK):
        offset += len(page)
        by_queue: dict[str, list[str]] = {}
        for member, ended in page:
            if ended.startswith("failed\t") and not member.startswith("@"):
                queue, _, task_id = member.partition(":")
                by_queue.setdefault(queue, []).append(task_id)
        for queue, ids in by_queue.items():
            n = storage.errors.redo_errors(queue, f"batch-{batch_id}", ids)
            moved += n
            if note is not None and n:
                note(queue, n)
    return moved
