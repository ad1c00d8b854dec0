"""The alerts' settings (``alerts.*``): declared next to the rules they configure, resolved
by :func:`ztq.core.settings.resolve` like every other table (docs/alerts.md)."""

from __future__ import annotations

from ztq.core.alerts.rules import parse_rules
from ztq.core.settings import SETTINGS as CORE
from ztq.core.settings import Setting, by_name, number, webhook_url

SETTINGS: tuple[Setting, ...] = (
    Setting("alerts.rules", parse_rules, (), "alert rules, one a line (';' separates them "
            "too): error_rate, oldest_wait, no_worker, worker_lost (docs/alerts.md)"),
    Setting("alerts.webhook", webhook_url, "", "URL that alerts are POSTed to as JSON "
            "(Slack-compatible 'text'); empty: alerts are only shown", secret=True),
    Setting("alerts.every", number(0.1, 3600), 30.0, "seconds between two evaluations"),
    Setting("alerts.repeat_minutes", number(0, 7 * 24 * 60), 0.0,
            "remind of an alert still firing every this many minutes; 0: never"),
    Setting("alerts.timeout", number(0.1, 60), 5.0,
            "seconds one webhook attempt may take"),
    Setting("alerts.attempts", number(1, 10, whole=True), 3,
            "webhook attempts per message before it counts as failed (retried next round)"),
)  # fmt: skip
ALERTS = tuple(s.name for s in SETTINGS)
# what the alerts resolve: theirs, and core's console.lost_after (the worker_lost rule)
TABLE = by_name(CORE, SETTINGS)
