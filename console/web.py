"""Helpers shared by the views: reading parameters, redirects with a message, the audit log.

Parameters are validated here so that a bad value gives a clear 404 or is clamped, never a
500: queue names must be queue names, task ids task ids, numbers are bounded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote, urlsplit

from pyramid.httpexceptions import HTTPNotFound, HTTPSeeOther

from ztq.core.client.options import TASK_ID
from ztq.core.engine.keys import check_physical, split_shard
from ztq.core.errors import InvalidName
from ztq.core.monitor import queues as monitor
from ztq.core.monitor import streams

STATES = ("queued", "overflow", "delayed", "running", "error", "done", "expired")


def not_found(message: str) -> HTTPNotFound:
    """A 404 whose message the not-found page shows (already translated by the caller)."""
    exc = HTTPNotFound(message)
    exc.ztq_message = message  # type: ignore[attr-defined]
    return exc


def int_param(request: Any, name: str, default: int, low: int, high: int) -> int:
    raw = request.params.get(name, "")
    try:
        value = int(raw)
    except (TypeError, ValueError):
        return default
    return max(low, min(high, value))


def text_param(request: Any, name: str, limit: int = 200) -> str:
    value = request.params.get(name, "")
    return value.strip()[:limit] if isinstance(value, str) else ""


def choice_param(request: Any, name: str, choices: Sequence[str], default: str = "") -> str:
    value = request.params.get(name, default)
    return value if value in choices else default


def valid_queue(name: str) -> bool:
    """A queue name, or the name of one shard of a queue (``mail~2``)."""
    try:
        check_physical(name or "")
    except InvalidName:
        return False
    return True


def valid_task_id(task_id: str) -> bool:
    return bool(TASK_ID.match(task_id or ""))


def known_queues(request: Any) -> list[str]:
    cache = request.environ.setdefault("ztq.queues", [])
    if not cache:
        cache.extend(request.storage.queues.names())
    return list(cache)


def logical_queues(request: Any) -> list[str]:
    """The known queues with a sharded queue once, by its own name (for filter menus)."""
    return list(dict.fromkeys(split_shard(q)[0] for q in known_queues(request)))


def queue_filter(request: Any, name: str = "queue") -> tuple[str, list[str]]:
    """The ``queue`` filter and the queues it selects (every shard of a sharded queue, or
    the one shard named); an unknown queue is a 404."""
    queue = text_param(request, name, 68)
    queues = known_queues(request)
    if not queue:
        return "", queues
    if not valid_queue(queue) or queue not in queues:
        raise not_found(request.t("No queue named {name}.", name=queue))
    return queue, request.storage.queues.shards_of(queue, queues)


def page_size(request: Any) -> int:
    default = request.registry.ztq_settings.page_size
    return int_param(request, "limit", default, 1, monitor.MAX_PAGE)


# what a path may keep as it is in a Location header: the rest (spaces, quotes, angle
# brackets, anything not ASCII) is percent-encoded as UTF-8, as a browser sends it
_KEEP = "!#$%&'()*+,-./:;=?@[]^_`{|}~"


def safe_next(value: Any, default: str = "/") -> str:
    """A local path to go back to, ASCII only (a header carries nothing else: a ``next`` of
    ``/／／evil.com`` is encoded, not a 500 after the sign-in); anything that could leave the
    site gives ``default``."""
    if not isinstance(value, str) or not value.startswith("/") or value.startswith("//"):
        return default
    if "\\" in value or any(ord(c) < 32 or ord(c) == 127 for c in value):
        return default
    value = quote(value, safe=_KEEP)
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return default
    return value


def back(request: Any, default: str = "/") -> HTTPSeeOther:
    """Redirect after a POST to the form's ``next`` field (a local path only)."""
    return HTTPSeeOther(location=safe_next(request.POST.get("next"), default))


def flash(request: Any, message: str, kind: str = "ok") -> None:
    request.session.flash(message, queue=kind)


def audit(request: Any, action: str, *, home: bool = False, **fields: Any) -> None:
    """Write to the audit log of the page's system (``home``: the default system's, for
    what belongs to the console, sessions and tokens); with several systems the entry
    names the system it was written for."""
    user = request.user
    storage = request.home_storage if home else request.storage
    several = len(request.registry.ztq_systems) > 1
    system = (request.registry.ztq_systems.default if home else request.system).name
    streams.write_audit(storage, user.name if user else "?", action,
                        system=system if several else "", **fields)  # fmt: skip


def parse_ref(value: str) -> tuple[str, str] | None:
    """``queue:id`` (how forms name a task across queues) -> (queue, id), or None."""
    queue, sep, task_id = (value or "").partition(":")
    if sep and valid_queue(queue) and valid_task_id(task_id):
        return queue, task_id
    return None


def query(request: Any, **changes: Any) -> dict[str, str]:
    """The current query string with some parameters changed (None drops one)."""
    params = {k: v for k, v in request.GET.items() if isinstance(v, str)}
    for key, value in changes.items():
        if value is None or value == "":
            params.pop(key, None)
        else:
            params[key] = str(value)
    return params
