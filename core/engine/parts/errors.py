"""Errors: the operator's tools on a queue's failed tasks (docs/console.md): the trash a
delete puts them in and the restore from it ("Undo"), the redo that notes what it put back
and the pages that follow those tasks ("After a redo"), and the exact error counters
("Exact counts").

The part of :class:`~ztq.core.engine.storage.Storage` the console's errors pages use
(``storage.errors``); each move is a Lua script (``trash``, ``restore``, ``redo``,
``follow``, ``count_errors``), the pages' reads are pipelines of plain commands.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ztq.core.engine.transport import Transport

# The console's undo and follow-through (docs/console.md, "Undo" and "After a redo"):
# deleted errors stay in a trash for TRASH_WINDOW_MS (then Redis expires them), at most
# TRASH_BATCH_MAX tasks per delete and TRASH_BATCHES deletes per queue; a redo notes up to
# FOLLOW_MAX of the tasks it put back for FOLLOW_WINDOW_MS.
TRASH_WINDOW_MS = 3_600_000
TRASH_BATCH_MAX = 10_000
TRASH_BATCHES = 20
FOLLOW_WINDOW_MS = 3_600_000
FOLLOW_MAX = 1_000_000  # a redo is followed whole (issue 36): the bound only caps memory
COUNT_STEP = 2_000  # error entries the one-time rebuild of the counters counts per call


@dataclass(frozen=True)
class Counted:
    """An exact error counter (_lib.lua, "Exact error counters"): how many tasks of a queue
    are in the group or kind, and what it is (type ``t``, frame ``f``, kind ``k``, the
    newest message ``m``, its failed-at ``at`` and ``id``)."""

    count: int
    info: dict[str, Any]
    again: int = 0  # of them, tasks an operator had redone (they failed again)


class ErrorCounts(NamedTuple):
    """A queue's exact error counters: per group key and per kind key (groups.py)."""

    groups: dict[str, Counted]
    kinds: dict[str, Counted]


