"""Errors (错误清单): failed tasks newest first, grouped view, and bulk redo / delete.

Every redo or delete of more than one task states its scope on a confirmation page first
(``GET /bulk/confirm``, or the POST of the selected rows without ``confirmed``); a redo is
followed (``/redo/<batch>``: what became of exactly those tasks) and a delete goes to the
trash, where ``/trash`` restores it within the trash window (docs/console.md, "Undo").
"""

from __future__ import annotations

from typing import Any

from pyramid.httpexceptions import HTTPSeeOther
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
    not_found,
    page_size,
    parse_ref,
    queue_filter,
    safe_next,
    text_param,
)
from ztq.core.engine.parts import errors as error_part
from ztq.core.engine.parts.errors import FOLLOW_WINDOW_MS, TRASH_BATCHES, TRASH_WINDOW_MS
from ztq.core.monitor import bulk
from ztq.core.monitor import queues as monitor
from ztq.core.monitor.filters import task_matcher
from ztq.core.monitor.groups import (
    GROUP_KEY,
    GroupMatch,
    add_traces,
    counted_groups,
    failed_again,
    group_errors,
)
from ztq.core.monitor.pages import Row, fetch_records

CONFIRM_SHOWN = 50  # selected tasks a delete confirmation describes (the rest: a count)


def errors_query(request: Any) -> tuple[dict[str, str], list[str], monitor.Match | None]:
    queue, queues = queue_filter(request)
    task, text = text_param(request, "task"), text_param(request, "q")
    group, kind = text_param(request, "group", 12), text_param(request, "kind", 12)
    match: monitor.Match | None = task_matcher(task, text)
    for key in (group, kind):
        if key and not GROUP_KEY.match(key):
            raise not_found(request.t("No error group {key}.", key=key))
    if group:
        match = GroupMatch(group, match)
    if kind:
        match = GroupMatch(kind, match, by="kind")
    filters = {"queue": queue, "task": task, "q": text, "group": group, "kind": kind}
    return filters, queues, match


@view_config(route_name="errors", request_method="GET", renderer="errors.jinja2")
def errors_page(request: Any) -> dict[str, Any]:
    filters, queues, match = errors_query(request)
    cursor = text_param(request, "cursor", 80) or None
    page = monitor.score_page(
        request.storage, "errors", queues, cursor, page_size(request), match=match, budget=1000
    )
    if (filters["group"] or filters["kind"]) and not (filters["task"] or filters["q"]):
        by = "group" if filters["group"] else "kind"  # the exact count, as every page reads it
        counted = counted_groups(request.storage, queues, by)
        page.total = sum(g.count for g in counted if g.key == filters[by])
    return {
        "filters": filters,
        "queues": logical_queues(request),
        "page": page,
        "cursor": cursor,
        "failed_again": failed_again,
    }


@view_config(route_name="error_groups", request_method="GET", renderer="error_groups.jinja2")
def error_groups_page(request: Any) -> dict[str, Any]:
    """The error groups: exact over every error (the counters) unless a task or text filter
    asks for a look at the records (then over the newest ``window`` errors, said so);
    ``by=kind`` groups by error type and message kind across top frames."""
    filters, queues, match = errors_query(request)
    wants_kind = request.GET.get("by") == "kind" or filters["kind"]
    by = "kind" if wants_kind and not filters["group"] else "group"
    window = int_param(request, "window", 500, 10, 10_000)
    data = {"filters": filters, "queues": logical_queues(request), "window": window, "by": by}
    if not (filters["task"] or filters["q"]):
        groups = counted_groups(request.storage, queues, by)
        if filters["group"] or filters["kind"]:
            groups = [g for g in groups if g.key in (filters["group"], filters["kind"])]
        total = sum(g.count for g in groups)
        add_traces(request.storage, groups[:PAGE_GROUPS])
        return {**data, "groups": groups, "exact": True, "scanned": total, "total": total}
    page = monitor.score_page(
        request.storage, "errors", queues, None, window, match=match, budget=window
    )
    return {**data, "groups": group_errors(page.rows), "exact": False,
            "scanned": page.scanned, "total": page.total}  # fmt: skip


