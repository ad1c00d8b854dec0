"""Queues (工作队列): counts, age, errors and throughput per queue; a queue's pending tasks."""

from __future__ import annotations

from typing import Any

from pyramid.httpexceptions import HTTPSeeOther
from pyramid.view import view_config

from ztq.console.i18n import N_
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
from ztq.core.engine.keys import split_shard
from ztq.core.engine.queue_limits import WHEN_FULL, check_key
from ztq.core.errors import InvalidOption
from ztq.core.monitor import overview as overview_
from ztq.core.monitor import queues as monitor
from ztq.core.monitor import timings
from ztq.core.monitor.fmt import timechart
from ztq.core.monitor.workers import forget_queue, serving


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
            "expired_hour",
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
    key = _key_param(request)
    page = None if shards else monitor.pending_page(request.storage, name, start, limit, key=key)
    day = timings.day_slots(request.storage, q["shards"] or name)
    limits = request.storage.queues.queue_limits(name)
    q["max_running"] = limits.max_running
    q["key_concurrency"] = limits.key_concurrency
    q["block_timeout"] = limits.block_timeout
    q["rate_form"] = str(limits.rate_limit) if limits.rate_limit else ""
    times = {which: timechart(day, which) for which in ("wait", "run")}
    keys = None if shards else request.storage.key_turns.key_totals(name, 10)  # the busiest keys
    return {"q": q, "shards": shards, "shard_of": split_shard(name)[0] if is_shard else "",
            "page": page, "start": start, "limit": limit, "times": times, "keys": keys,
            "key": key,
            "serving": served_by(request, [q])[q["name"]]}  # fmt: skip


def _key_param(request: Any) -> str | None:
    """``?key=``: list that key's waiting tasks instead of the plain lists' (a key that
    could not be a task's key is a 404 that says why, not an empty page)."""
    key = request.GET.get("key")
    if key in (None, ""):
        return None
    try:
        return check_key(key)
    except InvalidOption:
        raise not_found(
            request.t("No such key: a key is 1 to 128 characters without control characters.")
        ) from None


def _pause_key(request: Any, name: str, on: bool) -> Any:
    """Pause or resume one key of the queue (its tasks wait, the other keys run)."""
    here = request.route_path("queue", name=name)
    key = str(request.POST.get("key", ""))
    try:
        request.storage.key_turns.pause_key(name, key, on)
    except InvalidOption:
        flash(request, request.t("Key: 1 to 128 characters, no control characters."), "error")
        return back(request, here)
    if on:
        msg = request.t("Paused key {key} of {name}: its tasks wait, the other keys run.",
                        key=key, name=name)  # fmt: skip
    else:
        msg = request.t("Resumed key {key} of {name}.", key=key, name=name)
    flash(request, msg)
    audit(request, "pause key" if on else "resume key", queue=name, detail=f"key={key}")
    return back(request, here)


def _set_running_limit(request: Any, name: str, per_key: bool) -> Any:
    """The queue page's running-limit forms: ``max_running`` (leases at once on all workers)
    or, ``per_key``, ``key_concurrency`` (leases at once of one key of the queue, for its
    keyed tasks: docs/queue-controls.md); 1-10000, empty for none."""
    here = request.route_path("queue", name=name)
    field = "key_concurrency" if per_key else "max_running"
    raw = str(request.POST.get(field, "")).strip()
    if raw and not (raw.isdigit() and 1 <= int(raw) <= 10_000):
        msg = request.t("Running limit: a number from 1 to 10000, or empty for none.")
        flash(request, msg, "error")
        return back(request, here)
    try:
        request.storage.queues.configure(name, **{field: int(raw) if raw else None})
    except InvalidOption as exc:  # a sharded queue
        flash(request, str(exc), "error")
        return back(request, here)
    if per_key and raw:
        msg = request.t("{name}: at most {n} tasks of one key at once, on all workers.",
                        name=name, n=int(raw))  # fmt: skip
    elif per_key:
        msg = request.t("{name}: no running limit per key.", name=name)
    elif raw:
        msg = request.t("{name}: at most {n} tasks at once, on all workers.", name=name, n=int(raw))
    else:
        msg = request.t("{name}: no running limit.", name=name)
    flash(request, msg)
    audit(request, "limit queue", queue=name, detail=f"{field}={raw or 'none'}")
    return back(request, here)


def _weigh_key(request: Any, name: str) -> Any:
    """Give one key a weight: the tasks it takes in a row each turn (1-1000)."""
    here = request.route_path("queue", name=name)
    key, raw = str(request.POST.get("key", "")), str(request.POST.get("weight", "")).strip()
    try:
        weight = int(raw) if raw.isdigit() else -1
        request.storage.key_turns.weigh_key(name, key, weight)
    except InvalidOption:
        msg = request.t("Weight: a key (1 to 128 characters) and a number from 1 to 1000.")
        flash(request, msg, "error")
        return back(request, here)
    msg = request.t("Key {key} of {name} takes {n} tasks a turn.", key=key, name=name, n=weight)
    flash(request, msg)
    audit(request, "weigh key", queue=name, detail=f"key={key} weight={weight}")
    return back(request, here)