class Errors:
    """Trash, restore, redo and follow-through, and the error counters of queues."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.keys = transport.keys

    def trash_errors(
        self,
        queue: str,
        batch: str,
        ids: Sequence[str] = (),
        *,
        oldest: int = 0,
        keep_only: bool = False,
    ) -> tuple[int, int, int]:
        """Delete failed tasks (``ids``, or the ``oldest`` n) into the queue's trash under
        ``batch`` (one delete); returns (deleted, taken, kept in the trash): see trash.lua.
        ``keep_only``: delete only what the trash keeps (it stops when the trash is full;
        ``taken`` then counts the ids it got to)."""
        if not oldest and not ids:
            return 0, 0, 0
        k = self.keys
        with self.transport.guard():
            first = self.transport.client.zrange(k.trash_index(queue), 0, 0)
        oldest_batch = str(first[0]) if first else batch
        keys = [k.tasks(queue), k.errors(queue), k.trash(queue, batch), k.trash_index(queue),
                k.trash(queue, oldest_batch)]  # fmt: skip
        mode = ("oldest" if oldest else "ids") + ("!" if keep_only else "")
        argv = [batch, TRASH_WINDOW_MS, TRASH_BATCH_MAX, TRASH_BATCHES, oldest_batch, mode,
                max(oldest, 1), *ids]  # fmt: skip
        deleted, taken, kept = self.transport.call("trash", keys, argv)
        return int(deleted), int(taken), int(kept)

    def trash_room(self, queue: str, batch: str) -> int:
        """How many more deleted tasks the trash keeps under ``batch`` in ``queue`` (a new
        delete: :data:`TRASH_BATCH_MAX`)."""
        with self.transport.guard():
            return max(
                0, TRASH_BATCH_MAX - int(self.transport.client.hlen(self.keys.trash(queue, batch)))
            )

    def restore_errors(
        self, queue: str, batch: str, ids: Sequence[str] = (), *, limit: int = 500
    ) -> tuple[int, int]:
        """Put deleted errors of a trash batch back (``ids``, or all of it, ``limit`` per
        script call); returns (restored, skipped: an id that has a record again).

        All of it: the batch's hash is walked once with HSCAN, each id sent once (a scan
        may return one twice), so an id skipped stays in the trash and is counted once."""
        k = self.keys
        keys = [k.tasks(queue), k.errors(queue), k.trash(queue, batch)]
        if ids:
            restored, _, skipped = self.transport.call("restore", keys, ["ids", *ids])
            return int(restored), int(skipped)
        limit = max(int(limit), 1)
        total = skipped_total = 0
        seen: set[str] = set()
        chunk: list[str] = []

        def restore(chunk: list[str]) -> None:
            nonlocal total, skipped_total
            restored, _, skipped = self.transport.call("restore", keys, ["ids", *chunk])
            total, skipped_total = total + int(restored), skipped_total + int(skipped)

        with self.transport.guard():
            for field, _ in self.transport.client.hscan_iter(keys[2], count=limit):
                task_id = str(field)
                if task_id in seen:
                    continue
                seen.add(task_id)
                chunk.append(task_id)
                if len(chunk) >= limit:
                    restore(chunk)
                    chunk = []
            if chunk:
                restore(chunk)
        return total, skipped_total

    def trash_batches(self, queue: str) -> list[tuple[str, int, int]]:
        """The queue's live trash batches: (batch, expires at ms, tasks held), newest first."""
        k = self.keys
        with self.transport.guard():
            pipe = self.transport.client.pipeline(transaction=False)
            pipe.time()
            pipe.zrange(k.trash_index(queue), 0, -1, desc=True, withscores=True)
            secs, entries = pipe.execute()
            now = int(secs[0]) * 1000 + int(secs[1]) // 1000
            entries = [(str(b), int(at)) for b, at in entries if int(at) > now]
            pipe = self.transport.client.pipeline(transaction=False)
            for b, _ in entries:
                pipe.hlen(k.trash(queue, b))
            sizes = pipe.execute() if entries else []
        return [(b, at, int(n)) for (b, at), n in zip(entries, sizes, strict=True) if int(n)]

    def trash_entries(self, queue: str, batch: str, limit: int = 100) -> list[tuple[str, int, str]]:
        """Up to ``limit`` tasks of a trash batch: (id, failed at ms, stored record)."""
        out: list[tuple[str, int, str]] = []
        with self.transport.guard():
            for field, value in self.transport.client.hscan_iter(
                self.keys.trash(queue, batch), count=limit
            ):
                out.append(_trash_entry(field, value))
                if len(out) >= limit:
                    break
        return out

    def trash_scan(
        self, queue: str, batch: str, cursor: int = 0, count: int = 200
    ) -> tuple[int, list[tuple[str, int, str]]]:
        """One HSCAN step over a trash batch from ``cursor``: (next cursor, 0 at the end;
        entries as :meth:`trash_entries` gives them). What the trash search pages with."""
        with self.transport.guard():
            nxt, found = self.transport.client.hscan(
                self.keys.trash(queue, batch), cursor, count=count
            )
        return int(nxt), [_trash_entry(field, value) for field, value in found.items()]

    def redo_errors(
        self, queue: str, batch: str, ids: Sequence[str] = (), *, oldest: int = 0
    ) -> int:
        """Redo failed tasks (``ids``, or the ``oldest`` n), noting them under ``batch`` for
        following them (see redo.lua); returns how many were put back."""
        if not oldest and not ids:
            return 0
        k = self.keys
        keys = [k.tasks(queue), k.errors(queue), *k.ready_all(queue), k.wake(queue),
                k.redo(queue, batch)]  # fmt: skip
        mode = "oldest" if oldest else "ids"
        return int(
            self.transport.call(
                "redo", keys, [FOLLOW_WINDOW_MS, FOLLOW_MAX, mode, max(oldest, 1), *ids]
            )
        )

    def follow_page(
        self,
        queues: Sequence[str],
        batch: str,
        state: str = "",
        offset: int = 0,
        limit: int = 100,
        again: list[tuple[str, str]] | None = None,
        most_again: int = 0,
    ) -> tuple[dict[str, int], list[tuple[str, str, int, str]], int]:
        """Every task a redo batch put back, counted by its state now over the whole batch,
        and one page of them (``state``: only those in it): (counts, [(queue, id, redone at
        ms, state)], when the redo began in ms: 0 when nothing is followed). One script call
        per queue (follow.lua); ``again`` gets (queue, id) of up to ``most_again`` tasks
        that failed again, read in the same calls."""
        counts: dict[str, int] = {}
        rows: list[tuple[str, str, int, str]] = []
        first = 0
        for q in queues:
            keys = [self.keys.tasks(q), self.keys.redo(q, batch)]
            wanted = most_again - len(again) if again is not None else 0
            argv = [state, offset, limit - len(rows), wanted]
            flat, page, began, failed = self.transport.call("follow", keys, argv)
            if again is not None:
                again.extend((q, str(i)) for i in failed)
            listed = 0
            for i in range(0, len(flat), 2):
                counts[str(flat[i])] = counts.get(str(flat[i]), 0) + int(flat[i + 1])
                if not state or str(flat[i]) == state:
                    listed += int(flat[i + 1])
            for i in range(0, len(page), 3):
                if len(rows) < limit:
                    rows.append((q, str(page[i]), int(float(page[i + 1])), str(page[i + 2])))
            offset = max(0, offset - listed)
            if int(began) and (not first or int(began) < first):
                first = int(began)
        return counts, rows, first

    def followed(
        self, queues: Sequence[str], batch: str, limit: int = 1000
    ) -> list[tuple[str, str, int]]:
        """The tasks a redo batch put back, per queue: (queue, id, redone at ms)."""
        with self.transport.guard():
            pipe = self.transport.client.pipeline(transaction=False)
            for q in queues:
                pipe.zrange(self.keys.redo(q, batch), 0, limit - 1, withscores=True)
            replies = pipe.execute() if queues else []
        return [(q, str(i), int(at)) for q, reply in zip(queues, replies, strict=True)
                for i, at in reply]  # fmt: skip

    def count_errors(self, queue: str, step: int = COUNT_STEP) -> int:
        """Build the error counters of a list written before them (a one-time rebuild, in
        calls of ``step`` entries that each block Redis briefly); returns the calls made.
        Moves meanwhile keep the counts exact (count_errors.lua)."""
        keys, calls = [self.keys.tasks(queue), self.keys.errors(queue)], 0
        while True:
            calls += 1
            if int(self.transport.call("count_errors", keys, [max(int(step), 1)])):
                return calls

    def error_counts(self, queues: Sequence[str]) -> dict[str, ErrorCounts]:
        """The exact error counters of each queue, in O(groups) (two round trips; a queue
        whose counters were never built is counted first, once)."""
        k = self.keys
        marks = ["#eb", "#egs", "#eks"]
        with self.transport.guard():
            pipe = self.transport.client.pipeline(transaction=False)
            for q in queues:
                pipe.hmget(k.tasks(q), marks)
            heads = pipe.execute() if queues else []
        for i, (q, head) in enumerate(zip(queues, heads, strict=True)):
            if head[0] != "1" and (head[1] or head[2] or self._has_errors(q)):
                self.count_errors(q)
                with self.transport.guard():
                    heads[i] = self.transport.client.hmget(k.tasks(q), marks)
        lists = [(str(h[1] or "").split(), str(h[2] or "").split()) for h in heads]
        with self.transport.guard():
            pipe = self.transport.client.pipeline(transaction=False)
            for q, (groups, kinds) in zip(queues, lists, strict=True):
                fields = [f"#eg{part}:{g}" for part in ("", "i", "a") for g in groups]
                fields += [f"#ek{part}:{x}" for part in ("", "i", "a") for x in kinds]
                pipe.hmget(k.tasks(q), fields or ["#"])
            replies = pipe.execute() if queues else []
        out: dict[str, ErrorCounts] = {}
        for q, (groups, kinds), got in zip(queues, lists, replies, strict=True):
            ng, nk = len(groups), len(kinds)
            g, x = got[: 3 * ng], got[3 * ng : 3 * (ng + nk)]
            out[q] = ErrorCounts(
                _counted(groups, g[:ng], g[ng : 2 * ng], g[2 * ng :]),
                _counted(kinds, x[:nk], x[nk : 2 * nk], x[2 * nk :]),
            )
        return out

    def _has_errors(self, queue: str) -> bool:
        with self.transport.guard():
            return bool(self.transport.client.zcard(self.keys.errors(queue)))


def _counted(
    keys: Sequence[str], counts: Sequence[Any], infos: Sequence[Any], again: Sequence[Any]
) -> dict[str, Counted]:
    out = {}
    for key, n, info, a in zip(keys, counts, infos, again, strict=True):
        if n is not None and int(n) > 0:
            try:
                parsed = json.loads(info) if info else {}
            except ValueError:  # never written so; a page shows the key instead
                parsed = {}
            out[key] = Counted(int(n), parsed if isinstance(parsed, dict) else {}, int(a or 0))
    return out


def _trash_entry(field: object, value: object) -> tuple[str, int, str]:
    """(id, failed at ms, stored record) of a trash entry (``at TAB record``); another
    writer's entry reads with no time (0) and its record is then shown as unreadable."""
    at, _, raw = str(value).partition("\t")
    try:
        when = int(float(at or 0))
    except (ValueError, OverflowError):
        when = 0
    return str(field), when, raw
