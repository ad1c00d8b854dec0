"""Queue administration: registering queues (and the shards of a sharded one), forgetting
them, pausing and resuming, and setting the queue-wide limits (``configure``).

Separate because these are the operator's and the producer's settings on a queue, not
moves of its tasks: they change how the scripts treat every later task of the queue (the
limits are refused on a sharded queue, where no count holds queue-wide in one slot).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ztq.core.engine import queue_limits
from ztq.core.engine.keys import (
    check_physical,
    check_queue,
    forget_checked,
    forget_deleted,
    shard_names,
)
from ztq.core.engine.queue_limits import KEEP, Keep, Rate
from ztq.core.engine.reads import Reads
from ztq.core.errors import InvalidOption

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


class QueueAdmin(Reads):
    """Writes to a queue's registration, pause flag and limits (reads its shards first)."""

    def register_queue(self, queue: str) -> None:
        """Record the queue name in the global set (once per process and queue)."""
        if queue not in self._known_queues:
            with self.guard():
                self.client.sadd(self.keys.queues, queue)
            self._known_queues.add(queue)

    def register_shards(self, queue: str, shards: int) -> None:
        """Record every shard of a sharded queue at once, so that workers fetch from all of
        them and the console counts them before a task landed in each."""
        names = [n for n in shard_names(queue, shards) if n not in self._known_queues]
        if names:
            with self.guard():
                self.client.sadd(self.keys.queues, *names)
            self._known_queues.update(names)

    def forget_registrations(self) -> None:
        """Forget which queues this process registered, so that the next
        :meth:`register_queue` writes again: Redis came back without its data."""
        self._known_queues.clear()

    def forget_queue(self, queue: str) -> None:
        with self.guard():
            self.client.srem(self.keys.queues, queue)
        self._known_queues.discard(queue)

    def forget_idle_queue(self, queue: str, now_s: float | None = None) -> str:
        """Remove a queue that holds nothing, with its settings, stats and finished records
        (``ztq queue forget``: a queue a typo made stays in every list otherwise); the
        caller has checked that no live worker serves it (monitor.workers.forget_queue).
        Returns "" when it is forgotten, else why not, in one line. The check and the
        delete are one script call (forget_queue.lua): a task enqueued meanwhile keeps its
        queue."""
        check_queue(queue)
        shards = self.shards_of(queue)
        if len(shards) > 1:
            return f"{queue} has {len(shards)} shards: forget is for an unsharded queue"
        checked = forget_checked(self.keys, queue)
        deleted = forget_deleted(self.keys, queue, time.time() if now_s is None else now_s)
        keys, words = [k for k, _ in checked] + deleted, [w for _, w in checked]
        held = self.call("forget_queue", keys, [len(checked), *words])
        if held:
            return f"{queue} holds {held}"
        with self.guard():
            self.client.srem(self.keys.queues, queue)
        self._known_queues.discard(queue)
        return ""

    def pause(self, queue: str) -> None:
        """Workers stop taking tasks of this queue, every shard of it (running ones finish);
        a shard's name (``mail~2``) pauses that shard alone."""
        check_physical(queue)
        for q in self.shards_of(queue):
            self.call("pause", [self.keys.paused(q), self.keys.wake(q)], ["1"])

    def resume(self, queue: str) -> None:
        """Workers take tasks of this queue (every shard) again, woken at once."""
        check_physical(queue)
        for q in self.shards_of(queue):
            self.call("pause", [self.keys.paused(q), self.keys.wake(q)], ["0"])

    def configure(
        self,
        queue: str,
        *,
        max_running: int | None | Keep = KEEP,
        max_pending: int | None | Keep = KEEP,
        when_full: str | Keep = KEEP,
        block_timeout: float | Keep = KEEP,
        rate_limit: str | None | Keep = KEEP,
        key_concurrency: int | None | Keep = KEEP,
    ) -> int:
        """Set (None clears) the queue's limits, enforced by the scripts for every producer
        and worker: tasks running at once (``max_running``), tasks waiting in the ready lists
        (``max_pending``) and what an enqueue does when that is reached (``when_full``:
        raise, block up to ``block_timeout`` s, or buffer), and tasks started per second,
        minute or hour across the fleet (``rate_limit``: ``"N/s"``, ``"N/m"``, ``"N/h"``,
        optionally followed by ``" burst B"``). Settings not given are kept. A
        sharded queue has no queue-wide count in one slot, so it is refused. Returns how
        many buffered tasks a raised or lifted ``max_pending`` moved in."""
        check_physical(queue)
        argv = queue_limits.fields(max_running=max_running, max_pending=max_pending,
                                   when_full=when_full, block_timeout=block_timeout,
                                   rate_limit=rate_limit,
                                   key_concurrency=key_concurrency)  # fmt: skip
        if len(self.shards_of(queue)) > 1:
            raise InvalidOption(
                f"queue {queue} is sharded: queue limits are counted in one slot, so a "
                "sharded queue cannot have one (see docs/scaling.md)"
            )
        k = self.keys
        keys = [k.config(queue), k.wake(queue), *k.ready_all(queue), k.tasks(queue),
                k.overflow(queue), k.room(queue), k.rate(queue)]  # fmt: skip
        return int(self.call("configure", keys, argv))

    def task_rates(self, queue: str, rates: Mapping[str, Rate | None]) -> None:
        """Write the task-level rate limits of ``queue``'s tasks into its config (a worker
        serving it does, at start, for the tasks it registered): ``rate:<task>`` = ``N/u B``
        (None: the field is dropped); fetch.lua enforces them (docs/queue-controls.md)."""
        if not rates:
            return
        argv: list[str] = []
        for name, rate in sorted(rates.items()):
            argv += [f"rate:{name}", "" if rate is None else f"{rate.spec} {rate.burst}"]
        k = self.keys
        keys = [k.config(queue), k.wake(queue), *k.ready_all(queue), k.tasks(queue),
                k.overflow(queue), k.room(queue), k.rate(queue)]  # fmt: skip
        self.call("configure", keys, argv)

    def rate_leave(self, queue: str, worker: str, thread: str) -> bool:
        """The executor (``worker``, ``thread``) registered for ``queue``'s next rate-limit
        token took other work: it leaves the registration and an idle executor is woken
        to take it (see rate_leave.lua). False when the registration was not its own."""
        keys = [self.keys.rate(queue), self.keys.wake(queue)]
        return bool(int(self.call("rate_leave", keys, [worker, thread])))

    # -- the console's undo and follow-through ---------------------------------------------
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
        with self.guard():
            first = self.client.zrange(k.trash_index(queue), 0, 0)
        oldest_batch = str(first[0]) if first else batch
        keys = [k.tasks(queue), k.errors(queue), k.trash(queue, batch), k.trash_index(queue),
                k.trash(queue, oldest_batch)]  # fmt: skip
        mode = ("oldest" if oldest else "ids") + ("!" if keep_only else "")
        argv = [batch, TRASH_WINDOW_MS, TRASH_BATCH_MAX, TRASH_BATCHES, oldest_batch, mode,
                max(oldest, 1), *ids]  # fmt: skip
        deleted, taken, kept = self.call("trash", keys, argv)
        return int(deleted), int(taken), int(kept)

    def trash_room(self, queue: str, batch: str) -> int:
        """How many more deleted tasks the trash keeps under ``batch`` in ``queue`` (a new
        delete: :data:`TRASH_BATCH_MAX`)."""
        with self.guard():
            return max(0, TRASH_BATCH_MAX - int(self.client.hlen(self.keys.trash(queue, batch))))

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
            restored, _, skipped = self.call("restore", keys, ["ids", *ids])
            return int(restored), int(skipped)
        limit = max(int(limit), 1)
        total = skipped_total = 0
        seen: set[str] = set()
        chunk: list[str] = []

        def restore(chunk: list[str]) -> None:
            nonlocal total, skipped_total
            restored, _, skipped = self.call("restore", keys, ["ids", *chunk])
            total, skipped_total = total + int(restored), skipped_total + int(skipped)

        with self.guard():
            for field, _ in self.client.hscan_iter(keys[2], count=limit):
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
        with self.guard():
            pipe = self.client.pipeline(transaction=False)
            pipe.time()
            pipe.zrange(k.trash_index(queue), 0, -1, desc=True, withscores=True)
            secs, entries = pipe.execute()
            now = int(secs[0]) * 1000 + int(secs[1]) // 1000
            entries = [(str(b), int(at)) for b, at in entries if int(at) > now]
            pipe = self.client.pipeline(transaction=False)
            for b, _ in entries:
                pipe.hlen(k.trash(queue, b))
            sizes = pipe.execute() if entries else []
        return [(b, at, int(n)) for (b, at), n in zip(entries, sizes, strict=True) if int(n)]

    def trash_entries(self, queue: str, batch: str, limit: int = 100) -> list[tuple[str, int, str]]:
        """Up to ``limit`` tasks of a trash batch: (id, failed at ms, stored record)."""
        out: list[tuple[str, int, str]] = []
        with self.guard():
            for field, value in self.client.hscan_iter(self.keys.trash(queue, batch), count=limit):
                out.append(_trash_entry(field, value))
                if len(out) >= limit:
                    break
        return out

    def trash_scan(
        self, queue: str, batch: str, cursor: int = 0, count: int = 200
    ) -> tuple[int, list[tuple[str, int, str]]]:
        """One HSCAN step over a trash batch from ``cursor``: (next cursor, 0 at the end;
        entries as :meth:`trash_entries` gives them). What the trash search pages with."""
        with self.guard():
            nxt, found = self.client.hscan(self.keys.trash(queue, batch), cursor, count=count)
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
            self.call("redo", keys, [FOLLOW_WINDOW_MS, FOLLOW_MAX, mode, max(oldest, 1), *ids])
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
            flat, page, began, failed = self.call("follow", keys, argv)
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
        with self.guard():
            pipe = self.client.pipeline(transaction=False)
            for q in queues:
                pipe.zrange(self.keys.redo(q, batch), 0, limit - 1, withscores=True)
            replies = pipe.execute() if queues else []
        return [(q, str(i), int(at)) for q, reply in zip(queues, replies, strict=True)
                for i, at in reply]  # fmt: skip

    # -- the exact error counters (docs/console.md, "Exact counts") -------------------------
    def count_errors(self, queue: str, step: int = COUNT_STEP) -> int:
        """Build the error counters of a list written before them (a one-time rebuild, in
        calls of ``step`` entries that each block Redis briefly); returns the calls made.
        Moves meanwhile keep the counts exact (count_errors.lua)."""
        keys, calls = [self.keys.tasks(queue), self.keys.errors(queue)], 0
        while True:
            calls += 1
            if int(self.call("count_errors", keys, [max(int(step), 1)])):
                return calls

    def error_counts(self, queues: Sequence[str]) -> dict[str, ErrorCounts]:
        """The exact error counters of each queue, in O(groups) (two round trips; a queue
        whose counters were never built is counted first, once)."""
        k = self.keys
        marks = ["#eb", "#egs", "#eks"]
        with self.guard():
            pipe = self.client.pipeline(transaction=False)
            for q in queues:
                pipe.hmget(k.tasks(q), marks)
            heads = pipe.execute() if queues else []
        for i, (q, head) in enumerate(zip(queues, heads, strict=True)):
            if head[0] != "1" and (head[1] or head[2] or self._has_errors(q)):
                self.count_errors(q)
                with self.guard():
                    heads[i] = self.client.hmget(k.tasks(q), marks)
        lists = [(str(h[1] or "").split(), str(h[2] or "").split()) for h in heads]
        with self.guard():
            pipe = self.client.pipeline(transaction=False)
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
        with self.guard():
            return bool(self.client.zcard(self.keys.errors(queue)))


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
