"""Expiry in the console (docs/queue-controls.md, "Expiry"): expired tasks are counted on
the queue page (English and Chinese) and on /metrics (``ztq_tasks_expired_total``), shown
in the history with their status, and a redo of a failed task clears its expiry."""

from __future__ import annotations

import json

import pytest
from webtest import TestApp

import ztq.core as ztq
from tests import sample_tasks as t
from tests.console.conftest import post
from ztq.core.engine.record import split_record
from ztq.core.engine.storage import Finished, Storage


def expire(store: Storage, n: int) -> list[str]:
    """``n`` tasks with an expiry that passed, ended by a fetch."""
    ids = [t.add.enqueue((i, 100), expires=600).id for i in range(n)]
    key = store.keys.tasks("default")
    for task_id in ids:
        meta, payload = split_record(str(store.client.hget(key, task_id)))
        meta["exp"] = 1  # long past
        store.client.hset(key, task_id, json.dumps(meta) + "\n" + payload)
    assert store.leases.fetch("default", "w", "t", 60_000, 10) == []
    return ids


@pytest.mark.slow
def test_the_queue_page_counts_expired_tasks(operator: TestApp, store: Storage) -> None:
    expire(store, 3)
    page = operator.get("/queues/default")
    [count] = page.html.select(".expired-count")
    assert "3 expired before they started" in count.text
    operator.set_cookie("ztq_lang", "zh")
    zh = operator.get("/queues/default").html
    assert "3 个在开始前已过期" in zh.select_one(".expired-count").text


def test_metrics_count_expired_tasks(operator: TestApp, store: Storage) -> None:
    expire(store, 2)
    lines = operator.get("/metrics").text.splitlines()
    assert 'ztq_tasks_expired_total{queue="default"} 2' in lines
    assert "# TYPE ztq_tasks_expired_total counter" in lines


@pytest.mark.slow
def test_the_history_shows_and_filters_expired_runs(operator: TestApp, store: Storage) -> None:
    [task_id] = expire(store, 1)
    ran = t.add.delay(5, 5)
    [lease] = store.leases.fetch("default", "w", "t", 60_000, 1)
    assert lease.id == ran.id
    store.leases.ack("default", "w", [Finished(ran.id, lease.token, t.add.name, "10")])
    assert ran.id in operator.get("/history").text  # a run the filter must leave out
    page = operator.get("/history", {"status": "expired"})
    assert task_id in page.text and ran.id not in page.text
    assert page.html.select_one('select[name="status"] option[value="expired"]') is not None


def test_a_console_redo_of_a_failed_task_clears_its_expiry(
    operator: TestApp, store: Storage
) -> None:
    h = t.boom.enqueue(("bad",), expires=600)
    [lease] = store.leases.fetch("default", "w", "t", 60_000, 1)
    store.leases.fail("default", "w", lease.id, lease.token, "x", "E: bad", "", retry_delay_ms=-1)
    assert store.tasks.record("default", h.id).get("exp")
    post(operator, "/tasks", {"action": "redo", "task": f"default:{h.id}", "next": "/errors"})
    assert ztq.ping(h) == "queued" and store.tasks.record("default", h.id).get("exp") is None


@pytest.mark.slow
def test_an_expired_task_has_its_page_and_is_found_by_state(
    operator: TestApp, store: Storage
) -> None:
    [task_id] = expire(store, 1)
    page = operator.get(f"/tasks/{task_id}", {"queue": "default"})
    assert page.status_int == 200 and "expired" in page.text
    found = operator.get("/search", {"state": "expired"})
    assert task_id in found.text
    assert found.html.select_one('option[value="expired"]') is not None
