"""The same data as JSON under ``/api/...``, and Prometheus metrics at ``/metrics``.

GET only; a session or HTTP Basic credentials of a console user (any role). Lists take the
same filters and ``cursor`` as the pages and answer ``{"items": [...], "next": cursor}``.
"""

from __future__ import annotations

import math
from typing import Any

from pyramid.response import Response
from pyramid.view import view_config

from ztq.console.views.errors import errors_query
from ztq.console.views.logs import STATUSES
from ztq.console.views.queues import overview
from ztq.console.web import (
    choice_param,
    int_param,
    known_queues,
    not_found,
    page_size,
    queue_filter,
    text_param,
    valid_task_id,
)
from ztq.core.alerts.alerter import firing_count
from ztq.core.auth.logins import login_stats
from ztq.core.auth.sessions import count_sessions
from ztq.core.auth.tokens import count_tokens
from ztq.core.monitor import overview as models
from ztq.core.monitor import queues as monitor
from ztq.core.monitor import streams, timings
from ztq.core.monitor.filters import fields_matcher
from ztq.core.monitor.workers import SHOWN, fleet, list_workers


def _page(page: monitor.Page, items: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"items": items, "next": page.next, "scanned": page.scanned}
    if page.total is not None:
        out["total"] = page.total
    if page.partial:
        out["partial"] = True
    return out


def _cursor(request: Any) -> str | None:
    return text_param(request, "cursor", 120) or None


@view_config(route_name="api_workers", request_method="GET", renderer="json")
def api_workers(request: Any) -> dict[str, Any]:
    """A page of workers in name order (``status``, ``limit``, ``cursor``), and the counts."""
    lost_after = request.registry.ztq_settings.lost_after
    items, page = models.worker_page(
        request.storage,
        lost_after,
        status=choice_param(request, "status", SHOWN),
        start=int_param(request, "cursor", 0, 0, 10**9),
        limit=page_size(request),
    )
    out: dict[str, Any] = {"items": items, "next": None if page.next is None else str(page.next)}
    out["scanned"] = page.scanned
    if page.partial:
        out["partial"] = True
    return out | models.fleet_dict(request.storage, lost_after)


@view_config(route_name="api_queues", request_method="GET", renderer="json")
def api_queues(request: Any) -> dict[str, Any]:
    items = overview(request)
    for q in items:
        q["throughput"] = [
            {"minute": m * 60, "done": d, "failed": f} for m, d, f in q["throughput"]
        ]
    return {"items": items}


@view_config(route_name="api_errors", request_method="GET", renderer="json")
def api_errors(request: Any) -> dict[str, Any]:
    _, queues, match = errors_query(request)
    page = monitor.score_page(
        request.storage, "errors", queues, _cursor(request), page_size(request), match=match
    )
    return _page(page, [models.row_dict(r, "failed_at") for r in page.rows])


@view_config(route_name="api_history", request_method="GET", renderer="json")
def api_history(request: Any) -> dict[str, Any]:
    _, queues = queue_filter(request)
    match = fields_matcher(
        task=text_param(request, "task"),
        status=choice_param(request, "status", STATUSES),
        worker=text_param(request, "worker"),
    )
    page = streams.stream_page(
        request.storage, "history", queues, _cursor(request), page_size(request), match=match
    )
    items = [
        {"queue": e.pop("_queue"), "entry": e.pop("_id"), "at": e.pop("_at"), **e}
        for e in page.rows
    ]
    return _page(page, items)


@view_config(route_name="api_log", request_method="GET", renderer="json")
def api_log(request: Any) -> dict[str, Any]:
    match = fields_matcher(worker=text_param(request, "worker"), kind=text_param(request, "kind"))
    page = streams.stream_page(
        request.storage, "events", cursor=_cursor(request), limit=page_size(request), match=match
    )
    items = [{"entry": e.pop("_id"), "at": e.pop("_at"), **e} for e in page.rows]
    for e in items:
        e.pop("_queue", None)
    return _page(page, items)


@view_config(route_name="api_running", request_method="GET", renderer="json")
def api_running(request: Any) -> dict[str, Any]:
    _, queues = queue_filter(request)
    rows = monitor.running_tasks(request.storage, queues)
    return {"items": [models.row_dict(r, "lease_until") for r in rows]}


@view_config(route_name="api_scheduled", request_method="GET", renderer="json")
def api_scheduled(request: Any) -> dict[str, Any]:
    _, queues = queue_filter(request)
    page = monitor.score_page(
        request.storage, "delayed", queues, _cursor(request), page_size(request)
    )
    out = _page(page, [models.row_dict(r, "due") for r in page.rows])
    out["cron"] = monitor.cron_table(request.storage)
    return out


