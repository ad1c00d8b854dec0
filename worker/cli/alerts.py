"""``ztq alerts``: evaluate the console's alert rules from a terminal, cron or a service.

Run once, it evaluates one round (updating the shared state and sending what is due, as
the console would) and exits 1 when an alert fires, 0 when none does, 2 on bad settings
or when Redis cannot be reached. With ``--loop`` it evaluates every ``alerts.every``
seconds until Ctrl-C or SIGTERM, taking the same per-round lock as the consoles, and
prints what changes. ``--json`` prints one JSON object per round.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from ztq.core import settings
from ztq.core.alerts import settings as alert_settings
from ztq.core.alerts.alerter import Alert, Alerter, AlertSettings, Round, resolve_settings
from ztq.core.engine.storage import Storage
from ztq.core.errors import ZtqError


def load(args: argparse.Namespace) -> AlertSettings:
    """``--rule``/``--webhook``/``--every`` > environment > ``-c FILE`` > default."""
    ini = settings.read_ini(args.config, alert_settings.TABLE).values if args.config else None
    flags = {"alerts.rules": args.rule or None, "alerts.webhook": args.webhook,
             "alerts.every": args.every}  # fmt: skip
    cfg = resolve_settings(flags, ini=ini)
    if not cfg.rules:
        raise ZtqError("no alert rules: give --rule, ZTQ_ALERTS_RULES or ztq.alerts.rules in "
                       "the file of -c (see docs/alerts.md)")  # fmt: skip
    return cfg


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000)) if ms else "?"


def _line(a: Alert) -> str:
    return f"{a.status.upper():8} {a.rule}  [{a.subject}]  {a.text} (since {_when(a.since)})"


def _print_round(result: Round, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"ok": not result.firing, **result.as_dict()}), flush=True)
        return
    for which, a in result.sent:
        print(f"sent {which}: {a.rule} [{a.subject}]", file=sys.stderr)
    for which, a, detail in result.failed:
        print(f"webhook failed ({which}: {a.rule} [{a.subject}]): {detail}", file=sys.stderr)


def cmd_alerts(args: argparse.Namespace, connect: Callable[[argparse.Namespace], Storage]) -> int:
    cfg = load(args)
    alerter = Alerter(connect(args), cfg)
    if not args.loop:
        result = alerter.evaluate()
        _print_round(result, args.json)
        if not args.json:
            shown = [a for a in result.alerts if a.status != "resolved"]
            for a in shown:
                print(_line(a))
            if not shown:
                print(f"ok: nothing fires ({len(cfg.rules)} rules)")
        return 1 if result.firing else 0

    seen: dict[tuple[str, str], str] = {}  # (rule, subject) -> status printed last

    def show(result: Round | None) -> None:
        if result is None:
            return  # another evaluator took this round
        _print_round(result, args.json)
        now = {(a.rule, a.subject): a.status for a in result.alerts if a.status != "resolved"}
        if not args.json:
            for a in result.alerts:
                if a.status != "resolved" and seen.get((a.rule, a.subject)) != a.status:
                    print(_line(a), flush=True)
            for (rule, subject), status in seen.items():
                if (rule, subject) not in now and status == "firing":
                    print(f"{'RESOLVED':8} {rule}  [{subject}]", flush=True)
        seen.clear()
        seen.update(now)

    def on_term(signum: int, frame: Any) -> None:
        alerter.stop(timeout=0)

    signal.signal(signal.SIGTERM, on_term)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C ends the loop, as SIGTERM does
        alerter.run(on_round=show)
    return 0
