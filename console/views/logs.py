"""History (工作历史), the worker log (系统日志), the audit log, running and scheduled tasks."""

from __future__ import annotations

from typing import Any

from pyramid.view import view_config

from ztq.console.security import OPERATE
from ztq.console.web import (
    audit,
    back,
    choice_param,
    flash,
    logical_queues,
    page_size,
    queue_filter,
    text_param,
)
from ztq.core.client.calls import TaskCall
from ztq.core.engine.storage import EnqueueEntry
from ztq.core.engine.workers import set_cron_enabled
from ztq.core.errors import ZtqError
from ztq.core.monitor import overview as models
from ztq.core.monitor import queues as monitor
from ztq.core.monitor import streams
from ztq.core.monitor.filters import fields_matcher, task_matcher
from ztq.core.monitor.workers import worker_ips

STATUSES = ("done", "failed", "retry", "expired")
KINDS = ("start", "stop", "reboot", "lost", "config", "command", "forget", "autoscale", "redis")


def _cursor(request: Any) -> str | None:
    return text_param(request, "cursor", 120) or None


@view_config(route_name="history", request_method="GET", renderer="history.jinja2")
def history_page(request: Any) -> dict[str, Any]:
    queue, queues = queue_filter(request)
    filters = {
        "queue": queue,
        "task": text_param(request, "task"),
        "status": choice_param(request, "status", STATUSES),
        "worker": text_param(request, "worker"),
    }
    match = fields_matcher(task=filters["task"], status=filters["status"], worker=filters["worker"])
    page = streams.stream_page(
        request.storage, "history", queues, _cursor(request), page_size(request), match=match
    )
    menu = logical_queues(request)
    ips = ips_of(request, page.rows)
    return {"filters": filters, "queues": menu, "page": page, "statuses": STATUSES, "ips": ips}


def ips_of(request: Any, rows: list[Any]) -> dict[str, str]:
    """The IP of each worker named on a page of stream entries, from its heartbeat (ZTQ's
    logs showed the server); a worker forgotten since has none."""
    return worker_ips(request.storage, [str(e.get("worker") or "") for e in rows][:500])


@view_config(route_name="events", request_method="GET", renderer="events.jinja2")
def events_page(request: Any) -> dict[str, Any]:
    filters = {
        "worker": text_param(request, "worker"),
        "kind": text_param(request, "kind", 40),
        "q": text_param(request, "q"),
    }
    match = fields_matcher(worker=filters["worker"], kind=filters["kind"], message=filters["q"])
    page = streams.stream_page(
        request.storage, "events", cursor=_cursor(request), limit=page_size(request), match=match
    )
    return {"filters": filters, "page": page, "kinds": KINDS, "ips": ips_of(request, page.rows)}


@view_config(route_name="audit", request_method="GET", renderer="audit.jinja2")
def audit_page(request: Any) -> dict[str, Any]:
    filters = {"user": text_param(request, "user", 64), "q": text_param(request, "q")}
    match = fields_matcher(user=filters["user"], ids=filters["q"])
    page = streams.stream_page(
        request.storage, "audit", cursor=_cursor(request), limit=page_size(request), match=match
    )
    return {"filters": filters, "page": page}


@view_config(route_name="running", request_method="GET", renderer="running.jinja2")
def running_page(request: Any) -> dict[str, Any]:
    queue, queues = queue_filter(request)
    rows = monitor.running_tasks(request.storage, queues)
    workers = {
        w["id"]: w
        for w in models.workers(request.storage, request.registry.ztq_settings.lost_after)
    }
    return {"rows": rows, "workers": workers, "queue": queue, "queues": logical_queues(request)}


@view_config(route_name="scheduled", request_method="GET", renderer="scheduled.jinja2")
def scheduled_page(request: Any) -> dict[str, Any]:
    queue, queues = queue_filter(request)
    task = text_param(request, "task")
    page = monitor.score_page(
        request.storage,
        "delayed",
        queues,
        _cursor(request),
        page_size(request),
        match=task_matcher(task),
    )
    return {
        "page": page,
        "cron": monitor.cron_table(request.storage),
        "filters": {"queue": queue, "task": task},
        "queues": logical_queues(request),
    }


@view_config(route_name="cron_run", request_method="POST", permission=OPERATE)
def cron_run(request: Any) -> Any:
    """Enqueue a cron entry's task now, once, outside its schedule."""
    name = str(request.POST.get("name", ""))
    entry = next((e for e in monitor.cron_table(request.storage) if e.get("name") == name), None)
    done = request.route_path("scheduled")
    if entry is None:
        flash(request, request.t("No cron entry named {name}.", name=name), "error")
        return back(request, done)
    try:
        call = TaskCall(
            str(entry.get("task")),
            tuple(entry.get("args") or ()),
            dict(entry.get("kwargs") or {}),
            queue=str(entry.get("queue") or "default"),
        )
    except (ZtqError, TypeError, ValueError):
        flash(request, request.t("The cron entry {name} cannot be enqueued.", name=name), "error")
        return back(request, done)
    storage = request.storage
    storage.queues.register_queue(call.queue)
    queued = EnqueueEntry(call.resolve_id(), call.payload(), call.priority)
    task_id, outcome = storage.call(*storage.tasks.enqueue_op(call.queue, [queued]))
    audit(request, "run cron now", queue=call.queue, ids=[str(task_id)], detail=name)
    flash(request, request.t("Enqueued {name} now (task {id}).", name=name, id=task_id))
    return back(request, done)


@view_config(route_name="cron_toggle", request_method="POST", permission=OPERATE)
def cron_toggle(request: Any) -> Any:
    """Disable a cron entry on every worker (its ticks pass unfired), or enable it again."""
    name = str(request.POST.get("name", ""))
    enable = request.POST.get("enable") == "1"
    done = request.route_path("scheduled")
    if not any(e.get("name") == name for e in monitor.cron_table(request.storage)):
        flash(request, request.t("No cron entry named {name}.", name=name), "error")
        return back(request, done)
    user = request.user
    set_cron_enabled(request.storage, name, enable, by=user.name if user else "?")
    audit(request, "enable cron" if enable else "disable cron", detail=name)
    if enable:
        flash(request, request.t("Cron entry {name} enabled.", name=name))
    else:
        flash(request, request.t("Cron entry {name} disabled: workers skip its ticks.", name=name))
    return back(request, done)
