"""Queues (工作队列): counts, age, errors and throughput per queue; a queue's pending tasks."""

from __future__ import annotations

from typing import Any

from pyramid.view import view_config

from ztq.console.fmt import timechart
from ztq.console.security import OPERATE
from ztq.console.web import (
    audit,
    back,
    flash,
    int_param,
    known_queues,
    not_found,
    page_size,
    valid_queue,
)
from ztq.core import monitor, timings
from ztq.core import overview as overview_
from ztq.core.errors import InvalidOption
from ztq.core.keys import split_shard
from ztq.core.workers import serving


def overview(
    request: Any, queues: list[str] | None = None, *, fold: bool = True
) -> list[dict[str, Any]]:
    """Stats of the queues with the threads serving each (shared with the JSON API); a
    sharded queue is one row unless ``fold`` is False."""
    names = queues if queues is not None else known_queues(request)
    lost_after = request.registry.ztq_settings.lost_after
    return overview_.queues(request.storage, names, lost_after, fold=fold)


def _queue_or_404(request: Any) -> str:
    name = request.matchdict["name"]
    if not valid_queue(name) or not monitor.queue_exists(request.storage, name):
        raise not_found(request.t("No queue named {name}.", name=name))
    return str(name)


@view_config(route_name="queues", request_method="GET", renderer="queues.jinja2")
def queues_page(request: Any) -> dict[str, Any]:
    queues = overview(request)
    totals = {
        key: sum(q[key] for q in queues)
        for key in (
            "pending",
            "delayed",
            "running",
            "errors",
            "threads",
            "done_hour",
            "failed_hour",
        )
    }
    return {"queues": queues, "totals": totals, "serving": served_by(request, queues)}


def served_by(request: Any, queues: list[dict[str, Any]]) -> dict[str, list[tuple[str, int]]]:
    """The live workers serving each of these queues (ZTQ's 工作端 column), by row name."""
    lost_after = request.registry.ztq_settings.lost_after
    workers = serving(request.storage, lost_after).workers
    return {q["name"]: workers.get(split_shard(q["name"])[0], []) for q in queues}


@view_config(route_name="queue", request_method="GET", renderer="queue.jinja2")
def queue_page(request: Any) -> dict[str, Any]:
    name = _queue_or_404(request)
    is_shard = split_shard(name)[1] > 0
    [q] = overview(request, [name], fold=not is_shard)
    # a sharded queue lists its shards, each with its own page of pending tasks
    shards = overview(request, q["shards"], fold=False) if q["shards"] else []
    limit = page_size(request)
    start = int_param(request, "start", 0, 0, 10**12)
    page = None if shards else monitor.pending_page(request.storage, name, start, limit)
    day = timings.day_slots(request.storage, q["shards"] or name)
    q["max_running"] = request.storage.queue_config(name).get("max_running")
    times = {which: timechart(day, which) for which in ("wait", "run")}
    return {"q": q, "shards": shards, "shard_of": split_shard(name)[0] if is_shard else "",
            "page": page, "start": start, "limit": limit, "times": times,
            "serving": served_by(request, [q])[q["name"]]}  # fmt: skip


@view_config(route_name="queue_state", request_method="POST", permission=OPERATE)
def queue_state(request: Any) -> Any:
    name = _queue_or_404(request)
    action = request.POST.get("action")
    if action == "pause":
        request.storage.pause(name)
        flash(request, request.t("Paused {name}: workers take no new tasks from it.", name=name))
    elif action == "resume":
        request.storage.resume(name)
        flash(request, request.t("Resumed {name}.", name=name))
    elif action == "limit":
        raw = str(request.POST.get("max_running", "")).strip()
        if raw and not (raw.isdigit() and 1 <= int(raw) <= 10_000):
            msg = request.t("Running limit: a number from 1 to 10000, or empty for none.")
            flash(request, msg, "error")
            return back(request, request.route_path("queue", name=name))
        try:
            request.storage.configure(name, max_running=int(raw) if raw else None)
        except InvalidOption as exc:  # a sharded queue
            flash(request, str(exc), "error")
            return back(request, request.route_path("queue", name=name))
        if raw:
            n = int(raw)
            flash(
                request,
                request.t("{name}: at most {n} tasks at once, on all workers.", name=name, n=n),
            )
        else:
            flash(request, request.t("{name}: no running limit.", name=name))
        audit(request, "limit queue", queue=name, detail=f"max_running={raw or 'none'}")
        return back(request, request.route_path("queue", name=name))
    else:
        flash(request, request.t("Unknown command."), "error")
        return back(request, request.route_path("queue", name=name))
    audit(request, f"{action} queue", queue=name)
    return back(request, request.route_path("queue", name=name))
