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

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ztq.core.engine.keys import QUEUE_NAME, SHARD_NAME
from ztq.core.engine.storage import Storage
from ztq.core.monitor import queues as monitor
from ztq.core.monitor.filters import task_matcher

KINDS = {
    ("redo", "errors"),
    ("delete", "errors"),
    ("delete", "ready"),
}


@dataclass
class BulkJob:
    action: str  # redo | delete
    source: str  # errors | ready
    queue: str = ""  # '' = every queue
    task: str = ""  # filters (errors only): task name contains / text in the record
    text: str = ""
    qi: int = 0  # position: queue index, and offset of unmatched errors in that queue
    offset: int = 0
    done: int = 0  # tasks redone or deleted so far
    scanned: int = 0
    total: int = 0  # size of the sets when the job started
    started: bool = False
    finished: bool = False

    @property
    def filtered(self) -> bool:
        return bool(self.task or self.text)

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

        job = cls(
            action,
            source,
            queue,
            str(params.get("task", ""))[:200] if source == "errors" else "",
            str(params.get("text", ""))[:200] if source == "errors" else "",
            num("qi"),
            num("offset"),
            num("done"),
            num("scanned"),
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
        return " ".join(parts)


def start(storage: Storage, job: BulkJob, queues: Sequence[str]) -> None:
    stats = monitor.queue_stats(storage, queues, minutes=0)
    if job.source == "errors":
        job.total = sum(s.errors for s in stats)
    else:
        job.total = sum(s.pending for s in stats)
    job.started = True


def step(
    storage: Storage, job: BulkJob, queues: Sequence[str], *, batch: int, seconds: float
) -> int:
    """Work on ``job`` for about ``seconds`` (at least one batch); returns tasks done now."""
    deadline = time.monotonic() + seconds
    match = task_matcher(job.task, job.text)
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
                n = storage.requeue(q, "error", ids)
            else:
                n = storage.remove(q, ids)[0]
            job.done += n
            job.scanned += len(rows)
            job.offset += len(rows) - n
            taken = len(rows)
        elif job.source == "errors" and job.action == "redo":
            taken = storage.requeue(q, "error", oldest=batch)
            job.done += taken
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
