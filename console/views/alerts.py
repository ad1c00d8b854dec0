"""Alerts (告警): what fires now, the rules, the history; and the console's evaluation thread.

The rules come from ``ztq.alerts.*`` of the console's ini (:mod:`ztq.core.alerts.alerter`). With
rules set, every console process evaluates them in a daemon thread; a Redis lock per round
and the state in Redis keep several processes from sending the same message twice.
"""

from __future__ import annotations

from typing import Any

from pyramid.view import view_config

from ztq.console.web import page_size, text_param
from ztq.core.alerts.alerter import Alerter, current, delivery_problem, history


def start_evaluation(registry: Any) -> None:
    """Start evaluating in this process when rules are set (``registry.ztq_alerter``)."""
    cfg = registry.ztq_alerts
    registry.ztq_alerter = Alerter(registry.ztq_storage, cfg).start() if cfg.rules else None


@view_config(route_name="alerts", request_method="GET", renderer="alerts.jinja2")
def alerts_page(request: Any) -> dict[str, Any]:
    storage = request.storage
    alerts = current(storage)
    cursor = text_param(request, "cursor", 40) or None
    return {
        "cfg": request.registry.ztq_alerts,
        "alerter": getattr(request.registry, "ztq_alerter", None),
        "alerts": alerts,
        "firing": sum(1 for a in alerts if a.status == "firing"),
        "problem": delivery_problem(alerts),
        "page": history(storage, cursor, page_size(request)),
    }