def _set_rate_limit(request: Any, name: str) -> Any:
    """The queue page's rate form: ``20/s``, ``100/m burst 10`` ... (empty: none), checked by
    ``configure``, which names the accepted forms (docs/queue-controls.md)."""
    here = request.route_path("queue", name=name)
    raw = " ".join(str(request.POST.get("rate_limit", "")).split())[:60]
    try:
        request.storage.queues.configure(name, rate_limit=raw or None)
    except InvalidOption as exc:  # a form not accepted, a sharded queue
        flash(request, request.t("Rate limit: {error}", error=str(exc)), "error")
        return back(request, here)
    if raw:
        rate = str(request.storage.queues.queue_limits(name).rate_limit)
        flash(request, request.t("{name}: at most {rate} started, on all workers.",
                                 name=name, rate=rate))  # fmt: skip
    else:
        flash(request, request.t("{name}: no rate limit.", name=name))
    audit(request, "limit queue", queue=name, detail=f"rate_limit={raw or 'none'}")
    return back(request, here)


def _set_pending_limit(request: Any, name: str) -> Any:
    """The queue page's back-pressure form: max_pending (empty: none), when_full and
    block_timeout, checked here and again by ``configure`` (docs/queue-controls.md)."""
    here = request.route_path("queue", name=name)
    raw = str(request.POST.get("max_pending", "")).strip()
    when = str(request.POST.get("when_full", "raise"))
    wait = str(request.POST.get("block_timeout", "")).strip() or "30"
    ok = (not raw or (raw.isdigit() and 1 <= int(raw) <= 100_000_000)) and when in WHEN_FULL
    ok = ok and wait.isdigit() and 1 <= int(wait) <= 3600
    if not ok:
        t = request.t
        flash(
            request,
            t("Pending limit: 1-100000000 or empty; raise, block or buffer; wait 1-3600 s."),
            "error",
        )
        return back(request, here)
    try:
        if raw:
            request.storage.queues.configure(name, max_pending=int(raw), when_full=when,
                                      block_timeout=float(wait))  # fmt: skip
        else:
            request.storage.queues.configure(name, max_pending=None)
    except InvalidOption as exc:  # a sharded queue
        flash(request, str(exc), "error")
        return back(request, here)
    if raw:
        text = {
            "raise": N_("{name}: at most {n} tasks waiting; producers get QueueFull beyond."),
            "block": N_("{name}: at most {n} tasks waiting; producers wait up to {s} s for room."),
            "buffer": N_("{name}: at most {n} tasks waiting; more wait in the overflow buffer."),
        }[when]
        flash(request, request.t(text, name=name, n=int(raw), s=int(wait)))
        detail = f"max_pending={raw} when_full={when}"
        detail += f" block_timeout={wait}" if when == "block" else ""
    else:
        flash(request, request.t("{name}: no pending limit.", name=name))
        detail = "max_pending=none"
    audit(request, "limit queue", queue=name, detail=detail)
    return back(request, here)


def _forget(request: Any, name: str) -> Any:
    """Remove a queue that holds nothing and no worker serves (``ztq queue forget``); a
    refusal says why, on the queue's page."""
    why = forget_queue(request.storage, name, request.registry.ztq_settings.lost_after)
    if why:
        flash(request, request.t("{name} is not forgotten: {why}.", name=name, why=why), "error")
        return back(request, request.route_path("queue", name=name))
    audit(request, "forget queue", queue=name)
    flash(request, request.t("Forgot queue {name}.", name=name))
    return HTTPSeeOther(location=request.route_path("queues"))


@view_config(route_name="queue_state", request_method="POST", permission=OPERATE)
def queue_state(request: Any) -> Any:
    name = _queue_or_404(request)
    action = request.POST.get("action")
    if action == "pause":
        request.storage.queues.pause(name)
        flash(request, request.t("Paused {name}: workers take no new tasks from it.", name=name))
    elif action == "resume":
        request.storage.queues.resume(name)
        flash(request, request.t("Resumed {name}.", name=name))
    elif action in ("limit", "key_limit"):
        return _set_running_limit(request, name, per_key=action == "key_limit")
    elif action == "pending":
        return _set_pending_limit(request, name)
    elif action == "rate":
        return _set_rate_limit(request, name)
    elif action == "forget":
        return _forget(request, name)
    elif action in ("key_pause", "key_resume"):
        return _pause_key(request, name, action == "key_pause")
    elif action == "key_weight":
        return _weigh_key(request, name)
    else:
        flash(request, request.t("Unknown command."), "error")
        return back(request, request.route_path("queue", name=name))
    audit(request, f"{action} queue", queue=name)
    return back(request, request.route_path("queue", name=name))
