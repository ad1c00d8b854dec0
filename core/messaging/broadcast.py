"""Broadcast tasks: ``fn.broadcast(...)`` runs a task once on every live worker serving its
queue (reload a config, clear a local cache, rotate a log), each run recorded.

A queue's broadcasts are a capped stream (``ztq:{q}:broadcasts``). Every worker reads it
from its own position, which it takes when it joins the queue's listeners (the newest
broadcast then): it runs every broadcast sent after it joined, in order, once, and none
sent before (unless its app's ``broadcast_catch_up`` asks for the last seconds of them).
Workers renew their presence with each heartbeat in ``ztq:{q}:listeners``; sending a
broadcast records the live listeners as the workers it is meant for, and each run writes
its start and end into the broadcast's record and the ``broadcast-runs`` stream, which a
sender waiting on the handle blocks on. See docs/channels.md.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ztq.core.client.apps import app_or_default
from ztq.core.client.calls import TaskCall
from ztq.core.engine.features import broadcast_streams as streams
from ztq.core.engine.scripts import Op
from ztq.core.engine.storage import Storage
from ztq.core.errors import NotFound, ResultTimeout

if TYPE_CHECKING:
    from ztq.core.client.app import App

BROADCASTS_MAXLEN = 1_000  # broadcasts kept per queue (what a catching-up worker can run)
RUNS_MAXLEN = 10_000  # run starts and ends kept per queue
RECORD_TTL_MS = 24 * 3_600_000  # a broadcast's record (its runs) is kept this long
RETENTION_MS = 24 * 3_600_000  # listeners silent this long are forgotten
FINAL = ("done", "failed", "lost")


@dataclass(frozen=True)
class BroadcastRun:
    """One worker's run of a broadcast. ``state``: ``pending`` (not started), ``running``,
    ``done``, ``failed``, or ``lost`` (the worker stopped or died, or restarted since, and
    will not run it). ``expected``: the worker was a live listener when it was sent (a
    worker that joined meanwhile may run it too). Times are epoch seconds."""

    worker: str
    state: str
    started: float | None = None
    ended: float | None = None
    error: str = ""
    result: Any = None
    expected: bool = True

    @property
    def finished(self) -> bool:
        return self.state in FINAL


@dataclass(frozen=True)
class BroadcastHandle:
    """What ``fn.broadcast()`` returns: the broadcast's id, its queue, and the workers it
    was meant for; :meth:`runs` and :meth:`wait` tell how each run went."""

    id: str
    queue: str
    task: str = ""
    sent: float = 0.0
    targets: tuple[str, ...] = ()
    connection: str = "default"
    app: App | None = field(default=None, repr=False, compare=False)

    @property
    def storage(self) -> Storage:
        return app_or_default(self.app).connections.get(self.connection)

    def runs(self) -> list[BroadcastRun]:
        """Each worker's run, by worker id: the workers it was meant for, and any other
        that ran it. Raises :class:`NotFound` when the record expired (after 24 h)."""
        return read_runs(self.storage, self.queue, self.id)[0]

    def wait(self, timeout: float = 60.0) -> list[BroadcastRun]:
        """Block until every run has finished (done, failed or lost); returns the runs.
        :class:`ResultTimeout` after ``timeout`` seconds. Waiting reads the queue's
        ``broadcast-runs`` stream (every start and end adds to it), so it costs the
        workers nothing; a worker's death is seen when its presence runs out."""
        storage = self.storage
        deadline = time.monotonic() + timeout
        while True:
            after = streams.last_run_id(storage, self.queue)
            runs, next_expiry = read_runs(storage, self.queue, self.id)
            if all(r.finished for r in runs):
                return runs
            left = deadline - time.monotonic()
            if left <= 0:
                waiting = ", ".join(f"{r.worker} {r.state}" for r in runs if not r.finished)
                raise ResultTimeout(f"broadcast {self.id} of {self.task}: still {waiting}")
            wait = left if next_expiry is None else min(left, max(next_expiry, 0.001))
            streams.wait_for_runs(storage, self.queue, after, wait)


def send_broadcast(call: TaskCall) -> BroadcastHandle:
    """Send ``call`` to every live worker of its queue (the queue itself for a sharded
    one: broadcasts do not use shards); one script call."""
    app = app_or_default(call.app)
    storage = app.connections.get(call.connection)
    storage.queues.register_queue(call.queue)
    bid = uuid.uuid4().hex
    k = storage.keys
    keys = [k.broadcasts(call.queue), k.listeners(call.queue), k.broadcast(call.queue, bid)]
    args = [bid, call.task, call.payload(), RECORD_TTL_MS, BROADCASTS_MAXLEN]
    _, sent, *targets = storage.call("broadcast", keys, args)
    return BroadcastHandle(bid, call.queue, call.task, int(sent) / 1000,
                           tuple(str(w) for w in targets), call.connection, call.app)  # fmt: skip


