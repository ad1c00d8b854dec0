"""The first page (issue 30): failing queues first, the top error groups with their actions,
lost workers; the navigation counts errors, running tasks and lost workers on every page."""

from __future__ import annotations

import re

import pytest
from webtest import TestApp

from tests.console import scenario
from tests.console.test_group_actions import mail_incident
from ztq.core.engine.storage import Storage


def nav(page: str) -> str:
    return page[page.index('<nav class="main-nav"') : page.index("</nav>")]


@pytest.mark.slow
def test_the_overview_shows_what_fails_first(operator: TestApp, store: Storage) -> None:
    mail_incident(store)
    scenario.heartbeat(store, "batch-7", threads={"reports": 4})
    scenario.make_lost(store, "batch-7", 240)
    store.queues.register_queue("reports")  # a queue without errors: listed after the failing ones
    r = operator.get("/")
    assert r.status_int == 200 and "<h1>Overview</h1>" in r.text
    page = r.text
    rows = re.findall(r'<tr class="failing">.*?href="/queues/([^"]+)"', page, re.S)
    assert rows == ["mail", "default"]  # 9 errors, then 2
    assert page.index('href="/queues/mail"') < page.index('href="/queues/reports"')
    assert 'href="/errors/groups?queue=mail"' in page  # the failing queue's groups
    groups = page[page.index('id="ov-groups"') : page.index('id="ov-lost"')]
    assert groups.index("SMTPServerDisconnected") < groups.index("SMTPRecipientsRefused")
    assert "Redo group" in groups and "Delete group" in groups and "Traceback" in groups
    assert "/errors?group=" in groups
    lost = page[page.index('id="ov-lost"') :]
    assert 'href="/workers/batch-7"' in lost
    # the navigation: errors (11), running (0: no count), lost workers (1)
    bar = nav(page)
    assert re.search(r'href="/errors">Errors <span class="nav-count bad"[^>]*>11<', bar)
    assert re.search(r'href="/workers">Workers <span class="nav-count bad"[^>]*>1<', bar)
    assert 'href="/running">Running</a>' in bar
    # every page has them; Workers keeps its own URL
    assert ">11<" in nav(operator.get("/queues").text)
    assert "batch-7" in operator.get("/workers").text


@pytest.mark.slow
def test_the_overview_in_chinese_and_for_a_viewer(viewer: TestApp, store: Storage) -> None:
    mail_incident(store)
    viewer.set_cookie("ztq_lang", "zh")
    page = viewer.get("/").text
    assert "概览" in page and "错误最多的分组" in page
    assert "Redo group" not in page and "重做该组" not in page  # a viewer has no actions
    assert "/errors?group=" in page


@pytest.mark.slow
def test_the_overview_shows_redis_memory_and_warns_from_80_percent(
    operator: TestApp, store: Storage
) -> None:
    """Redis memory against maxmemory and the share of finished records (docs/deploy.md,
    "Sizing Redis"); a warning from 80% of maxmemory."""
    mail_incident(store)
    page = operator.get("/").text
    assert "Redis memory: " in page and "(no maxmemory)" in page
    assert "memory-warning" not in page
    used = int(store.client.info("memory")["used_memory"])
    store.client.config_set("maxmemory", int(used / 0.85))  # ~85% used
    try:
        page = operator.get("/").text
        share = int(re.search(r"maxmemory \((\d+)%\)", page).group(1))
        assert 80 <= share < 100, share
        assert 'class="flash error memory-warning"' in page
        assert "shorten result_ttl or raise maxmemory" in page
        metrics = operator.get("/metrics").text
        assert re.search(r"^ztq_redis_memory_maxmemory_bytes [1-9]", metrics, re.M)
        assert re.search(r'^ztq_oom_compact_total\{queue="mail"\} 0$', metrics, re.M)
    finally:
        store.client.config_set("maxmemory", 0)