PAGE_GROUPS = 200  # groups whose newest traceback the grouped view shows (one read each)


def _job_queues(request: Any, job: bulk.BulkJob, default: str) -> list[str] | HTTPSeeOther:
    """The queues a job walks (every shard of a sharded one), or a redirect back."""
    queues = known_queues(request)
    if job.queue:
        if job.queue not in queues:
            flash(request, request.t("No queue named {name}.", name=job.queue), "error")
            return back(request, default)
        queues = request.storage.queues.shards_of(
            job.queue, queues
        )  # a sharded queue: all its shards
    return queues


@view_config(
    route_name="bulk_confirm", request_method="GET", renderer="confirm.jinja2", permission=OPERATE
)
def bulk_confirm(request: Any) -> Any:
    """What a bulk action will act on (count, queue, filter, group), before it runs; its
    form starts the job with a fresh batch (a redo is followed, a delete can be undone)."""
    job = bulk.BulkJob.from_params(request.GET)
    default = request.route_path("errors")
    if job is None:
        flash(request, request.t("Unknown command."), "error")
        return HTTPSeeOther(location=default)
    queues = _job_queues(request, job, default)
    if not isinstance(queues, list):
        return queues
    if job.source == "errors":
        job.batch = bulk.new_batch()
    scope = bulk.scope(request.storage, job, queues)
    nxt = safe_next(request.GET.get("next"), default)
    return {"job": job, "scope": scope, "next": nxt, "selected": [], "window": _window(request)}


def _window(request: Any) -> dict[str, int]:
    """How long the trash keeps a delete and a redo is followed (ms; pages say it), and how
    many tasks of one delete the trash keeps (per queue) and a redo follows."""
    return {"trash": TRASH_WINDOW_MS, "follow": FOLLOW_WINDOW_MS,
            "batch_max": error_part.TRASH_BATCH_MAX, "batches": TRASH_BATCHES,
            "follow_max": error_part.FOLLOW_MAX}  # fmt: skip


@view_config(route_name="bulk", request_method="POST", permission=OPERATE)
def bulk_step(request: Any) -> Any:
    """One step of a bulk action; the progress page posts the next step until done."""
    job = bulk.BulkJob.from_params(request.POST)
    default = request.route_path("errors")
    if job is None:
        flash(request, request.t("Unknown command."), "error")
        return back(request, default)
    queues = _job_queues(request, job, default)
    if not isinstance(queues, list):
        return queues
    storage, cfg = request.storage, request.registry.ztq_settings
    if not job.started:
        if job.source == "errors" and not job.batch:  # a form of another page: undo too
            job.batch = bulk.new_batch()
        bulk.start(storage, job, queues)
    n = bulk.step(storage, job, queues, batch=cfg.bulk_batch, seconds=cfg.bulk_seconds)
    if n:
        audit(request, f"bulk {job.action}", queue=job.queue, count=n, detail=job.describe())
    if job.finished:
        flash(request, _outcome(request, job), "error" if job.full else "ok")
        return _after(request, job.action, job.batch, job.queue, job.kept, default)
    next_url = safe_next(request.POST.get("next"), default)
    return render_to_response("bulk.jinja2", {"job": job, "next": next_url}, request=request)


