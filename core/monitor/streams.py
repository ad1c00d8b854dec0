"""Paged reads of the streams: history per queue, the worker log, the console's audit log.

Like ``ztq.core.monitor.queues``: one window (XREVRANGE with a count) per stream per request,
merged newest first across queues, paged with a cursor instead of an offset.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ztq.core.engine.read_models import listing_reads
from ztq.core.engine.storage import Storage
from ztq.core.monitor.pages import Page, clamp, merge_windows

AUDIT_MAXLEN = 10_000
# the fields every entry of a stream has as ztq writes it: an entry without them (another
# writer's, an older ztq's) is shown as unreadable (``_unreadable``), the rest as usual
REQUIRED = {"history": ("id", "status"), "events": ("kind",), "audit": ("user", "action")}
_SCURSOR = re.compile(r"^(\d{1,16}-\d{1,16})(?::([A-Za-z0-9_.\-]{1,64}))?$")


@dataclass(frozen=True)
class SCursor:
    """A position in stream entries merged across queues: after entry ``id`` of ``queue``."""

    id: str
    queue: str = ""

    def __str__(self) -> str:
        return f"{self.id}:{self.queue}" if self.queue else self.id

    @classmethod
    def parse(cls, text: str | None) -> SCursor | None:
        m = _SCURSOR.match(text or "")
        return cls(m.group(1), m.group(2) or "") if m else None


def _sid(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _stream_items(
    storage: Storage, keys: dict[str, str], cursor: SCursor | None, chunk: int
) -> Iterator[tuple[str, str, dict[str, str], SCursor]]:
    """(queue, entry id, fields, cursor after it), newest first, then by queue name."""
    # the first entry each stream may give next: after the cursor in the merged order
    top = {
        q: "+" if cursor is None else (cursor.id if q > cursor.queue else f"({cursor.id}")
        for q in keys
    }
    heads: dict[str, deque[tuple[str, dict[str, str]]]] = {q: deque() for q in keys}
    finished: set[str] = set()

    def refill(queues: list[str]) -> None:
        queues = [q for q in queues if q not in finished]
        windows = [(keys[q], top[q]) for q in queues]
        replies = listing_reads.stream_windows(storage, windows, chunk)
        for q, reply in zip(queues, replies, strict=True):
            if len(reply) < chunk:
                finished.add(q)
            if reply:
                top[q] = "(" + reply[-1][0]
            heads[q].extend(reply)

    def order(head: tuple[str, dict[str, str]], q: str) -> tuple[int, int, str]:
        ms, seq = _sid(head[0])
        return (-ms, -seq, q)

    for q, (entry_id, fields) in merge_windows(heads, refill, order):
        yield q, entry_id, fields, SCursor(entry_id, q)


def stream_page(
    storage: Storage,
    which: str,
    queues: Sequence[str] = (),
    cursor: str | None = None,
    limit: int = 50,
    *,
    match: Callable[[dict[str, str]], bool] | None = None,
    budget: int = 2000,
) -> Page:
    """Entries of a stream, newest first, as dicts of its fields plus ``_queue``, ``_id`` and
    ``_at`` (ms). ``which``: ``'history'`` (finished runs of ``queues``, merged), ``'events'``
    (the worker log) or ``'audit'`` (who redid, deleted or commanded what in the console).
    """
    k = storage.keys
    if which == "history":
        keys = {q: k.history(q) for q in sorted(queues)}
    else:
        keys = {"": k.events if which == "events" else k.audit}
    limit = clamp(limit)
    budget = limit if match is None else max(budget, limit)
    chunk = limit + 1 if match is None else 200
    rows: list[dict[str, Any]] = []
    scanned = 0
    items = _stream_items(storage, keys, SCursor.parse(cursor), chunk)
    for q, entry_id, fields, after in items:
        scanned += 1
        if match is None or match(fields):
            row = {**fields, "_queue": q, "_id": entry_id, "_at": _sid(entry_id)[0]}
            missing = [f for f in REQUIRED[which] if not fields.get(f)]
            row["_unreadable"] = f"no {', '.join(missing)}" if missing else ""
            rows.append(row)
        full, spent = len(rows) >= limit, scanned >= budget
        if full or spent:
            more = next(items, None) is not None
            return Page(rows, str(after) if more else None, scanned, spent and not full)
    return Page(rows, None, scanned)


def write_audit(
    storage: Storage,
    user: str,
    action: str,
    *,
    queue: str = "",
    ids: Sequence[str] = (),
    count: int | None = None,
    detail: str = "",
    system: str = "",
) -> None:
    """Append one console action to the audit stream (capped at ``AUDIT_MAXLEN``);
    ``system``: the name of the system it acted on, when the console or ``ztq`` knows
    several (``docs/systems.md``)."""
    shown = " ".join(ids[:50]) + (f" (+{len(ids) - 50} more)" if len(ids) > 50 else "")
    entry = {
        "user": user,
        "action": action,
        "queue": queue,
        "ids": shown,
        "count": str(len(ids) if count is None else count),
        "detail": detail[:500],
    }
    if system:
        entry["system"] = system
    listing_reads.append_audit(storage, entry, AUDIT_MAXLEN)
