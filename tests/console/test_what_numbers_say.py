"""What the numbers don't say, said on the page (issue 36, point 5): the overview's failed
share reads over a window it names, so it falls after a fix; the live threads of a paused
worker are marked; a paused queue's waiting count says the queue is paused; a rate limit
shows the time it implies for the tasks waiting, where their count is shown."""

from __future__ import annotations

import time

import pytest
from webtest import TestApp

from tests import sample_tasks as t
from tests.console import scenario
from tests.console.conftest import post
from ztq.core.engine.storage import Storage


def cell(page: TestApp, queue: str, label: str) -> str:
    """The text of the cell ``label`` in the row of ``queue`` (tables stack as cards)."""
    for row in page.html.select("tbody tr"):
        link = row.find("a", string=queue)
        if link is not None and link.find_parent("td") is row.find("td"):
            found = row.find("td", attrs={"data-label": label})
            if found is not None:
                return str(found.get_text(" ", strip=True))
    raise AssertionError(f"no {label!r} cell for {queue}")


def test_the_failed_share_reads_over_the_last_15_minutes(operator: TestApp, store: Storage) -> None:
    """An hour ago 40% failed; the fix is out 20 minutes ago: the share the overview shows
    is of the runs since (0%), not of the whole hour (about 30%)."""
    t.add.delay(1, 1)
    now = int(time.time() // 60)
    pipe = store.client.pipeline(transaction=False)
    for back in range(1, 60):
        failed = 40 if back > 20 else 0
        pipe.hset(store.keys.stats("default", now - back), mapping={"done": 60, "failed": failed})
    pipe.execute()
    page = operator.get("/")
    header = "Failed runs, last 15 min"
    assert header in page.text and "Failed runs, last hour" not in page.text
    share = cell(page, "default", header)
    assert share.startswith("0%") and "0 of 840" in share, share


@pytest.mark.slow
def test_a_paused_workers_threads_are_marked(operator: TestApp, store: Storage) -> None:
    t.add.delay(1, 1)
    scenario.heartbeat(store, "w-run", threads={"default": 2})
    scenario.heartbeat(store, "w-held", status="paused", threads={"default": 3})
    overview = operator.get("/")
    assert cell(overview, "default", "Live threads") == "5 (3 paused)"
    assert "(3 of them on paused workers)" in overview.text
    assert "(3 of them on paused workers)" in operator.get("/workers").text
    assert "(3 paused)" in operator.get("/queues").text
    # resumed: nothing marked
    scenario.heartbeat(store, "w-held", status="running", threads={"default": 3})
    assert cell(operator.get("/"), "default", "Live threads") == "5"


@pytest.mark.slow
def test_a_paused_queue_says_its_tasks_wait_for_the_pause(
    operator: TestApp, store: Storage
) -> None:
    for i in range(3):
        t.add.delay(i, 0)
    post(operator, "/queues/default/state", {"action": "pause"})
    assert "waiting — queue paused" in cell(operator.get("/"), "default", "Pending")
    assert "waiting — queue paused" in operator.get("/queues/default").text
    post(operator, "/queues/default/state", {"action": "resume"})
    assert "queue paused" not in operator.get("/queues/default").text


@pytest.mark.slow
def test_a_rate_limit_shows_the_time_it_implies_for_the_waiting_count(
    operator: TestApp, store: Storage
) -> None:
    for i in range(1001):
        t.add.enqueue((i, 0), queue="mail")
    post(operator, "/queues/mail/state", {"action": "rate", "rate_limit": "100/m"})
    # 1,000 after the burst of 1, at 100 a minute: 10 minutes
    assert "≈ 10m 00s at 100/m" in cell(operator.get("/"), "mail", "Pending")
    assert "≈ 10m 00s at 100/m" in operator.get("/queues/mail").text
    assert "≈ 10m 00s at 100/m" in operator.get("/queues").text


def test_a_queue_served_only_by_paused_workers_is_marked_in_red(
    operator: TestApp, store: Storage
) -> None:
    t.add.delay(1, 1)
    scenario.heartbeat(store, "w-held", status="paused", threads={"default": 3})
    page = operator.get("/")
    assert cell(page, "default", "Live threads") == "3 (3 paused)"
    marked = page.html.find("span", class_="bad-text", string="(3 paused)")
    assert marked is not None and "is paused" in marked["title"]