def _outcome(request: Any, job: bulk.BulkJob) -> str:
    """What a finished bulk job did, in the terms of its confirmation: how many it took,
    of a delete how many can be restored, and how many of the confirmed it skipped, why."""
    verb = request.t("Redid") if job.action == "redo" else request.t("Deleted")
    if job.limit and job.done < job.limit:
        text = request.t("{verb} {n} of the {count} tasks confirmed.", verb=verb, n=job.done,
                         count=job.limit)  # fmt: skip
    else:
        text = request.t("{verb} {n} tasks.", verb=verb, n=job.done)
    if job.action == "delete" and job.batch and job.done:
        lost = job.done - job.kept
        text += " " + request.t("{kept} can be restored; {lost} deleted for good.",
                                kept=job.kept, lost=lost)  # fmt: skip
    if job.full:
        text += " " + request.t("The trash is full: deleting for good was not confirmed.")
    if job.skipped and not job.full:
        text += " " + request.t("{n} skipped: they were redone, deleted or restored meanwhile.",
                                n=job.skipped)  # fmt: skip
    elif job.skipped:
        text += " " + request.t("{n} not deleted.", n=job.skipped)
    return text


def _after(request: Any, action: str, batch: str, queue: str, kept: int, default: str) -> Any:
    """Where a finished redo or delete leads: the tasks it put back, or its trash batch."""
    if batch and action == "redo":
        return HTTPSeeOther(request.route_path("redo_follow", batch=batch, _query={"queue": queue}))
    if batch and kept:
        return HTTPSeeOther(request.route_path("trash", _query={"batch": batch, "queue": queue}))
    return back(request, default)


@view_config(route_name="errors_selected", request_method="POST", permission=OPERATE)
def selected_action(request: Any) -> Any:
    """Redo or delete the errors selected on a list (``task`` = ``queue:id``): a delete
    shows its scope first and runs once ``confirmed``; both take a batch, as bulk jobs."""
    action = request.POST.get("action")
    refs = []
    for value in request.POST.getall("task")[: monitor.MAX_PAGE]:
        ref = parse_ref(value)
        if ref is not None and ref not in refs:
            refs.append(ref)
    default = request.route_path("errors")
    if action not in ("redo", "delete") or not refs:
        flash(request, request.t("Select tasks and an action first."), "error")
        return back(request, default)
    known = set(known_queues(request))
    by_queue: dict[str, list[str]] = {}
    for q, i in refs:
        if q not in known:
            raise not_found(request.t("No queue named {name}.", name=q))
        by_queue.setdefault(q, []).append(i)
    nxt = safe_next(request.POST.get("next"), default)
    if action == "delete" and request.POST.get("confirmed") != "1":
        job = bulk.BulkJob("delete", "errors", batch=bulk.new_batch())
        scope = bulk.Scope(len(refs), len(refs), len(refs), sorted(by_queue),
                           per_queue={q: len(ids) for q, ids in by_queue.items()})  # fmt: skip
        # what each selected task is (task, arguments, error), not only its id
        records = monitor.fetch_records(request.storage, refs[:CONFIRM_SHOWN])
        return render_to_response(
            "confirm.jinja2",
            {
                "job": job,
                "scope": scope,
                "next": nxt,
                "selected": refs,
                "records": records,
                "window": _window(request),
            },  # fmt: skip
            request=request,
        )
    batch = text_param(request, "batch", 32)
    batch = batch if bulk.BATCH.match(batch) else bulk.new_batch()
    done = kept = 0
    storage = request.storage
    for q, ids in by_queue.items():
        if action == "redo":
            n = storage.errors.redo_errors(q, batch, ids)
        else:
            n, _, k = storage.errors.trash_errors(q, batch, ids)
            kept += k
        done += n
        audit(request, action, queue=q, ids=ids, count=n, detail=f"batch={batch}")
    label = request.t("Redo") if action == "redo" else request.t("Delete")
    message = request.t("{action}: {done} of {count} tasks.", action=label, done=done,
                        count=len(refs))  # fmt: skip
    if len(refs) > done:
        message += " " + request.t("{n} were in another state and left alone.", n=len(refs) - done)
    flash(request, message, "ok" if done else "error")
    if not done:
        return HTTPSeeOther(location=nxt)
    only = next(iter(by_queue)) if len(by_queue) == 1 else ""
    return _after(request, action, batch, only, kept, nxt)


