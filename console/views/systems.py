"""Systems (系统): every Redis system the console watches, each in a line with its health,
and the switch from one to another (``docs/systems.md``)."""

from __future__ import annotations

from typing import Any

from pyramid.view import view_config

from ztq.core.monitor.systems import health_of_all


@view_config(route_name="systems", request_method="GET", renderer="systems.jinja2")
def systems_page(request: Any) -> dict[str, Any]:
    """Each system asked at the same time; one that does not answer is a line that says so,
    the page itself answers 200."""
    systems = request.registry.ztq_systems
    rows = health_of_all(systems.all, systems.storage, request.registry.ztq_settings.lost_after)
    return {"rows": rows, "by_name": {s.name: s for s in systems.all}}
