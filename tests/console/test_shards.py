"""A sharded queue in the console: one row on the queues page, its shards listed on its
page, each shard with its own page, and every filter, action and count covering all of
them."""

from __future__ import annotations

import pytest
from webtest import TestApp

from tests import sample_tasks as t
from tests.console import scenario
from tests.console.conftest import post
from tests.console.test_actions import follow_bulk
from ztq.core.engine.storage import Storage
from ztq.core.monitor import queues as monitor

SHARDS = ["hot", "hot~1", "hot~2"]


def fill(store: Storage, ready: int = 20, failed: int = 12) -> None:
    for n in range(ready):
        t.spread.delay(n)
    for n in range(100, 100 + failed):  # fail them: the errors land in every shard
        t.spread.delay(n)
    for q in SHARDS:
        scenario.work(store, q, fail=lambda p: p["args"][0] >= 100 and f"bad {p['args'][0]}",
                      hold=lambda p: p["args"][0] < 100)  # fmt: skip
    store.queues.register_shards("hot", 3)


def test_the_queues_page_shows_one_queue_with_its_shards(viewer: TestApp, store: Storage) -> None:
    fill(store)
    page = viewer.get("/queues")
    rows = page.html.select("table.grid tbody tr")
    assert [r.select_one("td a").text for r in rows] == ["hot"]  # not hot~1, hot~2
    assert "3 shards" in rows[0].text
    [q] = viewer.get("/api/queues").json["items"]
    assert q["name"] == "hot" and q["shards"] == SHARDS
    assert (q["running"], q["errors"]) == (20, 12)


@pytest.mark.slow
def test_a_sharded_queue_lists_its_shards_and_each_has_a_page(
    viewer: TestApp, store: Storage
) -> None:
    fill(store)
    page = viewer.get("/queues/hot")
    assert "3 shards: counts, actions and charts cover all of them." in page.text
    links = [a["href"] for a in page.html.select("table.grid td a") if "/queues/" in a["href"]]
    assert links == ["/queues/hot", "/queues/hot~1", "/queues/hot~2"]
    assert "Pending tasks" not in page.text
    # something pending in a shard other than the first (whose name is the queue's)
    shard = next(h.queue for h in (t.spread.delay(n) for n in range(500, 520)) if h.queue != "hot")
    one = viewer.get(f"/queues/{shard}")
    assert "One shard of queue hot" in one.text
    assert one.html.select_one("p.crumbs a[href='/queues/hot']") is not None
    assert "Pending tasks" in one.text and "Nothing is waiting" not in one.text
    assert viewer.get("/queues/hot~9", expect_errors=True).status_int == 404
    assert "3 个分片" in viewer.get("/queues/hot", headers={"Accept-Language": "zh"}).text


def test_the_errors_of_a_sharded_queue_are_all_listed_under_its_name(
    viewer: TestApp, store: Storage
) -> None:
    fill(store, ready=0)
    rows = viewer.get("/api/errors", {"queue": "hot"}).json["items"]
    assert len(rows) == 12 and {r["queue"] for r in rows} == set(SHARDS)
    one = viewer.get("/api/errors", {"queue": "hot~2"}).json["items"]
    assert 0 < len(one) < 12 and {r["queue"] for r in one} == {"hot~2"}
    menu = viewer.get("/errors").html.select("select[name=queue] option")
    assert [o.get("value") for o in menu if o.get("value")] == ["hot"]


def test_actions_on_a_sharded_queue_reach_every_shard(operator: TestApp, store: Storage) -> None:
    fill(store, ready=0)
    post(operator, "/queues/hot/state", {"action": "pause"})
    assert all(store.queues.is_paused(q) for q in SHARDS)
    post(operator, "/queues/hot/state", {"action": "resume"})
    assert not any(store.queues.is_paused(q) for q in SHARDS)
    r = post(operator, "/bulk", {"action": "redo", "source": "errors", "queue": "hot"})
    _, last = follow_bulk(operator, r)
    assert sum(store.queues.pending_count(q) for q in SHARDS) == 12
    assert last.status_int == 303 and "Redid 12 tasks." in last.follow().text
    assert sum(s.errors for s in monitor.queue_stats(store, SHARDS)) == 0


@pytest.mark.slow
def test_an_operator_sets_and_lifts_a_queue_running_limit(
    operator: TestApp, viewer: TestApp, store: Storage
) -> None:
    t.add.delay(1, 2)
    r = post(operator, "/queues/default/state", {"action": "limit", "max_running": "1"})
    assert "default: one task at a time, on all workers (serial)." in r.follow().text
    assert store.queues.queue_config("default") == {"max_running": 1}
    page = viewer.get("/queues/default")
    assert "at most 1 at once" in page.text and 'name="max_running"' not in page.text  # viewer
    assert 'value="1"' in operator.get("/queues/default").text
    r = post(operator, "/queues/default/state", {"action": "limit", "max_running": "x"})
    assert "Running limit: a number from 1 to 10000" in r.follow().text
    assert store.queues.queue_config("default") == {"max_running": 1}
    post(operator, "/queues/default/state", {"action": "limit", "max_running": ""})
    assert store.queues.queue_config("default") == {}
    fill(store, ready=3, failed=0)
    r = post(operator, "/queues/hot/state", {"action": "limit", "max_running": "1"})
    assert "is sharded" in r.follow().text and store.queues.queue_config("hot") == {}
    assert 'name="max_running"' not in operator.get("/queues/hot").text
    r = post(viewer, "/queues/default/state", {"action": "limit", "max_running": "1"},
             expect_errors=True)  # fmt: skip
    assert r.status_int == 403 and store.queues.queue_config("default") == {}
