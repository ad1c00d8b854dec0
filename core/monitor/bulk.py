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
from dataclasses import asdict, dataclass
from typing import Any

from ztq.core.engine.keys import QUEUE_NAME, SHARD_NAME
from ztq.core.engine.record import TaskRecord
from ztq.core.engine.storage import Storage
from ztq.core.monitor import queues as monitor
from ztq.core.monitor.filters import task_matcher
from ztq.core.monitor.groups import GROUP_KEY, GroupMatch
from ztq.core.monitor.pages import Row

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
    """When a batch began (ms), from its id."""
    return int(batch[:-6] or "0", 16)


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

    @property
    def filtered(self) -> bool:
        return bool(self.task or self.text or self.group)

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
        if (group and not (errors and GROUP_KEY.match(group))) or (
            batch and not BATCH.match(batch)
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
        return job

    def fields(self) -> dict[str, str]:
        """Form fields that carry the job to its next step."""
        out = {k: str(v) for k, v in asdict(self).items() if k not in ("started", "finished")}
        out["started"] = "1"
        return out

    def describe(self) -> str:
        parts = [f"{self.action} {self.source}", f"queue={self.queue or '*'}"]
        if self.task:
            parts.append(f"task~{self.task}")
        if self.text:
            parts.append(f"text~{self.text}")
        if self.group:
            parts.append(f"group={self.group}")
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
    """Work on ``job`` for about ``seconds`` (at least one batch); returns tasks done now."""
    deadline = time.monotonic() + seconds
    match = task_matcher(job.task, job.text)
    if job.group:
        match = GroupMatch(job.group, match)
    before = job.done
    while True:
        # the sets were counted at the start: tasks that fail again or arrive meanwhile are
        # not chased (a redo of errors that fail again at once would never end)
        remaining = job.total - job.scanned
        if job.qi >= len(queues) or remaining <= 0:
            job.finished = True
            break
        q = queues[job.qi]
        batch = max(1, min(batch, remaining))
        if match is not None:
            rows = monitor.oldest_errors(storage, q, job.offset, batch)
            ids = [r.id for r in rows if r.record is not None and match(r.record)]
            if job.action == "redo":
                n = storage.redo_errors(q, job.batch, ids) if job.batch else \
                    storage.requeue(q, "error", ids)  # fmt: skip
            elif job.batch:
                n, _, kept = storage.trash_errors(q, job.batch, ids)
                job.kept += kept
            else:
                n = storage.remove(q, ids)[0]
            job.done += n
            job.scanned += len(rows)
            job.offset += len(rows) - n
            taken = len(rows)
        elif job.source == "errors" and job.action == "redo":
            if job.batch:
                taken = storage.redo_errors(q, job.batch, oldest=batch)
            else:
                taken = storage.requeue(q, "error", oldest=batch)
            job.done += taken
            job.scanned += taken
        elif job.source == "errors" and job.batch:
            n, taken, kept = storage.trash_errors(q, job.batch, oldest=batch)
            job.done += n
            job.kept += kept
            job.scanned += taken
        else:
            n, taken = storage.remove(q, purge=job.source, limit=batch)
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

    @property
    def exact(self) -> bool:
        """Every task of the sets was looked at: ``matched`` is the count it will act on."""
        return self.scanned >= self.total


def scope(storage: Storage, job: BulkJob, queues: Sequence[str], budget: int = 500) -> Scope:
    """How many tasks ``job`` will act on: exact without a filter; with one, the matches
    among the newest ``budget`` errors (a bounded read, as the grouped view makes)."""
    stats = monitor.queue_stats(storage, queues, minutes=0)
    if job.source != "errors":
        total = sum(s.pending for s in stats)
        return Scope(total, total, total, list(queues))
    total = sum(s.errors for s in stats)
    if not job.filtered:
        return Scope(total, total, total, list(queues))
    match: Any = task_matcher(job.task, job.text)
    if job.group:
        match = GroupMatch(job.group, match)
    page = monitor.score_page(storage, "errors", queues, None, budget, match=match, budget=budget)
    scanned = total if page.next is None and not page.partial else page.scanned
    rec = next((r.record for r in page.rows if r.record is not None), None)
    example = str(rec.get("error") or "")[:300] if rec is not None else ""
    return Scope(total, len(page.rows), scanned, list(queues), example)


def follow(storage: Storage, queues: Sequence[str], batch: str, limit: int = 1000) -> list[Row]:
    """The tasks a redo batch put back, with their records as they are now (the console's
    "after a redo" page): a row whose record is gone ended and expired, or was deleted."""
    noted = storage.followed(queues, batch, limit)
    recs = monitor.fetch_records(storage, [(q, i) for q, i, _ in noted])
    return [Row(q, i, rec, score=at) for (q, i, at), rec in zip(noted, recs, strict=True)]


def trash(storage: Storage, queues: Sequence[str], batch: str = "", limit: int = 100) -> list[Any]:
    """The live trash batches of the queues (or the one ``batch``), newest first, each with
    up to ``limit`` of its tasks (newest failure first)."""
    out: list[dict[str, Any]] = []
    for q in queues:
        for b, expires, count in storage.trash_batches(q):
            if batch and b != batch:
                continue
            rows = [Row(q, i, TaskRecord.from_raw(q, i, raw), score=at)
                    for i, at, raw in storage.trash_entries(q, b, limit)]  # fmt: skip
            rows.sort(key=lambda r: -(r.score or 0))
            out.append({"queue": q, "batch": b, "deleted": batch_time(b), "expires": expires,
                        "count": count, "rows": rows})  # fmt: skip
    out.sort(key=lambda e: e["batch"], reverse=True)
    return out
