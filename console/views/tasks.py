"""One task (detail, actions) and search by id, task name or text across every state."""

from __future__ import annotations

from typing import Any

from pyramid.httpexceptions import HTTPSeeOther
from pyramid.response import Response
from pyramid.view import view_config

from ztq.console.i18n import N_
from ztq.console.security import OPERATE
from ztq.console.web import (
    STATES,
    audit,
    back,
    choice_param,
    flash,
    not_found,
    page_size,
    parse_ref,
    text_param,
    valid_queue,
    valid_task_id,
)
from ztq.core.engine.record import TaskRecord
from ztq.core.engine.workers import send_command
from ztq.core.monitor import queues as monitor
from ztq.core.monitor import streams
from ztq.core.monitor.filters import fields_matcher, task_matcher
from ztq.core.monitor.fmt import args_whole

RUNS_BUDGET = 500  # history entries scanned for a task's recent runs
SEARCH_BUDGET = 2000  # records scanned per search page
ACTIONS = {
    "redo": N_("Redo"),
    "run_now": N_("Run now"),
    "first": N_("Run first"),
    "delete": N_("Delete"),
    "kill": N_("Kill"),
}


@view_config(route_name="task", request_method="GET", renderer="task.jinja2")
def task_page(request: Any) -> dict[str, Any]:
    task_id = request.matchdict["id"]
    queue = text_param(request, "queue", 64)
    if not valid_task_id(task_id) or (queue and not valid_queue(queue)):
        raise not_found(request.t("No task with id {id}.", id=task_id))
    found = monitor.find_task(request.storage, task_id, queue or None)
    if not found:
        raise not_found(request.t("No task with id {id}.", id=task_id))
    if len(found) > 1:
        return {"rec": None, "choices": found, "runs": None}
    rec = found[0]
    runs = streams.stream_page(
        request.storage,
        "history",
        [rec.queue],
        limit=10,
        match=fields_matcher(id=rec.id),
        budget=RUNS_BUDGET,
    )
    return {"rec": rec, "choices": [], "runs": runs}


@view_config(route_name="task_args", request_method="GET")
def task_args(request: Any) -> Response:
    """A task's arguments whole, as stored (its payload JSON), as a file: the task page shows
    at most ``ARGS_SHOWN`` characters of them (docs/console.md, "Large arguments")."""
    task_id = request.matchdict["id"]
    queue = text_param(request, "queue", 64)
    if not valid_task_id(task_id) or (queue and not valid_queue(queue)):
        raise not_found(request.t("No task with id {id}.", id=task_id))
    found = monitor.find_task(request.storage, task_id, queue or None)
    if len(found) != 1:  # none, or one id in several queues: the page names them
        raise not_found(request.t("No task with id {id}.", id=task_id))
    body = args_whole(found[0]).encode("utf-8", "surrogatepass")
    return Response(body=body, content_type="application/json", charset="utf-8",
                    content_disposition=f'attachment; filename="{task_id}.json"')  # fmt: skip


@view_config(route_name="tasks", request_method="GET")
def tasks_index(request: Any) -> HTTPSeeOther:
    return HTTPSeeOther(location=request.route_path("search"))


@view_config(route_name="search", request_method="GET", renderer="search.jinja2")
def search_page(request: Any) -> Any:
    """An id that names one task opens it; anything else is looked for in the records."""
    text = text_param(request, "q", 200)
    state = choice_param(request, "state", STATES)
    cursor = text_param(request, "cursor", 80) or None
    exact: list[TaskRecord] = []
    page = None
    if text and valid_task_id(text):
        exact = monitor.find_task(request.storage, text)
        if len(exact) == 1 and not state and not cursor:
            rec = exact[0]
            return HTTPSeeOther(request.route_path("task", id=rec.id, _query={"queue": rec.queue}))
    if text or state:
        match = task_matcher(text=text, state=state)
        assert match is not None
        limit = page_size(request)
        page = monitor.search(request.storage, match, cursor, limit, budget=SEARCH_BUDGET)
        return {"q": text, "state": state, "exact": exact, "page": page, "limit": limit,
                "max_limit": monitor.MAX_PAGE, "from_start": not cursor}  # fmt: skip
    return {"q": text, "state": state, "exact": exact, "page": page}


def _refs(request: Any) -> list[tuple[str, str]]:
    refs = []
    for value in request.POST.getall("task")[: monitor.MAX_PAGE]:
        ref = parse_ref(value)
        if ref is not None and ref not in refs:
            refs.append(ref)
    return refs


@view_config(route_name="tasks", request_method="POST", permission=OPERATE)
def task_action(request: Any) -> Any:
    """Redo, run now, run first, delete or kill the tasks named ``queue:id`` in ``task``."""
    action = request.POST.get("action")
    refs = _refs(request)
    default = request.route_path("errors")
    if action not in ACTIONS or not refs:
        flash(request, request.t("Select tasks and an action first."), "error")
        return back(request, default)
    storage = request.storage
    by_queue: dict[str, list[str]] = {}
    for q, i in refs:
        by_queue.setdefault(q, []).append(i)
    known = set(storage.queues.names())
    if any(q not in known for q in by_queue):
        raise not_found(request.t("No queue named {name}.", name=next(iter(by_queue))))
    done = 0
    for q, ids in by_queue.items():
        if action == "redo":
            n = storage.tasks.requeue(q, "error", ids)
        elif action == "run_now":
            n = storage.tasks.requeue(q, "delayed", ids)
        elif action == "first":
            n = monitor.run_first(storage, q, ids)
        elif action == "delete":
            n = storage.tasks.remove(q, ids)[0]
        else:
            n = _kill(request, q, ids)
        done += n
        audit(request, action, queue=q, ids=ids, count=n)
    if len(refs) == 1 and done == 0:
        [(q, i)] = refs
        if not monitor.find_task(storage, i, q):
            raise not_found(request.t("No task with id {id}.", id=i))
    skipped = len(refs) - done
    label = request.t(ACTIONS[action])
    message = request.t(
        "{action}: {done} of {count} tasks.", action=label, done=done, count=len(refs)
    )
    if skipped:
        message += " " + request.t("{n} were in another state and left alone.", n=skipped)
    flash(request, message, "ok" if done else "error")
    return back(request, default)


def _kill(request: Any, queue: str, ids: list[str]) -> int:
    """Ask the workers running these tasks to kill them; returns how many were asked."""
    sent = 0
    for rec in monitor.fetch_records(request.storage, [(queue, i) for i in ids]):
        if rec is None or rec.state.value != "running" or not rec.get("worker"):
            continue
        worker, thread = str(rec.get("worker")), str(rec.get("thread") or "")
        if send_command(
            request.storage, worker, "kill", thread=thread, task_id=rec.id, by=request.user.name
        ):
            sent += 1
    return sent
