"""Bulk actions over whole sets (every error of a filter, every ready task of a queue),
for the console's ``POST /bulk`` and the ``ztq redo`` / ``delete`` / ``purge`` commands.

A bulk action runs in steps: in the console each ``POST /bulk`` works through batches (one
script call each) for about ``ztq.console.bulk_seconds``, then either finishes or answers a
progress page whose form carries the position; the page script submits it again at once
(without JavaScript the operator presses *Continue*). Nothing is kept on the server between
steps, every step is a signed-in, CSRF-checked operator request, and a console restart
loses nothing. Positions are re-checked against Redis on every step, so a forged position
can only make a step skip or repeat work the operator may do anyway. The ``ztq`` command
runs the same steps in a loop.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ztq.core.engine.keys import QUEUE_NAME, SHARD_NAME
from ztq.core.engine.record import TaskRecord
from ztq.core.engine.storage import Storage
from ztq.core.monitor import queues as monitor
from ztq.core.monitor.filters import task_matcher
from ztq.core.monitor.groups import GROUP_KEY, GroupMatch
from ztq.core.monitor.pages import Page, Row

KINDS = {
    ("redo", "errors"),
    ("delete", "errors"),
    ("delete", "ready"),
}
BATCH = re.compile(r"^[0-9a-f]{8,32}$")  # a redo's or a delete's batch id (new_batch)


def new_batch() -> str:
    """A fresh batch id: the time in ms (hex, so batches sort by time) and a random part."""
    return f"{time.time_ns() // 1_000_000:x}{secrets.token_hex(3)}"


def batch_time(batch: str) -> int:
    """When a batch began (ms), from its id; 0 for an id in another format (an older
    console's, another writer's), which pages show as unreadable."""
    return int(batch[:-6] or "0", 16) if BATCH.match(batch) else 0


@dataclass
class BulkJob:
    action: str  # redo | delete
    source: str  # errors | ready
    queue: str = ""  # '' = every queue
    task: str = ""  # filters (errors only): task name contains / text in the record
    text: str = ""
    group: str = ""  # errors only: the error group (groups.group_key) it acts on
    batch: str = ""  # a console job's batch: a redo is followed, a delete goes to the trash
    qi: int = 0  # position: queue index, and offset of unmatched errors in that queue
    offset: int = 0
    done: int = 0  # tasks redone or deleted so far
    scanned: int = 0
    kept: int = 0  # deleted errors the trash keeps (batch jobs)
    total: int = 0  # size of the sets when the job started
    started: bool = False
    finished: bool = False
    kind: str = ""  # errors only: the error kind (groups.kind_key) it acts on
    limit: int = 0  # the count its confirmation stated: it acts on no more (0: no bound)
    forgood: bool = False  # the operator confirmed that a delete past the trash's room is final
    full: bool = False  # a delete left tasks: the trash had no more room (and not ``forgood``)

    @property
    def filtered(self) -> bool:
        return bool(self.task or self.text or self.group or self.kind)

    @property
    def skipped(self) -> int:
        """Of the confirmed count, the tasks it did not take (finished): they were redone,
        deleted or restored meanwhile, or (``full``) the trash had no room for them."""
        return max(0, self.limit - self.done) if self.finished and self.limit else 0

    def match(self) -> Any:
        """The record filter of the job (task / text, group or kind), or None."""
        match: Any = task_matcher(self.task, self.text)
        if self.group:
            match = GroupMatch(self.group, match)
        if self.kind:
            match = GroupMatch(self.kind, match, by="kind")
        return match

    @property
    def percent(self) -> int:
        if self.finished:
            return 100
        return min(99, int(self.scanned * 100 / self.total)) if self.total else 0

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> BulkJob | None:
        """The job named by form fields, or None when they do not describe one."""
        action, source = str(params.get("action", "")), str(params.get("source", ""))
        queue = str(params.get("queue", ""))
        if (action, source) not in KINDS or (
            queue and not (QUEUE_NAME.match(queue) or SHARD_NAME.match(queue))
        ):
            return None

        def num(name: str) -> int:
            try:
                return max(0, min(10**12, int(params.get(name, 0))))
            except (TypeError, ValueError):
                return 0

        errors = source == "errors"
        group, batch = str(params.get("group", "")), str(params.get("batch", ""))
        kind = str(params.get("kind", ""))
        if (
            (group and not (errors and GROUP_KEY.match(group)))
            or (kind and not (errors and GROUP_KEY.match(kind)))
            or (batch and not BATCH.match(batch))
        ):
            return None
        job = cls(
            action,
            source,
            queue,
            str(params.get("task", ""))[:200] if errors else "",
            str(params.get("text", ""))[:200] if errors else "",
            group,
            batch if errors else "",
            num("qi"),
            num("offset"),
            num("done"),
            num("scanned"),
            num("kept"),
            num("total"),
            params.get("started") == "1",
        )
        job.kind, job.limit, job.forgood = kind, num("limit"), params.get("forgood") == "1"
        job.full = params.get("full") == "1"
        return job

    def fields(self) -> dict[str, str]:
        """Form fields that carry the job to its next step."""
        skip = ("started", "finished", "forgood", "full")
        out = {k: str(v) for k, v in asdict(self).items() if k not in skip}
        out["started"] = "1"
        for flag in ("forgood", "full"):
            if getattr(self, flag):
                out[flag] = "1"
        return out

    def describe(self) -> str:
        parts = [f"{self.action} {self.source}", f"queue={self.queue or '*'}"]
        if self.task:
            parts.append(f"task~{self.task}")
        if self.text:
            parts.append(f"text~{self.text}")
        if self.group:
            parts.append(f"group={self.group}")
        if self.kind:
            parts.append(f"kind={self.kind}")
        if self.limit:
            parts.append(f"at most {self.limit}")
        if self.batch:
            parts.append(f"batch={self.batch}")
        return " ".join(parts)


def start(storage: Storage, job: BulkJob, queues: Sequence[str]) -> None:
    """Count the sets the job walks. A ``total`` the form carries (the count its
    confirmation stated, for a job on "the oldest N") caps it: tasks that failed or arrived
    between the confirmation and the start are left alone."""
    stats = monitor.queue_stats(storage, queues, minutes=0)
    if job.source == "errors":
        counted = sum(s.errors for s in stats)
    else:
        counted = sum(s.pending for s in stats)
    job.total = min(counted, job.total) if job.total and not job.filtered else counted
    job.started = True


def step(
    storage: Storage, job: BulkJob, queues: Sequence[str], *, batch: int, seconds: float
) -> int:
    """Work on ``job`` for about ``seconds`` (at least one batch); returns tasks done now.

    It takes no more than the confirmed ``limit``; a console delete (``batch``) not
    confirmed ``forgood`` takes no more than the trash keeps of each queue (``full``: it
    left some behind)."""
    deadline = time.monotonic() + seconds
    match = job.match()
    before = job.done
    size = batch
    while True:
        # the sets were counted at the start: tasks that fail again or arrive meanwhile are
        # not chased (a redo of errors that fail again at once would never end)
        remaining = job.total - job.scanned
        wanted = job.limit - job.done if job.limit else remaining
        if job.qi >= len(queues) or remaining <= 0 or wanted <= 0:
            job.finished = True
            break
        q = queues[job.qi]
        strict = job.action == "delete" and bool(job.batch) and not job.forgood
        room = storage.errors.trash_room(q, job.batch) if strict else wanted
        if room <= 0:  # this queue's trash is full: what is left of it stays
            job.full, job.qi, job.offset = True, job.qi + 1, 0
            continue
        batch = max(1, min(size, remaining))
        if match is not None:
            rows = monitor.oldest_errors(storage, q, job.offset, batch)
            ids = [r.id for r in rows if r.record is not None and match(r.record)]
            ids = ids[: min(wanted, room)]
            if job.action == "redo":
                n = storage.errors.redo_errors(q, job.batch, ids) if job.batch else \
                    storage.tasks.requeue(q, "error", ids)  # fmt: skip
            elif job.batch:
                n, _, kept = storage.errors.trash_errors(q, job.batch, ids, keep_only=strict)
                job.kept += kept
            else:
                n = storage.tasks.remove(q, ids)[0]
            job.done += n
            job.scanned += len(rows)
            job.offset += len(rows) - n
            taken = len(rows)
        elif job.source == "errors" and job.action == "redo":
            batch = min(batch, wanted)
            if job.batch:
                taken = storage.errors.redo_errors(q, job.batch, oldest=batch)
            else:
                taken = storage.tasks.requeue(q, "error", oldest=batch)
            job.done += taken
            job.scanned += taken
        elif job.source == "errors" and job.batch:
            batch = min(batch, wanted, room)
            n, taken, kept = storage.errors.trash_errors(
                q, job.batch, oldest=batch, keep_only=strict
            )
            job.done += n
            job.kept += kept
            job.scanned += taken
        else:
            n, taken = storage.tasks.remove(q, purge=job.source, limit=batch)
            job.done += n
            job.scanned += taken
        if taken == 0:  # this queue is done: the next one, without counting it as a batch
            job.qi, job.offset = job.qi + 1, 0
        elif time.monotonic() >= deadline:
            break
    if job.qi >= len(queues) or job.scanned >= job.total:
        job.finished = True
    return job.done - before


@dataclass
class Scope:
    """What a bulk job will act on, as its confirmation states it (read before it runs)."""

    total: int  # tasks in the sets it walks (every error of the queues, or pending tasks)
    matched: int  # of the newest ``scanned``, those the filter or group selects
    scanned: int
    queues: list[str]
    example: str = ""  # the error of the newest task it matched (names a group in words)
    # exact: how many it acts on per queue; else the errors there are per queue (a bound)
    per_queue: dict[str, int] = field(default_factory=dict)

    @property
    def exact(self) -> bool:
        """Every task of the sets was looked at: ``matched`` is the count it will act on."""
        return self.scanned >= self.total

    def restorable(self, keeps: int) -> int:
        """Of the tasks a delete takes, how many the trash keeps (``keeps`` per queue): exact
        when the scope is; else those it certainly keeps."""
        if not self.exact:
            return min(self.matched, sum(min(n, keeps) for n in self.per_queue.values()))
        return sum(min(n, keeps) for n in self.per_queue.values())

    def for_good(self, keeps: int) -> int:
        """Of the tasks a delete takes, how many the trash cannot keep (an upper bound when
        the scope is not exact: every error past the trash's room in a queue)."""
        if self.exact:
            return self.matched - self.restorable(keeps)
        return sum(max(0, n - keeps) for n in self.per_queue.values())


def scope(storage: Storage, job: BulkJob, queues: Sequence[str], budget: int = 500) -> Scope:
    """How many tasks ``job`` will act on: exact without a filter and for a group or a kind
    (the exact counters, ``Errors.error_counts``); with a task or text filter, the matches
    among the newest ``budget`` errors (a bounded read; the job is then bounded by the
    errors present, and a delete by the trash's room unless confirmed for good)."""
    stats = monitor.queue_stats(storage, queues, minutes=0)
    if job.source != "errors":
        total = sum(s.pending for s in stats)
        pending = {s.name: s.pending for s in stats}
        return Scope(total, total, total, list(queues), per_queue=pending)
    per = {s.name: s.errors for s in stats}
    total = sum(per.values())
    if not job.filtered:
        return Scope(total, total, total, list(queues), per_queue=per)
    if not (job.task or job.text) and bool(job.group) != bool(job.kind):
        counted, example, newest = {}, "", -1
        for q, c in storage.errors.error_counts(queues).items():
            got = c.kinds.get(job.kind) if job.kind else c.groups.get(job.group)
            if got is not None:
                counted[q] = got.count
                if int(got.info.get("at") or 0) > newest:
                    example, newest = str(got.info.get("m") or ""), int(got.info.get("at") or 0)
        n = sum(counted.values())
        return Scope(total, n, total, list(queues), example, counted)
    page = monitor.score_page(storage, "errors", queues, None, budget, match=job.match(),
                              budget=budget)  # fmt: skip
    scanned = total if page.next is None and not page.partial else page.scanned
    rec = next((r.record for r in page.rows if r.record is not None), None)
    example = str(rec.get("error") or "")[:300] if rec is not None else ""
    found: dict[str, int] = {}
    for r in page.rows:
        found[r.queue] = found.get(r.queue, 0) + 1
    return Scope(total, len(page.rows), scanned, list(queues), example,
                 found if scanned >= total else per)  # fmt: skip


def follow(storage: Storage, queues: Sequence[str], batch: str, limit: int = 1000) -> list[Row]:
    """The tasks a redo batch put back, with their records as they are now (the console's
    "after a redo" page): a row whose record is gone ended and expired, or was deleted."""
    noted = storage.errors.followed(queues, batch, limit)
    recs = monitor.fetch_records(storage, [(q, i) for q, i, _ in noted])
    return [Row(q, i, rec, score=at) for (q, i, at), rec in zip(noted, recs, strict=True)]


def held_back(storage: Storage, queues: Sequence[str], waiting: int) -> dict[str, Any]:
    """What keeps a redo's ``waiting`` tasks waiting: the queues of it that are paused, and
    each queue's rate limit with the time it implies to start every task waiting there now
    (the redo's went to the tail: ms at the limit's pace, the burst aside)."""
    out: dict[str, Any] = {"paused": [], "rates": []}
    if not waiting:
        return out
    for s in monitor.queue_stats(storage, queues, minutes=0):
        if s.paused:
            out["paused"].append(s.name)
        rate = s.limits.rate_limit
        if rate is not None:
            ms = int(s.pending * 1000 / rate.per_second)
            out["rates"].append({"queue": s.name, "rate": rate.spec, "ms": ms, "n": s.pending})
    return out


def trash(storage: Storage, queues: Sequence[str], batch: str = "", limit: int = 100) -> list[Any]:
    """The live trash batches of the queues (or the one ``batch``), newest first, each with
    up to ``limit`` of its tasks (newest failure first; none for ``limit`` 0). A batch
    whose id is in another format (an older console's, another writer's) is listed with
    ``readable`` False: its tasks are shown, it cannot be restored from the page."""
    out: list[dict[str, Any]] = []
    for q in queues:
        for b, expires, count in storage.errors.trash_batches(q):
            if batch and b != batch:
                continue
            found = storage.errors.trash_entries(q, b, limit) if limit > 0 else []
            rows = [Row(q, i, TaskRecord.from_raw(q, i, raw), score=at) for i, at, raw in found]
            rows.sort(key=lambda r: -(r.score or 0))
            out.append({"queue": q, "batch": b, "deleted": batch_time(b), "expires": expires,
                        "count": count, "rows": rows,
                        "readable": bool(BATCH.match(b))})  # fmt: skip
    out.sort(key=lambda e: e["batch"], reverse=True)
    return out


TRASH_PAGE = 50  # tasks of one page of a trash search (or of one delete)
TRASH_BUDGET = 2_000  # trash entries one page reads at most before it says "Continue"
_TCURSOR = re.compile(r"^(.{1,80}):([0-9a-f]{8,32}):(\d{1,20}):(\d{1,6})$")


def trash_search(
    storage: Storage,
    queues: Sequence[str],
    *,
    batch: str = "",
    text: str = "",
    cursor: str = "",
    limit: int = TRASH_PAGE,
    budget: int = TRASH_BUDGET,
) -> Page:
    """The deleted tasks of the queues' live trash (or of the one delete ``batch``) whose
    id, task name, arguments or error holds ``text``, a page at a time, newest delete first
    and each delete in the order Redis scans it. The cursor is ``queue:batch:scan:skip``
    (an HSCAN cursor and the entries of its step already shown: a small hash comes in one
    step): a delete made or expired between two pages moves no other one's tasks. A page
    reads at most ``budget`` entries (``partial`` when it ran out before filling). Rows are
    :class:`Row` with ``priority`` holding the batch (``score``: failed at)."""
    match = task_matcher("", text)
    at = _TCURSOR.match(cursor or "")
    rows: list[Row] = []
    scanned = 0
    for q in sorted(queues):
        if at and q < at[1]:
            continue
        listed = [b for b, _, _ in storage.errors.trash_batches(q)]  # newest first
        if at and q == at[1] and at[2] in listed:  # resume where the cursor's delete stands
            listed = listed[listed.index(at[2]) :]
        elif at and q == at[1]:  # that delete is gone (restored, expired): the older ones
            listed = [b for b in listed if b < at[2]]
        for b in listed:
            if (batch and b != batch) or not BATCH.match(b):
                continue
            resume = at is not None and (q, b) == (at[1], at[2])
            scan, skip = (int(at[3]), int(at[4])) if at and resume else (0, 0)
            at = None
            while True:
                if len(rows) >= limit or scanned >= budget:
                    return Page(rows, f"{q}:{b}:{scan}:{skip}", scanned, len(rows) < limit)
                nxt, entries = storage.errors.trash_scan(
                    q, b, scan, limit if match is None else 200
                )
                for n, (i, when, raw) in enumerate(entries[skip:], start=skip):
                    scanned += 1
                    if match is not None and not match.may_match(i, raw):
                        continue  # ruled out from its raw text, without parsing it
                    rec = TaskRecord.from_raw(q, i, raw)
                    if match is None or match(rec):
                        rows.append(Row(q, i, rec, score=when, priority=b))
                    if (len(rows) >= limit or scanned >= budget) and n + 1 < len(entries):
                        return Page(rows, f"{q}:{b}:{scan}:{n + 1}", scanned, len(rows) < limit)
                if nxt == 0:
                    break
                scan, skip = nxt, 0
    return Page(rows, None, scanned)
