"""Waiting and run times in the console: percentiles on the queue pages and in /api,
histograms and counters on /metrics, and the Grafana dashboard built on those names."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from webtest import TestApp

from tests.core.test_timings import _run
from ztq.core.engine.storage import Storage

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "ztq-dashboard.json"


def _busy(store: Storage) -> None:
    for i in range(40):
        _run(store, 300, 2000 if i < 38 else 90_000, fail=i == 39)


def test_queue_pages_show_wait_and_run_percentiles(operator: TestApp, store: Storage) -> None:
    _busy(store)
    row = operator.get("/queues").html.select_one("table.queues tbody tr")
    cells = [td.get_text(strip=True) for td in row.select("td.num")]
    assert any(re.fullmatch(r"[23]\d\d ms", c) for c in cells)  # wait p95 ≈ 300 ms
    assert any(re.fullmatch(r"\d+m \d\ds|\d+\.\d s", c) for c in cells)  # run p95
    page = operator.get("/queues/default").html
    [times] = page.select("section.times table")
    rows = {tr.td.get_text(strip=True): [td.get_text(strip=True) for td in tr.select("td.num")]
            for tr in times.select("tbody tr")}  # fmt: skip
    assert re.fullmatch(r"[23]\d\d ms", rows["Waiting"][0])
    assert re.fullmatch(r"\d\.\d s", rows["Run time"][0])  # p50 ≈ 2 s
    assert re.fullmatch(r"\d+m \d\ds", rows["Run time"][2])  # p99 ≈ 90 s
    charts = page.select("svg.timechart")
    assert len(charts) == 2 and all(c.select("polyline.p95") for c in charts)


def test_api_queues_carries_the_percentiles(operator: TestApp, store: Storage) -> None:
    _busy(store)
    [q] = operator.get("/api/queues").json["items"]
    assert set(q["wait_ms"]) == {"p50", "p95", "p99"}
    assert 200 < q["wait_ms"]["p50"] < 450 and 60_000 < q["run_ms"]["p99"] < 130_000


@pytest.mark.slow
def test_metrics_expose_counters_and_histograms(operator: TestApp, store: Storage) -> None:
    _busy(store)
    text = operator.get("/metrics").text
    assert 'ztq_tasks_done_total{queue="default"} 39' in text
    assert 'ztq_tasks_failed_total{queue="default"} 1' in text
    assert "# TYPE ztq_task_run_seconds histogram" in text
    buckets = re.findall(r'^ztq_task_run_seconds_bucket\{queue="default",le="([^"]+)"\} (\d+)$',
                         text, re.M)  # fmt: skip
    bounds = [math.inf if le == "+Inf" else float(le) for le, _ in buckets]
    counts = [int(n) for _, n in buckets]
    assert bounds == sorted(bounds) and bounds[0] == 0.001 and bounds[-1] == math.inf
    assert counts == sorted(counts) and counts[-1] == 40  # cumulative, every run counted
    [count] = re.findall(r'^ztq_task_run_seconds_count\{queue="default"\} (\d+)$', text, re.M)
    [total] = re.findall(r'^ztq_task_run_seconds_sum\{queue="default"\} (\S+)$', text, re.M)
    assert int(count) == 40 and 38 * 2 + 2 * 90 - 1 < float(total) < 38 * 2 + 2 * 90 + 5
    below = dict(zip(bounds, counts, strict=True))
    assert below[1.024] == 0 and below[4.096] == 38 and below[65.536] == 38  # 2 s; 90 s


def test_the_grafana_dashboard_uses_only_metrics_the_console_serves(
    operator: TestApp, store: Storage
) -> None:
    _busy(store)
    from ztq.worker.resilience.faults import Faults  # a worker's /metrics (its health port)

    text = operator.get("/metrics").text + Faults(lease=15).metrics()
    served = set(re.findall(r"^# TYPE (\w+) ", text, re.M))
    dashboard = json.loads(DASHBOARD.read_text("utf-8"))
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {re.sub(r"_(bucket|sum|count)$", "", name)
            for e in exprs for name in re.findall(r"\b(ztq_\w+)", e)}  # fmt: skip
    assert len(used) >= 9 and used <= served, used - served
    queries = [v["query"] for v in dashboard["templating"]["list"] if v["name"] == "queue"]
    assert queries == ["label_values(ztq_queue_ready, queue)"]
