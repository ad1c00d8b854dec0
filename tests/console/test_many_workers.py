"""The workers pages with many workers: pages of 50 in name order, a status filter, counts
from the workers' summaries, and reads from Redis that do not grow with the workers."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from webtest import TestApp

from tests.console.conftest import post
from tests.console.scenario import make_lost
from tests.core.test_worker_fleet import oracle, populate
from ztq.core.engine.storage import Storage
from ztq.core.engine.workers import write_heartbeat


def rows(html: str) -> list[str]:
    return re.findall(r'<tr class="status-([^"]+)">', html)


@pytest.mark.slow
def test_workers_page_pages_filters_and_counts(operator: TestApp, store: Storage) -> None:
    shown = populate(store)
    html = operator.get("/workers").text
    assert rows(html) == [shown[w] for w in sorted(shown)[:50]]
    assert "120 workers" in html and 'href="/workers?status=lost"' in html
    assert "1–50 of 120, by name" in html and 'href="/workers?cursor=50"' in html
    last = operator.get("/workers?cursor=100").text
    assert len(rows(last)) == 20 and "First page" in last and "cursor=120" not in last
    assert 'rel="prev" href="/workers?cursor=50"' in last
    lost = operator.get("/workers?status=lost").text
    assert rows(lost) == ["lost"] * 15
    assert rows(operator.get("/workers?status=nonsense&cursor=x").text) == rows(html)
    f = oracle(store)
    assert f"{f.busy} of {sum(f.threads.values())} threads busy" in html


@pytest.mark.slow
def test_api_workers_pages_with_a_cursor(operator: TestApp, store: Storage) -> None:
    shown = populate(store)
    first = operator.get("/api/workers?limit=50").json
    assert first["total"] == 120 and first["next"] == "50"
    assert first["counts"] == {"running": 60, "paused": 15, "stopping": 15, "stopped": 15,
                               "lost": 15}  # fmt: skip
    f = oracle(store)
    assert first["threads"] == f.threads and first["busy"] == f.busy
    got, cursor = [w["id"] for w in first["items"]], first["next"]
    while cursor:
        page = operator.get(f"/api/workers?limit=50&cursor={cursor}").json
        got += [w["id"] for w in page["items"]]
        cursor = page["next"]
    assert got == sorted(shown)
    paused = operator.get("/api/workers?status=paused&limit=500").json
    assert [w["id"] for w in paused["items"]] == sorted(
        w for w, s in shown.items() if s == "paused"
    )
    assert {w["status"] for w in paused["items"]} == {"paused"} and paused["next"] is None
    store.queues.register_queue("a")
    queues = {q["name"]: q for q in operator.get("/api/queues").json["items"]}
    assert queues["a"]["threads"] == f.threads["a"]
    metrics = operator.get("/metrics").text.splitlines()
    for status, n in (("running", 60), ("lost", 15), ("stopped", 15), ("other", 0)):
        assert f'ztq_workers{{status="{status}"}} {n}' in metrics


@pytest.mark.slow
def test_forgetting_a_worker_takes_it_out_of_the_counts(operator: TestApp, store: Storage) -> None:
    populate(store, 16)
    lost = [w for w in sorted(operator.get("/api/workers").json["items"], key=lambda w: w["id"])
            if w["status"] == "lost"]  # fmt: skip
    assert len(lost) == 2 and operator.get("/api/workers").json["counts"]["lost"] == 2
    post(operator, "/workers", {"worker": lost[0]["id"], "cmd": "forget"})
    answer = operator.get("/api/workers").json
    assert answer["counts"]["lost"] == 1 and answer["total"] == 15


def heartbeat(i: int) -> dict[str, Any]:
    """About 1 kB, the same size for every ``i``, as a worker with four busy threads."""
    now = time.time()
    return {
        "name": f"w-{i:05d}", "host": f"host-{i:05d}", "ip": "10.0.0.1", "pid": 10_000 + i,
        "cpu_percent": 12.5, "mem_total": 2**34, "mem_percent": 41.0, "rss": 2**27,
        "started": now, "status": ("running", "paused")[i % 2], "pool": ["thread"],
        "threads": {"default": 2, "mail": 2}, "config_editable": True, "done": 1, "failed": 0,
        "current": {f"default-{j}": {"id": f"t{i:05d}{j}", "queue": "default",
                                     "task": "app.jobs.convert", "started": now}
                    for j in range(4)},
    }  # fmt: skip


@pytest.mark.slow
def test_pages_read_the_same_whatever_the_number_of_workers(
    operator: TestApp, store: Storage
) -> None:
    """Measured in bytes Redis sends: with 1,000 workers the pages read what they read with
    60 (a page of heartbeats, counts, summaries of the lost ones); the old pages read every
    heartbeat (800 kB here)."""
    store.queues.register_queue("default")
    for i in range(60):
        write_heartbeat(store, f"w-{i:05d}", heartbeat(i))
    for i in range(0, 60, 20):
        make_lost(store, f"w-{i:05d}")
    urls = ["/workers", "/workers?cursor=10", "/queues", "/api/workers", "/api/queues"]

    def sent(url: str) -> int:
        before = store.client.info("stats")["total_net_output_bytes"]
        operator.get(url)
        return int(store.client.info("stats")["total_net_output_bytes"] - before)

    for url in urls:
        operator.get(url)  # sessions, queue names: the same from now on
    small = {url: sent(url) for url in urls}
    for i in range(60, 1000):
        write_heartbeat(store, f"w-{i:05d}", heartbeat(i))
    heartbeats = store.client.memory_usage(store.keys.workers) or 0
    assert heartbeats > 700_000
    for url in urls:
        big = sent(url)
        assert big < small[url] + 500, (url, small[url], big)
    # a status filter looks at the states of up to 2,000 workers, not at their heartbeats
    assert sent("/workers?status=lost") < 60_000
    assert sent("/workers?status=paused") < small["/workers"] + 10_000
