"""Issue 30, state you can trust and honest numbers, server side: a command sent to a worker
shows as pending ("pausing…", "threads → 3…") while it waits in the worker's command list in
Redis, and as done once the worker took it and reported; the worker's per-task "running for"
comes from the task's own start; counts say what they count; Chinese pages write Chinese
time units."""

from __future__ import annotations

import math
import time

import pytest
from webtest import TestApp

from tests import sample_tasks as t
from tests.console import scenario
from tests.console.conftest import post
from ztq.core.engine.storage import Storage
from ztq.core.engine.workers import take_commands
from ztq.core.monitor.fmt import ago, duration


def confirm(store: Storage, worker: str, **beat: object) -> None:
    """What the worker does with its commands: take them, then report (a heartbeat)."""
    assert take_commands(store, worker)
    scenario.heartbeat(store, worker, **beat)  # type: ignore[arg-type]


def zh(app: TestApp) -> TestApp:
    app.set_cookie("ztq_lang", "zh")
    return app


@pytest.mark.slow
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_pause_is_pending_until_the_worker_confirms(
    operator: TestApp, store: Storage, lang: str
) -> None:
    scenario.heartbeat(store, "w1")
    app = zh(operator) if lang == "zh" else operator
    pending, done = ("pausing…", "paused") if lang == "en" else ("正在暂停…", "已暂停")
    page = post(app, "/workers", {"worker": "w1", "cmd": "pause", "next": "/workers/w1"})
    page = page.follow()
    # no script needed: the page after the POST shows the command waiting for the worker
    assert pending in page.text
    assert page.html.select_one("button[value=resume]") is not None  # the next step offered
    assert page.html.select_one("button[value=pause]") is None
    running = "go on to their end" if lang == "en" else "继续运行到结束"
    assert running in page.text  # what a pause does to running tasks
    state = app.get("/workers/w1?state=1").json
    assert state["status"] == "running" and state["pending"]["status"] == "pausing"
    assert state["pending"]["sig"] and state["sig"].startswith("running|")
    on_list = app.get("/workers").text
    assert pending in on_list
    confirm(store, "w1", status="paused")
    page = app.get("/workers/w1")
    assert pending not in page.text
    assert page.html.select_one("h1 .badge").text == done
    state2 = app.get("/workers/w1?state=1").json
    assert state2["status"] == "paused" and not state2["pending"]["sig"]
    assert state2["sig"] != state["sig"]


@pytest.mark.slow
def test_set_threads_is_pending_until_the_worker_confirms(
    operator: TestApp, store: Storage
) -> None:
    scenario.heartbeat(store, "w1", threads={"default": 1})
    page = post(
        operator,
        "/workers",
        {"worker": "w1", "cmd": "set_threads", "queue": "default", "threads": "3",
         "next": "/workers/w1"},
    ).follow()  # fmt: skip
    cell = page.html.select_one("table.threads td.num").text
    assert "1" in cell and "threads → 3…" in cell
    assert "threads → 3…" in zh(operator).get("/workers").text.replace("线程 → 3…", "threads → 3…")
    confirm(store, "w1", threads={"default": 3})
    cell = operator.get("/workers/w1").html.select_one("table.threads td.num").text
    assert cell.strip() == "3"


@pytest.mark.slow
def test_a_worker_that_does_not_take_its_commands_keeps_them_pending(
    operator: TestApp, store: Storage
) -> None:
    scenario.heartbeat(store, "w1")
    for cmd in ("pause", "stop"):
        post(operator, "/workers", {"worker": "w1", "cmd": cmd})
    state = operator.get("/workers/w1?state=1").json
    assert state["pending"]["status"] == "stopping"  # a stop wins over a pause
    assert "stopping…" in operator.get("/workers/w1").text
    assert operator.get("/workers/nobody?state=1", status=404)


@pytest.mark.slow
def test_running_for_is_the_tasks_own_run_time(operator: TestApp, store: Storage) -> None:
    handle = t.sleepy.delay(30, "")
    [lease] = store.leases.fetch("default", "w1", "default-0", 60_000, 1)
    scenario.backdate(store, "default", lease.id, started=75)
    # the worker's report says it started just now (its clock, or a report sent late)
    run = {"id": handle.id, "queue": "default", "task": "tests.sample_tasks.sleepy",
           "started": time.time() - 1}  # fmt: skip
    scenario.heartbeat(store, "w1", current={"default-0": run})
    page = operator.get("/workers/w1")
    cells = [td.text for td in page.html.select("td[data-label='Running for']")]
    assert cells and cells[0].startswith("1m 1"), cells  # 1m 15s, not 1.0 s
    assert handle.id in page.text  # the whole id, not a cut one


@pytest.mark.slow
def test_chinese_pages_write_chinese_time_units(operator: TestApp, store: Storage) -> None:
    assert duration(72_000, "zh") == "1分12秒" and duration(72_000) == "1m 12s"
    assert duration(350, "zh") == "350毫秒" and duration(4200, "zh") == "4.2秒"
    assert duration(2 * 3600_000 + 300_000, "zh") == "2小时05分"
    assert duration(3 * 86400_000 + 4 * 3600_000, "zh") == "3天4小时"
    assert ago(time.time() * 1000, lang="zh") == "0毫秒"
    before = time.time()
    scenario.heartbeat(store, "w1", started=before - 72)
    text = zh(operator).get("/workers/w1").text
    late = math.ceil(time.time() - before)  # a loaded machine renders it seconds later
    assert any(f"1分{12 + s}秒前" in text for s in range(late + 1)), late
    assert "1m 1" not in text


@pytest.mark.slow
def test_counts_say_what_they_count(operator: TestApp, store: Storage) -> None:
    scenario.populate(store)
    scenario.throughput(store)
    text = operator.get("/queues").text
    assert "Runs in the last hour" in text and "failed, retries included" in text
    assert "tasks in the error lists now" in text
    assert "Runs, last hour: done / failed" in text  # the column of "19 / 15"
    cell = operator.get("/queues").html.select_one(
        "td[data-label='Runs, last hour: done / failed']"
    )
    assert "done /" in cell.text and "failed" in cell.text
    text = zh(operator).get("/queues/default").text
    assert "次失败（含重试）" in text and "当前错误清单中的任务" in text


@pytest.mark.slow
def test_every_list_page_has_the_refresh_switch(operator: TestApp, store: Storage) -> None:
    scenario.populate(store)
    for path in ("/workers", "/workers/app-1.4242", "/queues", "/queues/default", "/errors",
                 "/errors/groups", "/running", "/scheduled", "/history", "/log"):  # fmt: skip
        page = operator.get(path)
        assert page.html.select_one("#livebar #live-toggle") is not None, path
        assert page.html.select_one("main")["data-live"] != "0", path
    page = operator.get("/search?q=x")  # not a list that changes by itself: no switch
    assert page.html.select_one("#livebar") is None
