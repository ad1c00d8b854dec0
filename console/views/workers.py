"""Workers (工作状态): who is running, on which host, doing what; commands to them."""

from __future__ import annotations

from typing import Any

from pyramid.view import view_config

from ztq.console.security import OPERATE
from ztq.console.web import (
    audit,
    back,
    choice_param,
    flash,
    int_param,
    not_found,
    page_size,
    valid_queue,
)
from ztq.core.engine.workers import (
    COMMANDS,
    autoscale_of,
    forget_worker,
    get_worker,
    send_command,
)
from ztq.core.monitor import overview as models
from ztq.core.monitor import queues as monitor
from ztq.core.monitor import streams
from ztq.core.monitor.filters import fields_matcher
from ztq.core.monitor.workers import SHOWN, pending_commands, pending_effects

# what a pending command makes of the status the buttons offer the next step from
AFTER = {"pausing": "paused", "resuming": "running", "stopping": "stopping"}


def _lost_after(request: Any) -> float:
    return float(request.registry.ztq_settings.lost_after)


def _with_pending(request: Any, views: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each worker's view with ``pending`` (the effects of the commands it has not taken
    yet, read from Redis: :func:`ztq.core.monitor.workers.pending_effects`), ``next_status``
    (the status those commands lead to, what the buttons act on) and ``sig`` (what the
    page's script compares with ``?state`` to know the worker confirmed)."""
    found = pending_commands(request.storage, [w["id"] for w in views])
    for w in views:
        effects = pending_effects(found.get(w["id"], []))
        w["pending"] = effects
        w["next_status"] = AFTER.get(str(effects["status"]), w["status"])
        threads = ",".join(f"{q}={n}" for q, n in sorted(w["threads"].items()))
        pinned = ",".join(q for q, a in sorted(w["autoscale"].items()) if a["pinned"])
        w["sig"] = f"{w['status']}|{threads}|{pinned}|{effects['sig']}"
    return views


@view_config(route_name="workers", request_method="GET", renderer="workers.jinja2")
def workers_page(request: Any) -> dict[str, Any]:
    """One page of workers in name order, all or those of one status; the counts come from
    the workers' summaries (see ``ztq.core.monitor.workers.fleet``), so neither reads every
    heartbeat."""
    lost_after = _lost_after(request)
    status = choice_param(request, "status", SHOWN)
    start = int_param(request, "cursor", 0, 0, 10**9)
    limit = page_size(request)
    workers, page = models.worker_page(
        request.storage, lost_after, status=status, start=start, limit=limit
    )
    _with_pending(request, workers)
    fleet = models.fleet_dict(request.storage, lost_after)
    return {
        "workers": workers,
        "page": page,
        "start": start,
        "limit": limit,
        "status": status,
        "statuses": SHOWN,
        "counts": fleet["counts"],
        "total": fleet["total"],
        "busy": fleet["busy"],
        "threads": sum(fleet["threads"].values()),
        "paused_threads": sum(fleet["paused_threads"].values()),
    }


@view_config(route_name="worker", request_method="GET", renderer="worker.jinja2")
def worker_page(request: Any) -> dict[str, Any]:
    wid = request.matchdict["id"]
    info = get_worker(request.storage, wid, _lost_after(request))
    if info is None:
        raise not_found(request.t("No worker named {name}.", name=wid))
    recs = {}
    current = info.data.get("current")
    if isinstance(current, dict):
        pairs = [
            (str(c.get("queue")), str(c.get("id")))
            for c in current.values()
            if isinstance(c, dict) and valid_queue(str(c.get("queue")))
        ]
        recs = dict(zip(pairs, monitor.fetch_records(request.storage, pairs), strict=True))
    events = streams.stream_page(
        request.storage, "events", limit=20, match=fields_matcher(worker=wid), budget=2000
    )
    w = _with_pending(request, [models.worker_view(info, recs)])[0]
    return {"w": w, "events": events, "ips": {w["id"]: w["ip"]} if w["ip"] else {}}


@view_config(route_name="worker", request_method="GET", request_param="state", renderer="json")
def worker_state(request: Any) -> dict[str, Any]:
    """``/workers/<id>?state``: what the worker page's script polls while a command is
    pending: the worker's status and threads, the commands it has not taken yet, and the
    ``sig`` its page was drawn with, to reload the page once the worker confirmed (1 + 1
    round trips: no task record is read)."""
    wid = request.matchdict["id"]
    info = get_worker(request.storage, wid, _lost_after(request))
    if info is None:
        raise not_found(request.t("No worker named {name}.", name=wid))
    w = _with_pending(request, [models.worker_view(info, {})])[0]
    return {
        "id": w["id"],
        "status": w["status"],
        "threads": w["threads"],
        "reported": w["reported"],
        "pending": w["pending"],
        "sig": w["sig"],
    }


@view_config(route_name="workers", request_method="POST", permission=OPERATE)
def worker_command(request: Any) -> Any:
    """Queue a command for a worker (refresh, pause, resume, stop, set_threads, kill,
    autoscale: an autoscaled queue its set_threads pinned goes back to the autoscaler) or
    forget a worker."""
    post = request.POST
    wid = str(post.get("worker", ""))[:200]
    cmd = post.get("cmd", "")
    done = request.route_path("workers")
    info = get_worker(request.storage, wid, _lost_after(request)) if wid else None
    if info is None:
        raise not_found(request.t("No worker named {name}.", name=wid))
    if cmd == "forget":
        forget_worker(request.storage, wid)
        audit(request, "forget worker", detail=wid)
        flash(request, request.t("Forgot worker {name}.", name=wid))
        return back(request, done)
    if cmd not in COMMANDS:
        flash(request, request.t("Unknown command."), "error")
        return back(request, done)
    args: dict[str, Any] = {}
    if cmd == "set_threads":
        queue = str(post.get("queue", ""))
        try:
            threads = int(post.get("threads", ""))
        except ValueError:
            threads = -1
        if not valid_queue(queue) or not 0 <= threads <= 256:
            flash(request, request.t("Give a queue name and 0 to 256 threads."), "error")
            return back(request, done)
        if not info.get("config_editable"):
            flash(request, request.t("This worker does not accept thread changes."), "error")
            return back(request, done)
        args = {"queue": queue, "threads": threads}
    elif cmd == "autoscale":
        queue = str(post.get("queue", ""))
        if not valid_queue(queue) or queue not in autoscale_of(info.data):
            flash(request, request.t("This worker does not autoscale that queue."), "error")
            return back(request, done)
        if not info.get("config_editable"):
            flash(request, request.t("This worker does not accept thread changes."), "error")
            return back(request, done)
        args = {"queue": queue}
    elif cmd == "kill":
        thread, task_id = str(post.get("thread", ""))[:100], str(post.get("task_id", ""))[:128]
        if not thread or not task_id:
            flash(request, request.t("Say which thread and task to kill."), "error")
            return back(request, done)
        args = {"thread": thread, "task_id": task_id}
    if not send_command(request.storage, wid, cmd, by=request.user.name, **args):
        raise not_found(request.t("No worker named {name}.", name=wid))
    detail = " ".join(f"{k}={v}" for k, v in args.items())
    audit(
        request,
        f"worker {cmd}",
        ids=[args["task_id"]] if cmd == "kill" else (),
        detail=wid + " " + detail,
    )
    flash(request, request.t("Sent {cmd} to {name}.", cmd=cmd, name=wid))
    return back(request, done)
