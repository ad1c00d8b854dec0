"""What ships for Prometheus and Grafana is built on what ztq serves: the rules' metric
names and the dashboard's are families that the console's /metrics or a worker's health
port serve, the dashboard shows every one of them, and `promtool` passes the rules and
their unit tests (when it is installed: Debian's `prometheus` package has it)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from webtest import TestApp

from ztq.worker.resilience.faults import Faults

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "ztq-rules.yml"
DASHBOARD = ROOT / "docs" / "grafana" / "ztq-dashboard.json"
PROMQL_WORDS = {"ztq"}  # not a metric: the job label's value


def served(operator: TestApp) -> set[str]:
    """Every metric family the console's /metrics and a worker's /metrics declare."""
    text = operator.get("/metrics").text + Faults(lease=15).metrics()
    return set(re.findall(r"^# TYPE (\w+) ", text, re.M))


def families(expr: str) -> set[str]:
    """The ztq metric families an expression reads (recorded series, level:name:op, aside)."""
    names = re.findall(r"\b(ztq_\w+)", re.sub(r"\w+:\w+:\w+", "", expr))
    return {re.sub(r"_(bucket|sum|count)$", "", n) for n in names} - PROMQL_WORDS


def test_the_rules_use_only_served_metrics_and_say_what_to_do(operator: TestApp) -> None:
    groups = yaml.safe_load(RULES.read_text("utf-8"))["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    recorded = {r["record"] for r in rules if "record" in r}
    alerts = [r for r in rules if "alert" in r]
    assert len(recorded) >= 5 and len(alerts) >= 10
    used: set[str] = set()
    for rule in rules:
        assert set(rule) <= {"record", "alert", "expr", "for", "labels", "annotations"}, rule
        used |= families(rule["expr"])
        for name in re.findall(r"\b(\w+:\w+:\w+)\b", rule["expr"]):
            assert name in recorded, name  # a recorded series used before it is defined
    for alert in alerts:
        assert alert["labels"]["severity"] in ("warning", "critical")
        assert alert["annotations"]["summary"]
    missing = used - served(operator)
    assert not missing, missing


@pytest.mark.tools
def test_promtool_checks_the_rules_and_runs_their_tests() -> None:
    assert shutil.which("promtool"), "no promtool: apt-get install prometheus (make system-deps)"
    for args in (["check", "rules", RULES.name], ["test", "rules", "ztq-rules.test.yml"]):
        done = subprocess.run(["promtool", *args], cwd=RULES.parent, capture_output=True,
                              text=True, timeout=60, check=False)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr


def test_the_dashboard_shows_every_metric_family(operator: TestApp) -> None:
    dashboard = json.loads(DASHBOARD.read_text("utf-8"))
    used = {n for p in dashboard["panels"] for t in p["targets"] for n in families(t["expr"])}
    all_served = served(operator)
    assert used <= all_served, used - all_served
    assert all_served <= used, all_served - used
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
