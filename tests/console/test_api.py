"""The JSON API and the Prometheus metrics."""

from __future__ import annotations

import re

import pytest
from webtest import TestApp

from tests import sample_tasks as t
from tests.console import scenario
from tests.console.test_security import basic
from ztq.core.engine.storage import Storage


@pytest.mark.slow
def test_api_workers_and_queues(operator: TestApp, store: Storage) -> None:
    ids = scenario.populate(store)
    workers = {w["id"]: w for w in operator.get("/api/workers").json["items"]}
    assert set(workers) == {"app-1.4242", "mailer-1", "batch-7"}
    w = workers["app-1.4242"]
    assert w["status"] == "running" and w["threads"] == {"default": 2, "mail": 1}
    [cur] = w["current"]
    assert cur["id"] == ids["running"] and cur["progress"] == {"done": 42, "total": 100}
    assert cur["runtime_ms"] >= 70_000
    assert workers["batch-7"]["status"] == "lost"
    queues = {q["name"]: q for q in operator.get("/api/queues").json["items"]}
    d = queues["default"]
    assert d["ready"] == {"high": 1, "normal": 12, "low": 1} and d["errors"] == 4
    assert d["delayed"] == 3 and d["running"] == 1 and d["threads"] == 2
    assert len(d["throughput"]) == 60 and d["done_hour"] == 6 and d["failed_hour"] == 4
    assert queues["reports"]["threads"] == 0  # its only worker is lost


def test_api_errors_pages_with_a_cursor(operator: TestApp, store: Storage) -> None:
    for i in range(5):
        t.boom.delay(f"e{i}")
    scenario.work(store, fail=lambda p: p["args"][0])
    first = operator.get("/api/errors?limit=2").json
    assert first["total"] == 5 and len(first["items"]) == 2 and first["next"]
    item = first["items"][0]
    assert item["state"] == "error" and item["error"].startswith("ValueError")
    assert item["failed_at"] > 0 and "traceback" not in item and item["call"]
    seen = [i["id"] for i in first["items"]]
    cursor = first["next"]
    while cursor:
        page = operator.get(f"/api/errors?limit=2&cursor={cursor}").json
        seen += [i["id"] for i in page["items"]]
        cursor = page["next"]
    assert len(seen) == 5 == len(set(seen))
    assert operator.get("/api/errors?task=nothing").json["items"] == []


@pytest.mark.slow
def test_api_task_detail_and_history(operator: TestApp, store: Storage) -> None:
    h = t.boom.delay("<x>")
    scenario.work(store, fail=lambda p: "broken")
    task = operator.get(f"/api/tasks/{h.id}").json
    assert task["id"] == h.id and task["args"] == ["<x>"] and task["state"] == "error"
    assert "Traceback" in task["traceback"] and task["attempts"] == 1
    assert operator.get(f"/api/tasks/{h.id}?queue=default").json["id"] == h.id
    r = operator.get(f"/api/tasks/{h.id}?queue=mail", expect_errors=True)
    assert r.status_int == 404
    history = operator.get("/api/history").json["items"]
    assert history[0]["id"] == h.id and history[0]["status"] == "failed"
    assert history[0]["queue"] == "default" and history[0]["at"] > 0
    assert operator.get("/api/history?status=done").json["items"] == []


@pytest.mark.slow
def test_api_running_scheduled_and_log(operator: TestApp, store: Storage) -> None:
    ids = scenario.populate(store)
    running = operator.get("/api/running").json["items"]
    assert [r["id"] for r in running] == [ids["running"]] and running[0]["lease_until"] > 0
    scheduled = operator.get("/api/scheduled?queue=default").json
    assert [s["id"] for s in scheduled["items"]] == ids["delayed"]
    assert {c["name"] for c in scheduled["cron"]} == {"tests.sample_tasks.noop", "nightly-report"}
    log = operator.get("/api/log?kind=lost").json["items"]
    assert [e["worker"] for e in log] == ["batch-7"]


@pytest.mark.slow
def test_api_answers_json_to_scripts_with_basic_auth(anon: TestApp, store: Storage) -> None:
    t.add.delay(1, 2)
    r = anon.get("/api/queues", headers=basic("vic"))
    assert r.content_type == "application/json" and r.json["items"][0]["name"] == "default"


@pytest.mark.slow
def test_metrics_are_prometheus_text(anon: TestApp, store: Storage) -> None:
    scenario.populate(store)
    r = anon.get("/metrics", headers=basic("vic"))
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    lines = r.text.splitlines()
    assert 'ztq_queue_ready{queue="default",priority="normal"} 12' in lines
    assert 'ztq_queue_errors{queue="default"} 4' in lines
    assert 'ztq_workers{status="lost"} 1' in lines
    sample = re.compile(r'^[a-z_]+(\{([a-z_]+="[^"]*",?)*\})? -?[0-9.e+]+$')
    for line in lines:
        assert line.startswith("# HELP ") or line.startswith("# TYPE ") or sample.match(line), line


@pytest.mark.slow
def test_metrics_count_firing_alerts(operator: TestApp, store: Storage) -> None:
    from ztq.core.alerts.alerter import Alerter, AlertSettings
    from ztq.core.alerts.rules import parse_rules

    assert "ztq_alerts_firing 0" in operator.get("/metrics").text
    t.add.delay(1, 1)  # waiting, and no worker serves default
    cfg = AlertSettings(rules=parse_rules("no_worker *"))
    Alerter(store, cfg).evaluate()
    assert "ztq_alerts_firing 1" in operator.get("/metrics").text