@view_config(route_name="api_task", request_method="GET", renderer="json")
def api_task(request: Any) -> dict[str, Any]:
    task_id = request.matchdict["id"]
    queue = text_param(request, "queue", 64)
    if not valid_task_id(task_id):
        raise not_found(f"no task with id {task_id!r}")
    found = monitor.find_task(request.storage, task_id, queue or None)
    if not found:
        raise not_found(f"no task with id {task_id!r}")
    items = [models.task_dict(r, full=True) for r in found]
    return items[0] if len(items) == 1 else {"items": items}


# per queue, the busiest keys that get a series of their own; the rest add up as "other"
KEY_SERIES = 10


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


@view_config(route_name="metrics", request_method="GET")
def metrics(request: Any) -> Response:
    """Gauges, counters and histograms in the Prometheus text format (version 0.0.4)."""
    queues = overview(request, known_queues(request))
    lost_after = request.registry.ztq_settings.lost_after
    workers = [models.worker_view(w, {}) for w in list_workers(request.storage, lost_after)]
    out: list[str] = []

    def family(name: str, kind: str, text: str, samples: list[tuple[dict[str, str], Any]]) -> None:
        out.append(f"# HELP {name} {text}")
        out.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            inner = ",".join(f'{k}="{_label(str(v))}"' for k, v in labels.items())
            out.append(f"{name}{{{inner}}} {value}" if inner else f"{name} {value}")

    family(
        "ztq_queue_ready",
        "gauge",
        "Tasks ready to run.",
        [({"queue": q["name"], "priority": p}, n) for q in queues for p, n in q["ready"].items()],
    )
    for key, text in (
        ("delayed", "Tasks waiting for their due time (retries included)."),
        ("running", "Tasks leased by a worker."),
        ("errors", "Tasks in the error queue."),
        ("threads", "Worker threads serving the queue."),
    ):
        family(f"ztq_queue_{key}", "gauge", text, [({"queue": q["name"]}, q[key]) for q in queues])
    family(
        "ztq_queue_paused",
        "gauge",
        "1 while the queue is paused.",
        [({"queue": q["name"]}, int(q["paused"])) for q in queues],
    )
    family(
        "ztq_queue_oldest_ready_seconds",
        "gauge",
        "Age of the task at the head of ready.",
        [({"queue": q["name"]}, round((q["head_age_ms"] or 0) / 1000, 3)) for q in queues],
    )
    family(
        "ztq_queue_done_last_hour",
        "gauge",
        "Runs that succeeded in the last 60 minutes.",
        [({"queue": q["name"]}, q["done_hour"]) for q in queues],
    )
    family(
        "ztq_queue_failed_last_hour",
        "gauge",
        "Runs that failed in the last 60 minutes.",
        [({"queue": q["name"]}, q["failed_hour"]) for q in queues],
    )
    family(
        "ztq_queue_overflow",
        "gauge",
        "Tasks in the overflow buffer of a full queue (when_full = buffer).",
        [({"queue": q["name"]}, q["overflow"]) for q in queues],
    )
    family(
        "ztq_queue_max_pending",
        "gauge",
        "The queue's pending limit (queues that have one).",
        [({"queue": q["name"]}, q["max_pending"]) for q in queues if q["max_pending"]],
    )
    family(
        "ztq_queue_full",
        "gauge",
        "1 while the queue holds its pending limit.",
        [({"queue": q["name"]}, int(q["full"])) for q in queues],
    )
    pressure = monitor.pressure_totals(request.storage, [q["name"] for q in queues])
    for n, (key, text) in enumerate((
        ("refused", "Enqueue attempts a full queue refused (a blocked producer counts each try)."),
        ("overflowed", "Tasks that went to a full queue's overflow buffer."),
    )):  # fmt: skip
        family(f"ztq_enqueue_{key}_total", "counter", text,
               [({"queue": q}, counts[n]) for q, counts in pressure.items()])  # fmt: skip
    family("ztq_fetch_throttled_total", "counter",
           "Fetches the queue's rate limit held back (tasks ready, no token).",
           [({"queue": q}, counts[2]) for q, counts in pressure.items()])  # fmt: skip
    for n, (key, text) in enumerate((
        ("compact", "Ends (acks, failures) kept compact under Redis's maxmemory."),
        ("dropped", "Finished records dropped ahead of result_ttl under Redis's maxmemory."),
    ), 3):  # fmt: skip
        family(f"ztq_oom_{key}_total", "counter", text,
               [({"queue": q}, counts[n]) for q, counts in pressure.items()])  # fmt: skip
    try:  # an ACL may deny INFO or MEMORY USAGE: the rest stands
        memory = monitor.redis_memory(request.storage, [q["name"] for q in queues])
    except Exception:  # noqa: BLE001
        memory = None
    if memory is not None:
        for key, text in (
            ("used", "Redis used_memory (bytes)."),
            ("maxmemory", "Redis maxmemory (bytes; 0: no limit)."),
            ("finished", "About the bytes finished records hold (docs/deploy.md, Sizing)."),
        ):
            family(f"ztq_redis_memory_{key}_bytes", "gauge", text, [({}, memory[key])])
    family("ztq_queue_rate_held", "gauge",
           "Ready tasks the queue's rate limit holds back now (queues that have one).",
           [({"queue": q["name"]}, q["rate_held"]) for q in queues if q["rate_limit"]])  # fmt: skip
    totals = timings.totals(request.storage, [q["name"] for q in queues])
    for key, text in (
        ("done", "Runs that succeeded, since the queue began."),
        ("failed", "Runs that failed (retried or not), since the queue began."),
        ("expired", "Tasks not started before their expiry (never run), since the queue began."),
    ):
        family(f"ztq_tasks_{key}_total", "counter", text,
               [({"queue": q}, getattr(t, key)) for q, t in totals.items()])  # fmt: skip
    for which, text in (
        ("wait", "Time from ready to leased by a worker, per finished run."),
        ("run", "Time from leased to finished (done or failed), per finished run."),
    ):
        name = f"ztq_task_{which}_seconds"
        out.append(f"# HELP {name} {text}")
        out.append(f"# TYPE {name} histogram")
        for q, t in totals.items():
            hist = getattr(t, which)
            label = f'queue="{_label(q)}"'
            for bound, count in hist.cumulative():
                le = "+Inf" if bound == math.inf else f"{bound:g}"
                out.append(f'{name}_bucket{{{label},le="{le}"}} {count}')
            out.append(f"{name}_sum{{{label}}} {hist.total_ms / 1000:g}")
            out.append(f"{name}_count{{{label}}} {hist.count}")
    logins = login_stats(request.storage)
    for key, text in (
        ("failures", "Failed console sign-ins."),
        ("locks", "Sign-in locks started (per user name and per client address)."),
        ("unlocks", "Sign-in locks that ended (ran out, or a successful sign-in)."),
    ):
        family(f"ztq_console_login_{key}_total", "counter", text, [({}, logins[key])])
    family("ztq_console_sessions", "gauge", "Live console sessions.",
           [({}, count_sessions(request.storage))])  # fmt: skip
    family("ztq_console_api_tokens", "gauge", "Live API tokens.",
           [({}, count_tokens(request.storage))])  # fmt: skip
    family("ztq_alerts_firing", "gauge", "Alerts firing now (docs/alerts.md).",
           [({}, firing_count(request.storage))])  # fmt: skip
    statuses = fleet(request.storage, lost_after).counts
    family(
        "ztq_workers",
        "gauge",
        "Known workers by status.",
        [({"status": s}, statuses.get(s, 0)) for s in SHOWN],
    )
    family(
        "ztq_worker_heartbeat_age_seconds",
        "gauge",
        "Seconds since the last heartbeat.",
        [({"worker": w["id"]}, round(w["report_age_ms"] / 1000, 3)) for w in workers],
    )
    family(
        "ztq_worker_cpu_percent",
        "gauge",
        "CPU use of the worker process.",
        [({"worker": w["id"]}, w["cpu_percent"]) for w in workers if w["cpu_percent"] is not None],
    )
    family(
        "ztq_worker_rss_bytes",
        "gauge",
        "Resident memory of the worker and its children.",
        [({"worker": w["id"]}, int(w["rss"])) for w in workers if w["rss"] is not None],
    )
    family(
        "ztq_worker_busy_threads",
        "gauge",
        "Threads running a task now.",
        [({"worker": w["id"]}, len(w["current"])) for w in workers],
    )
    turns = request.storage.key_turns
    keyed = [(q["name"], turns.key_totals(q["name"], KEY_SERIES)) for q in queues
             if not q.get("shards")]  # fmt: skip
    for what, text in (("waiting", "Keyed tasks waiting, per key."),
                       ("running", "Keyed tasks leased, per key.")):  # fmt: skip
        samples = [({"queue": name, "key": k.key}, getattr(k, what)) for name, t in keyed
                   for k in t.top]  # fmt: skip
        samples += [({"queue": name, "key": "other"}, getattr(t, f"other_{what}"))
                    for name, t in keyed if t.top]  # fmt: skip
        family(f"ztq_key_{what}", "gauge", text + f" The top {KEY_SERIES} keys and 'other'.",
               samples)  # fmt: skip
    body = "\n".join(out) + "\n"
    return Response(
        body,
        content_type="text/plain",
        charset="utf-8",
        headerlist=[("Content-Type", "text/plain; version=0.0.4; charset=utf-8")],
    )
