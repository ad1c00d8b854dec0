"""ztq.core.monitor.queues: merged cursors across queues, scan budgets, and O(page) reads."""

from __future__ import annotations

import random

import pytest
from webtest import TestApp

from tests.console.bench import fill
from ztq.core.engine.storage import Storage
from ztq.core.monitor import queues as monitor
from ztq.core.monitor import streams


def walk(fetch, limit: int) -> list:  # type: ignore[no-untyped-def]
    out, cursor, pages = [], None, 0
    while True:
        page = fetch(cursor, limit)
        out += page.rows
        pages += 1
        assert pages < 1000
        if not page.next:
            return out
        cursor = page.next


@pytest.mark.parametrize("limit", [1, 2, 3, 7, 50])
def test_errors_merged_across_queues_with_equal_scores(store: Storage, limit: int) -> None:
    rng = random.Random(limit)
    expected = []
    for q in ("a", "b", "c"):
        store.queues.register_queue(q)
        members = {f"{q}-{n}": rng.choice([1000, 1000, 1000, 2000, 3000]) for n in range(12)}
        store.client.zadd(store.keys.errors(q), members)
        expected += [(q, m) for m in members]
    rows = walk(lambda c, n: monitor.score_page(store, "errors", ["a", "b", "c"], c, n), limit)
    got = [(r.queue, r.id) for r in rows]
    assert sorted(got) == sorted(expected) and len(got) == len(set(got))
    scores = [r.score for r in rows]
    assert scores == sorted(scores, reverse=True)
    delayed = walk(lambda c, n: monitor.score_page(store, "errors", ["b"], c, n), limit)
    assert len(delayed) == 12


def test_delayed_soonest_first(store: Storage) -> None:
    for q in ("a", "b"):
        store.client.zadd(
            store.keys.delayed(q), {f"{q}{n}": 100 + n * 2 + (q == "b") for n in range(5)}
        )
    rows = walk(lambda c, n: monitor.score_page(store, "delayed", ["a", "b"], c, n), 3)
    assert [r.id for r in rows] == ["a0", "b0", "a1", "b1", "a2", "b2", "a3", "b3", "a4", "b4"]


def test_history_merged_across_streams_with_equal_ids(store: Storage) -> None:
    for q in ("a", "b"):
        for n in range(1, 8):
            store.client.xadd(
                store.keys.history(q), {"id": f"{q}{n}"}, id=f"{1000 + n // 2}-{n % 2}"
            )
    rows = walk(lambda c, n: streams.stream_page(store, "history", ["a", "b"], c, n), 2)
    got = [r["id"] for r in rows]
    assert len(got) == 14 == len(set(got))
    keys = [(r["_id"], r["_queue"]) for r in rows]
    assert keys == sorted(
        keys, key=lambda k: (-int(k[0].split("-")[0]), -int(k[0].split("-")[1]), k[1])
    )


def test_filtered_scans_stop_at_their_budget_and_continue(store: Storage) -> None:
    store.queues.register_queue("a")
    for n in range(300):
        store.client.xadd(
            store.keys.history("a"), {"id": str(n), "status": "failed" if n % 100 == 0 else "done"}
        )
    match = lambda f: f["status"] == "failed"  # noqa: E731
    page = streams.stream_page(store, "history", ["a"], None, 10, match=match, budget=50)
    assert page.rows == [] and page.partial and page.scanned == 50 and page.next
    found, cursor, pages = [], None, 0
    while True:
        page = streams.stream_page(store, "history", ["a"], cursor, 10, match=match, budget=50)
        found += [r["id"] for r in page.rows]
        pages += 1
        if not page.next:
            break
        cursor = page.next
    assert found == ["200", "100", "0"] and pages == 6


@pytest.mark.slow
def test_pages_read_a_window_not_the_queue(operator: TestApp, store: Storage) -> None:
    """With 40,000 tasks and 4,000 errors (about 12 MB in Redis) no page reads more than
    1 MB from Redis."""
    fill(store, tasks=40_000, errors=4_000, workers=20, history=2_000, chunk=5_000)
    assert store.client.info("memory")["used_memory"] > 10 * 2**20
    pages = ["/workers", "/queues", "/queues/default", "/queues/default?start=5000", "/errors",
             "/errors?queue=pdf", "/errors/groups", "/errors?task=convert&q=nomatch", "/running",
             "/scheduled", "/history", "/log", "/search?q=nomatch", "/api/queues", "/api/errors",
             "/metrics", "/tasks/e-000000004?queue=default"]  # fmt: skip
    for url in pages:
        before = store.client.info("stats")["total_net_output_bytes"]
        operator.get(url)
        sent = store.client.info("stats")["total_net_output_bytes"] - before
        assert sent < 1_000_000, (url, sent)