def broadcast_handle(
    queue: str, broadcast_id: str, *, connection: str = "default", app: App | None = None
) -> BroadcastHandle:
    """The handle of a broadcast sent earlier (e.g. by another process)."""
    storage = app_or_default(app).connections.get(connection)
    rec = streams.broadcast_head(storage, queue, broadcast_id)
    if rec[1] is None:
        raise NotFound(f"no broadcast {broadcast_id} in queue {queue} (older than a day?)")
    targets = tuple(w for w in (rec[2] or "").split("\n") if w)
    return BroadcastHandle(broadcast_id, queue, rec[0] or "", int(rec[1]) / 1000, targets,
                           connection, app)  # fmt: skip


# -- reading runs ---------------------------------------------------------------------------
def read_runs(
    storage: Storage, queue: str, broadcast_id: str
) -> tuple[list[BroadcastRun], float | None]:
    """(each worker's run, seconds until the presence of a worker it still waits for runs
    out, or None), in one round trip."""
    rec, presence, joined, now = streams.broadcast_state(storage, queue, broadcast_id)
    if not rec:
        raise NotFound(f"no broadcast {broadcast_id} in queue {queue} (older than a day?)")
    return runs_of(rec, presence, joined, now)


def runs_of(
    rec: dict[str, str], presence: dict[str, float], joined: dict[str, str], now: int
) -> tuple[list[BroadcastRun], float | None]:
    """The runs of a broadcast's record, given the listeners' presence deadlines (ms), the
    newest broadcast when each joined, and Redis's clock ``now`` (ms)."""
    entry = _id(rec.get("entry"))
    targets = [w for w in rec.get("targets", "").split("\n") if w]
    found = {f[2:]: _decode(v) for f, v in rec.items() if f.startswith("w:")}
    runs: list[BroadcastRun] = []
    soonest: float | None = None
    for worker in sorted(set(targets) | set(found)):
        run = found.get(worker, {})
        state = str(run.get("state", "pending"))
        started = run.get("started")
        if state in ("pending", "running"):
            until = presence.get(worker)
            if until is None or until < now or _id(joined.get(worker)) >= entry:
                state = "lost"  # gone, or (re)started after it was sent: it will not run it
            else:
                left = (until - now) / 1000
                soonest = left if soonest is None else min(soonest, left)
        runs.append(
            BroadcastRun(
                worker=worker,
                state=state,
                started=started / 1000 if isinstance(started, (int, float)) else None,
                ended=run["ended"] / 1000 if isinstance(run.get("ended"), (int, float)) else None,
                error=str(run.get("error", "")),
                result=_result(run.get("result")),
                expected=worker in targets,
            )
        )
    return runs, soonest


def _id(text: str | None) -> tuple[int, int]:
    """A stream entry id as a pair that compares in stream order."""
    ms, _, seq = (text or "0-0").partition("-")
    return (int(ms), int(seq or 0)) if ms.isdigit() and seq.isdigit() else (0, 0)


def _decode(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _result(text: Any) -> Any:
    if not isinstance(text, str) or not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def recent_broadcasts(
    storage: Storage, queues: Sequence[str], per_queue: int = 5
) -> list[dict[str, Any]]:
    """The last broadcasts of ``queues``, newest first, each with its runs (the console):
    two round trips."""
    sent, where, now = streams.recent_records(storage, queues, per_queue)
    out: list[dict[str, Any]] = []
    for q, f, rec in sent:
        presence, joined = where[q] if rec else ({}, {})
        runs = runs_of(rec, presence, joined, now)[0] if rec else []
        out.append({"queue": q, "id": f.get("id", ""), "task": f.get("task", ""),
                    "sent": int(f.get("sent", 0)), "runs": runs, "kept": bool(rec)})  # fmt: skip
    out.sort(key=lambda b: b["sent"], reverse=True)
    return out


# -- the worker's side ----------------------------------------------------------------------
def listen_op(storage: Storage, queue: str, op: str, worker: str, presence_ms: int) -> Op:
    """``join``, ``beat`` or ``leave`` the listeners of ``queue``'s broadcasts."""
    k = storage.keys
    keys = [k.listeners(queue), k.listeners_joined(queue), k.broadcasts(queue)]
    return ("listen", keys, [op, worker, int(presence_ms), RETENTION_MS])


def record_run(
    storage: Storage,
    queue: str,
    broadcast_id: str,
    worker: str,
    state: str,
    error: str = "",
    result: str = "",
) -> bool:
    """Write a run's start (``running``) or end (``done``, ``failed``)."""
    k = storage.keys
    keys = [k.broadcast(queue, broadcast_id), k.broadcast_runs(queue)]
    args = [broadcast_id, worker, state, error[:2000], result[:65536], RUNS_MAXLEN]
    return bool(storage.call("broadcast_run", keys, args))
