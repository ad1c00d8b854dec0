"""The first page (``/``): what is failing now, for the operator on call; and the counts the
navigation shows on every page (errors, running, lost workers)."""

from __future__ import annotations

from typing import Any

from pyramid.events import BeforeRender, subscriber
from pyramid.view import view_config

from ztq.console.web import known_queues
from ztq.core.monitor import overview as models
from ztq.core.monitor.queues import redis_memory


@view_config(route_name="home", request_method="GET", renderer="overview.jinja2")
def overview_page(request: Any) -> dict[str, Any]:
    """Failing queues first, the biggest error groups (with their actions), lost workers."""
    lost_after = request.registry.ztq_settings.lost_after
    data = models.incident(request.storage, known_queues(request), lost_after)
    try:  # Redis memory against maxmemory (docs/deploy.md, "Sizing Redis")
        data["memory"] = redis_memory(request.storage, known_queues(request))
    except Exception:  # noqa: BLE001 - a hint: an ACL may deny INFO or MEMORY USAGE
        data["memory"] = None
    data["share_minutes"] = models.SHARE_MINUTES
    return data


def _nav_counts(request: Any) -> dict[str, int]:
    """Read once per request, when a page's navigation asks (not for JSON, redirects)."""
    cache = request.environ.get("ztq.nav_counts")
    if cache is None:
        lost_after = request.registry.ztq_settings.lost_after
        try:
            cache = models.nav_counts(request.storage, known_queues(request), lost_after)
        except Exception:  # noqa: BLE001 - the counts are a hint: a page shows without them
            cache = {}
        request.environ["ztq.nav_counts"] = cache
    return cache


@subscriber(BeforeRender)
def nav_counts(event: BeforeRender) -> None:
    request = event.get("request")
    if request is not None and getattr(request, "user", None) is not None:
        event.setdefault("nav_counts", lambda: _nav_counts(request))