def _batch_or_404(request: Any, value: str) -> str:
    if not bulk.BATCH.match(value or ""):
        raise not_found(request.t("No batch {id}.", id=value))
    return value


@view_config(route_name="redo_follow", request_method="GET", renderer="follow.jinja2")
def follow_page(request: Any) -> dict[str, Any]:
    """What became of every task one redo put back, paged: the count per state over the
    whole redo (they add up to its size), the page (``state=error``: exactly the ones that
    failed again), and what holds the waiting ones back (a paused queue, a rate limit)."""
    batch = _batch_or_404(request, request.matchdict["batch"])
    queue, queues = queue_filter(request)
    state = request.GET.get("state", "")
    state = state if state in FOLLOW_STATES else ""
    size, offset = page_size(request), int_param(request, "offset", 0, 0, 10**9)
    again: list[tuple[str, str]] = []  # what "Redo again" / "Delete…" act on: exactly those
    counts, noted, since = request.storage.errors.follow_page(
        queues, batch, state, offset, size, again, monitor.MAX_PAGE
    )
    recs = fetch_records(request.storage, [(q, i) for q, i, _, _ in noted])
    rows = [Row(q, i, rec, score=at) for (q, i, at, _), rec in zip(noted, recs, strict=True)]
    total = sum(counts.values())
    listed = counts.get(state, 0) if state else total
    return {"batch": batch, "queue": queue, "rows": rows, "counts": counts, "total": total,
            "again_refs": again,
            "state": state, "offset": offset, "size": size, "listed": listed,
            "held": bulk.held_back(request.storage, queues, counts.get("queued", 0)),
            "since": since or bulk.batch_time(batch), "window": _window(request)}  # fmt: skip


FOLLOW_STATES = ("queued", "delayed", "running", "done", "error", "expired", "none")


@view_config(route_name="trash", request_method="GET", renderer="trash.jinja2")
def trash_page(request: Any) -> dict[str, Any]:
    """Deleted errors that can still be restored, per delete (batch), newest first; with a
    ``batch`` (one delete) or a search (``q``: id, task name, arguments or error), one
    paged list of the matching tasks (``cursor``), read on the server (no script needed)."""
    queue, queues = queue_filter(request)
    batch = text_param(request, "batch", 32)
    if batch:
        _batch_or_404(request, batch)
    text, cursor = text_param(request, "q"), text_param(request, "cursor", 140)
    listed = bool(batch or text or cursor)
    bins = bulk.trash(request.storage, queues, batch, limit=0 if listed else 100)
    page = None
    if listed:
        page = bulk.trash_search(request.storage, queues, batch=batch, text=text, cursor=cursor)
    return {"bins": bins, "batch": batch, "queue": queue, "window": _window(request),
            "q": text, "page": page, "queues": logical_queues(request)}  # fmt: skip


@view_config(route_name="trash_restore", request_method="POST", permission=OPERATE)
def trash_restore(request: Any) -> Any:
    """Restore a whole delete (``queue`` and ``batch``) or some of its tasks (``id``)."""
    batch = _batch_or_404(request, text_param(request, "batch", 32))
    queue = text_param(request, "queue", 68)
    if queue not in known_queues(request):
        raise not_found(request.t("No queue named {name}.", name=queue))
    ids = [i for i in request.POST.getall("id")[: monitor.MAX_PAGE] if isinstance(i, str)]
    restored, skipped = request.storage.errors.restore_errors(queue, batch, ids)
    audit(request, "restore", queue=queue, ids=ids[:20], count=restored,
          detail=f"batch={batch}")  # fmt: skip
    message = request.t("Restored {n} tasks.", n=restored)
    if skipped:
        message += " " + request.t("{n} have a task with the same id again and stay in the trash.",
                                   n=skipped)  # fmt: skip
    flash(request, message, "ok" if restored else "error")
    # back to the delete it came from (what is left of it, and where its tasks are now)
    return HTTPSeeOther(request.route_path("trash", _query={"batch": batch, "queue": queue}))
