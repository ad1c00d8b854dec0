"""What the console's pages, its JSON API and the ``ztq`` command show of workers, queues
and tasks, built from the read models (:mod:`ztq.core.monitor.queues`).

The same dicts feed the templates, ``/api/...`` and ``ztq ... --json``, so they never
disagree.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from ztq.core.client.options import TASK_ID
from ztq.core.engine.keys import QUEUE_NAME, SHARD_NAME, split_shard
from ztq.core.engine.read_models.listing_reads import set_sizes
from ztq.core.engine.record import TaskRecord
from ztq.core.engine.storage import Storage
from ztq.core.engine.workers import WorkerInfo, autoscale_of
from ztq.core.monitor import queues as monitor
from ztq.core.monitor import timings
from ztq.core.monitor.groups import add_traces, counted_groups
from ztq.core.monitor.workers import WorkerPage, fleet, list_workers, page_workers

ARG_LIMIT = 160  # characters of arguments shown on list pages
API_TEXT_LIMIT = 65536  # characters of arguments / traceback in API answers


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _number(value: Any) -> Any:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _progress(rec: TaskRecord | None) -> Any:
    if rec is None:
        return None
    try:
        return rec.progress
    except (TypeError, ValueError):  # not JSON, or not a string (a foreign writer)
        return rec.get("progress")


def worker_view(info: WorkerInfo, records: dict[tuple[str, str], TaskRecord | None]) -> dict:
    d = info.data
    now = info.now
    threads = []
    current = c if isinstance(c := d.get("current"), dict) else {}
    for name, cur in sorted(current.items()):
        if not isinstance(cur, dict):
            continue
        started = _num(cur.get("started"))
        rec = records.get((str(cur.get("queue", "")), str(cur.get("id", ""))))
        own = _num(_number(rec.get("started"))) if rec is not None else None
        if own and 0 < own <= now * 1000 + 60_000:  # the run's own start, as Redis wrote it
            started = own / 1000
        until = now
        if info.status == "lost":  # its runtime stops at its last report, not growing
            until = min(now, info.reported) if info.reported else now
        threads.append(
            {
                "thread": str(name),
                "id": str(cur.get("id", "")),
                "queue": str(cur.get("queue", "")),
                "task": str(cur.get("task", "")),
                "started": int(started * 1000) if started else None,
                "runtime_ms": max(0, int((until - started) * 1000)) if started else None,
                "now": task_now(info, rec) if info.status == "lost" else None,
                "progress": _progress(rec),
                "comment": str(cur.get("comment") or (rec.get("comment") if rec else "") or ""),
            }
        )
    started = _num(d.get("started"))
    per_queue = t if isinstance(t := d.get("threads"), dict) else {}
    return {
        "id": info.id,
        "name": str(d.get("name") or info.id),
        "status": info.status,
        "host": str(d.get("host", "")),
        "ip": str(d.get("ip", "")),
        "pid": d.get("pid"),
        "cpu_percent": _num(d.get("cpu_percent")),
        "mem_percent": _num(d.get("mem_percent")),
        "mem_total": _num(d.get("mem_total")),
        "rss": _num(d.get("rss")),
        "started": int(started * 1000) if started else None,
        "reported": int(info.reported * 1000) if info.reported else None,
        "report_age_ms": int(info.age * 1000),
        "pool": d.get("pool") if isinstance(d.get("pool"), list) else [],
        "threads": {str(q): n for q, n in per_queue.items() if isinstance(n, int)},
        "config_editable": bool(d.get("config_editable")),
        "autoscale": autoscale_of(d),
        "done": d.get("done") if isinstance(d.get("done"), int) else None,
        "failed": d.get("failed") if isinstance(d.get("failed"), int) else None,
        "current": threads,
    }


def task_now(info: WorkerInfo, rec: TaskRecord | None) -> dict[str, str]:
    """What a lost worker's last task is now, read from its record (the heartbeat only says
    what the worker ran when it last reported): ``state`` is ``leased`` (still this worker's
    until its lease runs out), ``elsewhere`` (running again on ``worker``), ``queued``
    (back to run), ``done``, ``error`` or ``gone`` (ended, its record expired or deleted);
    ``worker``: who ended or runs it, when not this worker."""
    if rec is None:
        return {"state": "gone", "worker": ""}
    state, by = rec.state.value, str(rec.get("worker") or rec.get("failed_worker") or "")
    other = by if by and by != info.id else ""
    if state == "running":
        return {"state": "elsewhere" if other else "leased", "worker": other}
    if state in ("queued", "delayed"):
        return {"state": "queued", "worker": ""}
    if state in ("done", "error"):
        return {"state": state, "worker": other}
    return {"state": "gone", "worker": ""}


def worker_rows(storage: Storage, infos: list[WorkerInfo]) -> list[dict]:
    """The views of these workers, with the progress of the tasks they run (1 round trip)."""
    wanted: list[tuple[str, str]] = []
    for info in infos:
        current = info.data.get("current")
        if isinstance(current, dict):
            for cur in current.values():
                if isinstance(cur, dict) and cur.get("queue") and cur.get("id"):
                    wanted.append((str(cur["queue"]), str(cur["id"])))
    wanted = [(q, i) for q, i in wanted if _valid_pair(q, i)]
    recs = dict(zip(wanted, monitor.fetch_records(storage, wanted), strict=True))
    return [worker_view(info, recs) for info in infos]


def workers(storage: Storage, lost_after: float) -> list[dict]:
    """Every worker with its threads' current tasks and their progress (2 round trips):
    every heartbeat is read, so the console pages with :func:`worker_page` instead."""
    return worker_rows(storage, list_workers(storage, lost_after))


def worker_page(
    storage: Storage,
    lost_after: float,
    *,
    status: str = "",
    start: int = 0,
    limit: int = 50,
) -> tuple[list[dict], WorkerPage]:
    """One page of workers in name order (all, or those of one status) as :func:`workers`
    shows them: the heartbeats of the page are read, no other."""
    page = page_workers(storage, lost_after, status=status, start=start, limit=limit)
    return worker_rows(storage, page.workers), page


def fleet_dict(storage: Storage, lost_after: float) -> dict[str, Any]:
    """Workers per status, live threads per queue and busy ones, total (see :func:`fleet`)."""
    f = fleet(storage, lost_after)
    return {"counts": f.counts, "total": f.total, "threads": f.threads, "busy": f.busy,
            "paused_threads": f.paused}  # fmt: skip


def _drain_ms(pending: int, rate: Any) -> int | None:
    """The time a queue's rate limit implies for ``pending`` waiting tasks (ms): the first
    ``burst`` start at once, the rest one per token; None without a limit or a wait."""
    if rate is None or pending <= 0:
        return None
    return int(max(0, pending - rate.burst) / rate.per_second * 1000)


def _valid_pair(queue: str, task_id: str) -> bool:
    """A (queue or shard, task id) a heartbeat may name."""
    return bool((QUEUE_NAME.match(queue) or SHARD_NAME.match(queue)) and TASK_ID.match(task_id))


def _cut(text: str, limit: int) -> tuple[str, bool]:
    return (text, False) if len(text) <= limit else (text[:limit], True)


def task_dict(rec: TaskRecord, *, full: bool = False) -> dict[str, Any]:
    """A task record for the API; ``full`` adds arguments, traceback and result (capped)."""
    meta = rec.meta
    out: dict[str, Any] = {
        "id": rec.id,
        "queue": rec.queue,
        "task": rec.task,
        "state": rec.state.value,
        "priority": rec.priority,
    }
    for key in (
        "enqueued",
        "due",
        "started",
        "ended",
        "failed",
        "attempts",
        "failures",
        "lost",
        "redone",
    ):
        if meta.get(key) is not None:
            out[key] = meta[key]
    for key in (
        "key",
        "worker",
        "thread",
        "failed_worker",
        "error",
        "comment",
    ):  # key: a task's key
        if meta.get(key):
            out[key] = str(meta[key])
    if meta.get("progress") is not None:
        out["progress"] = _progress(rec)
    if rec.payload_error:
        out["payload_error"] = rec.payload_error
    if full:
        if len(rec.payload_text) > API_TEXT_LIMIT:
            out["payload_truncated"] = rec.payload_text[:API_TEXT_LIMIT]
        else:
            out["args"] = rec.args
            out["kwargs"] = rec.kwargs
        out["options"] = rec.options
        if meta.get("traceback"):
            out["traceback"], out["traceback_truncated"] = _cut(
                str(meta["traceback"]), API_TEXT_LIMIT
            )
        text = str(meta.get("result") or "")
        if len(text) > API_TEXT_LIMIT:  # over the cap: the start of its JSON text
            out["result_truncated"] = text[:API_TEXT_LIMIT]
        elif text:  # the value the task returned (stored as JSON text), not a string of JSON
            try:
                out["result"] = json.loads(text)
            except ValueError:  # not JSON (written by something else than ztq): as it is
                out["result_text"] = text
    else:
        preview = json.dumps([rec.payload.get("args", []), rec.payload.get("kwargs", {})])
        out["call"], out["call_truncated"] = _cut(preview, ARG_LIMIT)
    return out


def row_dict(row: monitor.Row, score_name: str = "") -> dict[str, Any]:
    if row.record is None:
        out: dict[str, Any] = {"id": row.id, "queue": row.queue, "state": "none"}
    else:
        out = task_dict(row.record)
    if score_name and row.score is not None:
        out[score_name] = row.score
    if row.position is not None:
        out["position"] = row.position
    return out


def now_ms() -> int:
    return int(time.time() * 1000)


def queues(
    storage: Storage, names: Sequence[str], lost_after: float, *, fold: bool = True
) -> list[dict[str, Any]]:
    """Stats of the queues with the threads of live workers serving each (5 round trips; the
    threads come from the workers' summaries, see :func:`ztq.core.monitor.workers.fleet`). A sharded
    queue is one row, its shards folded in (``shards``: their names); ``fold=False`` gives
    a row per name, shards as they are (a shard shows the threads of its queue)."""
    stats = monitor.folded_stats(storage, names) if fold else monitor.queue_stats(storage, names)
    live = fleet(storage, lost_after)
    serving = live.threads
    now = now_ms()
    out = []
    for s in stats:
        out.append(
            {
                "name": s.name,
                "ready": s.ready,
                "pending": s.pending,
                "keyed": s.keyed,  # of them, waiting in their keys' lists
                "delayed": s.delayed,
                "running": s.running,
                "errors": s.errors,
                "paused": s.paused,
                "threads": serving.get(split_shard(s.name)[0], 0),
                # of those, the threads of paused workers: they take no task
                "paused_threads": live.paused.get(split_shard(s.name)[0], 0),
                # how long the rate limit alone takes to start the tasks waiting now
                "rate_drain_ms": _drain_ms(s.pending, s.limits.rate_limit),
                "head_age_ms": now - s.head_enqueued if s.head_enqueued else None,
                "first_error": s.first_error,
                "last_error": s.last_error,
                "throughput": s.throughput,
                "done_hour": sum(d for _, d, _ in s.throughput),
                "failed_hour": sum(f for _, _, f in s.throughput),
                "expired_hour": s.window.expired,  # not started before their expiry
                **timings.summary(s.window),  # wait_ms / run_ms: p50, p95, p99 of the hour
                "shards": s.shards,
                "overflow": s.overflow,  # buffered tasks (when_full = buffer)
                "max_pending": s.limits.max_pending,
                "when_full": s.limits.when_full if s.limits.max_pending else None,
                "full": s.full,
                "rate_limit": str(s.limits.rate_limit) if s.limits.rate_limit else None,
                "task_rates": {n: str(r) for n, r in s.limits.task_rates},
                "rate_held": s.rate_held,  # ready tasks the rate limit holds back now
            }
        )
    return out


# -- the console's first page (docs/console.md, "Overview") ---------------------------------
OVERVIEW_GROUPS = 5  # the biggest error groups the overview lists (exact: the counters)
SHARE_MINUTES = 15  # the overview's failed share: runs of the last 15 minutes (the page says)


def nav_counts(storage: Storage, names: Sequence[str], lost_after: float) -> dict[str, int]:
    """What the navigation shows next to its links: tasks in error and running (ZCARD per
    queue, one round trip) and lost workers (:func:`fleet`, 2 round trips)."""
    k = storage.keys
    replies = set_sizes(storage, [key for q in names for key in (k.errors(q), k.running(q))])
    lost = fleet(storage, lost_after).counts.get("lost", 0)
    return {"errors": sum(replies[0::2]), "running": sum(replies[1::2]), "workers": lost}


def incident(storage: Storage, names: Sequence[str], lost_after: float) -> dict[str, Any]:
    """The overview: queues with the failing ones first (errors, failed share of the runs of
    the last :data:`SHARE_MINUTES` minutes, oldest wait, live threads), the
    :data:`OVERVIEW_GROUPS` biggest error groups of every error (the exact counters:
    O(groups)), and the lost workers."""
    rows = queues(storage, names, lost_after)
    for q in rows:
        recent = q["throughput"][-SHARE_MINUTES:]  # so that the share falls after a fix
        q["done_recent"] = sum(d for _, d, _ in recent)
        q["failed_recent"] = sum(f for _, _, f in recent)
        runs = q["done_recent"] + q["failed_recent"]
        q["error_rate"] = q["failed_recent"] / runs if runs else None
        q["failing"] = bool(q["errors"] or q["failed_hour"])
    rows.sort(key=lambda q: (not q["failing"], -q["errors"], -(q["error_rate"] or 0), q["name"]))
    groups = counted_groups(storage, names)
    add_traces(storage, groups[:OVERVIEW_GROUPS])
    lost, _ = worker_page(storage, lost_after, status="lost", limit=10)
    return {
        "queues": rows,
        "groups": groups[:OVERVIEW_GROUPS],
        "group_count": len(groups),
        "errors": sum(q["errors"] for q in rows),
        "lost": lost,
        "fleet": fleet_dict(storage, lost_after),
    }
