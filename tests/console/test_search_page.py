"""Issue 30, point 7: search results newest first, with a count, a "more" link and a sign
that not every record was searched; an error in red only for a task whose final state is
error (one that ended done after a failed attempt says so, muted)."""

from __future__ import annotations

import json

import pytest
from webtest import TestApp

from tests import sample_tasks as t
from tests.console import scenario
from ztq.console.views import tasks as views
from ztq.core.engine.record import split_record
from ztq.core.engine.storage import Storage


def set_meta(store: Storage, queue: str, task_id: str, **fields: object) -> None:
    key = store.keys.tasks(queue)
    meta, payload = split_record(store.client.hget(key, task_id))
    meta.update(fields)
    store.client.hset(key, task_id, json.dumps(meta, separators=(",", ":")) + "\n" + payload)


def ids_shown(page: object) -> list[str]:
    return [a.text for a in page.html.select("#results ~ .table-wrap a.tid")]  # type: ignore[attr-defined]


def test_results_are_newest_first_with_a_count_and_more(operator: TestApp, store: Storage) -> None:
    handles = [t.add.delay(i, 1) for i in range(5)]
    for age, h in zip((50, 10, 40, 20, 30), handles, strict=True):  # seconds ago
        scenario.backdate(store, "default", h.id, enqueued=age)
    newest = [handles[i].id for i in (1, 3, 4, 2, 0)]
    page = operator.get("/search", {"q": "sample_tasks.add"})
    assert ids_shown(page) == newest
    count = page.html.select_one("p.count").text
    assert "newest 5 of 5 tasks that match" in count and "5 task records searched" in count
    assert "Not every record" not in count
    page = operator.get("/search", {"q": "sample_tasks.add", "limit": "2"})
    assert ids_shown(page) == newest[:2]
    more = page.html.select_one("nav.pager a.btn")
    assert "3 more matches" in more.text and "limit=4" in more["href"]
    assert more["href"].endswith("#results")  # focus goes on to the results
    page = operator.get(more["href"])
    assert ids_shown(page) == newest[:4]
    zh = operator.get("/search", {"q": "sample_tasks.add"}, headers={"Accept-Language": "zh"})
    assert "有 5 个任务匹配" in zh.text


def test_a_search_that_stops_early_says_so(
    operator: TestApp, store: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(6):  # two queues: a search page scans at least a queue's first batch
        t.add.enqueue((i, 2), queue="first" if i < 3 else "second")
    monkeypatch.setattr(views, "SEARCH_BUDGET", 2)
    page = operator.get("/search", {"q": "sample_tasks.add"})
    count = page.html.select_one("p.count").text
    assert "Not every record was searched: more matches may follow." in count
    nxt = page.html.select_one("a[rel=next]")
    assert nxt is not None and "cursor=" in nxt["href"]
    seen = set(ids_shown(page))
    page = operator.get(nxt["href"])
    assert set(ids_shown(page)).isdisjoint(seen)


@pytest.mark.slow
def test_an_error_is_red_only_for_a_task_that_ended_in_error(
    operator: TestApp, store: Storage
) -> None:
    bad = t.boom.delay("disk is full")
    scenario.work(store, fail=lambda p: p["args"][0])
    good = t.add.delay(1, 1)
    scenario.work(store)
    set_meta(store, "default", good.id, error="ValueError: an earlier attempt")  # a retry's
    page = operator.get("/search", {"q": "tests.sample_tasks"})
    rows = {
        r.select_one("a.tid").text: r for r in page.html.select("#results ~ .table-wrap tbody tr")
    }
    assert "disk is full" in rows[bad.id].select_one("td.error-text").text
    assert rows[good.id].select_one("td.error-text") is None
    assert rows[good.id].select_one("td.earlier").text == "earlier attempt failed"
    assert "an earlier attempt" not in rows[good.id].text  # only in its title


def test_a_task_page_mutes_an_earlier_attempts_error(operator: TestApp, store: Storage) -> None:
    good = t.add.delay(2, 2)
    scenario.work(store)
    set_meta(store, "default", good.id, error="ValueError: an earlier attempt")
    page = operator.get(f"/tasks/{good.id}")
    card = page.html.select_one("section.earlier-card")
    assert card is not None and "Earlier attempt failed" in card.text
    assert page.html.select_one("section.error-card") is None
    assert not page.html.select("section.card .error-text")
