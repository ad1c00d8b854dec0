"""Errors (错误清单): failed tasks newest first, grouped view, and bulk redo / delete."""

from __future__ import annotations

from typing import Any

from pyramid.renderers import render_to_response
from pyramid.view import view_config

from ztq.console.security import OPERATE
from ztq.console.web import (
    audit,
    back,
    flash,
    int_param,
    known_queues,
    logical_queues,
    page_size,
    queue_filter,
    safe_next,
    text_param,
)
from ztq.core.monitor import bulk
from ztq.core.monitor import queues as monitor
from ztq.core.monitor.filters import task_matcher
from ztq.core.monitor.groups import group_errors


def errors_query(request: Any) -> tuple[dict[str, str], list[str], monitor.Match | None]:
    queue, queues = queue_filter(request)
    task, text = text_param(request, "task"), text_param(request, "q")
    return {"queue": queue, "task": task, "q": text}, queues, task_matcher(task, text)


@view_config(route_name="errors", request_method="GET", renderer="errors.jinja2")
def errors_page(request: Any) -> dict[str, Any]:
    filters, queues, match = errors_query(request)
    cursor = text_param(request, "cursor", 80) or None
    page = monitor.score_page(
        request.storage, "errors", queues, cursor, page_size(request), match=match, budget=1000
    )
    return {"filters": filters, "queues": logical_queues(request), "page": page, "cursor": cursor}


@view_config(route_name="error_groups", request_method="GET", renderer="error_groups.jinja2")
def error_groups_page(request: Any) -> dict[str, Any]:
    filters, queues, match = errors_query(request)
    window = int_param(request, "window", 500, 10, 10_000)
    page = monitor.score_page(
        request.storage, "errors", queues, None, window, match=match, budget=window
    )
    return {
        "filters": filters,
        "queues": logical_queues(request),
        "groups": group_errors(page.rows),
        "window": window,
        "scanned": page.scanned,
        "total": page.total,
    }


@view_config(route_name="bulk", request_method="POST", permission=OPERATE)
def bulk_step(request: Any) -> Any:
    """One step of a bulk action; the progress page posts the next step until done."""
    job = bulk.BulkJob.from_params(request.POST)
    default = request.route_path("errors")
    if job is None:
        flash(request, request.t("Unknown command."), "error")
        return back(request, default)
    queues = known_queues(request)
    if job.queue:
        if job.queue not in queues:
            flash(request, request.t("No queue named {name}.", name=job.queue), "error")
            return back(request, default)
        queues = request.storage.shards_of(job.queue, queues)  # a sharded queue: all its shards
    storage, cfg = request.storage, request.registry.ztq_settings
    if not job.started:
        bulk.start(storage, job, queues)
    n = bulk.step(storage, job, queues, batch=cfg.bulk_batch, seconds=cfg.bulk_seconds)
    if n:
        audit(request, f"bulk {job.action}", queue=job.queue, count=n, detail=job.describe())
    if job.finished:
        verb = request.t("Redid") if job.action == "redo" else request.t("Deleted")
        flash(request, request.t("{verb} {n} tasks.", verb=verb, n=job.done))
        return back(request, default)
    next_url = safe_next(request.POST.get("next"), default)
    return render_to_response("bulk.jinja2", {"job": job, "next": next_url}, request=request)
