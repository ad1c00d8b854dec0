"""What ZTQ's operators relied on, in ztq's console: the workers serving each queue (named
and linked), the IP of a worker in the worker log and history, the comment of each run in
history, an "unknown" error type for a task that died without a Python exception, and on a
stopped worker's page that only its supervisor can start it again. One real worker process
end to end, then the edges on real Redis."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from webtest import TestApp

from tests.console import dying_tasks, scenario
from tests.console.conftest import post
from tests.worker.conftest import stop_process, wait_for
from ztq.core.engine.storage import Storage
from ztq.core.engine.workers import get_worker, log_event, write_heartbeat
from ztq.core.monitor import queues as monitor
from ztq.core.monitor import streams

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def box(redis_url: str, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``ztq worker`` as a process: two threads on mail, a process slot on pdf."""
    log = open(tmp_path / "worker.log", "wb")  # noqa: SIM115 - closed below
    argv = [sys.executable, "-m", "ztq.worker", "--redis", redis_url, "--name", "box-1",
            "--queue", "mail:2", "--queue", "pdf:1:process",
            "--import", "tests.console.dying_tasks",
            "--heartbeat", "0.3", "--lease", "2", "--grace", "2"]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=log)
    try:
        yield proc
    finally:
        stop_process(proc)
        log.close()


@pytest.mark.slow
def test_a_real_worker_as_ztqs_operators_saw_it(
    operator: TestApp, store: Storage, box: subprocess.Popen[bytes]
) -> None:
    def beat() -> dict:
        assert box.poll() is None, "the worker exited"
        info = get_worker(store, "box-1")
        return info.data if info and info.data.get("threads") else {}

    data = wait_for(beat, timeout=30)
    died = dying_tasks.dies.delay()
    wait_for(lambda: store.tasks.record(died.queue, died.id).state.value == "error", timeout=30)

    queues = operator.get("/queues").html
    for queue, threads in (("mail", " ×2"), ("pdf", "")):
        [row] = [tr for tr in queues.select("table.queues tbody tr") if tr.td.get_text(strip=True)
                 .startswith(queue)]  # fmt: skip
        [cell] = row.select('td[data-label="Served by"]')
        assert cell.a["href"] == "/workers/box-1"
        assert cell.get_text(" ", strip=True) == f"box-1{threads}"
    assert 'href="/workers/box-1"' in operator.get("/queues/mail").text

    log = operator.get("/log?worker=box-1").html
    start = log.select("table.grid tbody tr")[-1]  # its first line: start
    assert data["ip"] and data["ip"] in start.select('td[data-label="Worker"]')[0].get_text()

    errors = operator.get("/errors?queue=pdf").text
    assert ">unknown</span> ChildDied: the process slot died" in errors
    assert ">unknown</span>" in operator.get("/errors/groups").text
    task = operator.get(f"/tasks/{died.id}?queue=pdf").text
    assert "Error type unknown: the task died without a Python exception" in task

    post(operator, "/workers", {"worker": "box-1", "cmd": "stop"})
    box.wait(30)
    page = operator.get("/workers/box-1").text
    assert "It cannot be started again from the console" in page
    assert "Its supervisor (systemd, Kubernetes, supervisord) starts it again" in page
    assert 'value="stop"' not in page  # nothing offers to run it again either
    # its own lines carry its IP, so the log shows it after the worker is forgotten too
    own = [e for e in streams.stream_page(store, "events", limit=50).rows
           if e.get("worker") == "box-1"]  # fmt: skip
    assert {e["kind"] for e in own} >= {"start", "command", "stop"}
    assert all(e.get("ip") == data["ip"] for e in own)


@pytest.mark.slow
def test_history_shows_the_comment_a_run_reported(
    operator: TestApp, store: Storage, box: subprocess.Popen[bytes]
) -> None:
    h = dying_tasks.noted.delay("converting a.doc")
    wait_for(lambda: store.tasks.record(h.queue, h.id).state.value == "done", timeout=30)
    [row] = operator.get("/history?queue=mail").html.select("table.grid tbody tr")
    assert row.select('td[data-label="Comment"]')[0].get_text(strip=True) == "converting a.doc"


def heartbeat(name: str, threads: dict[str, int], status: str = "running") -> dict:
    return {"name": name, "host": name, "ip": f"10.1.0.{len(name)}", "pid": 7,
            "status": status, "threads": threads, "started": time.time()}  # fmt: skip


def test_queues_name_at_most_five_workers_and_count_the_threads_left_out(
    operator: TestApp, store: Storage
) -> None:
    store.queues.register_queue("mail")
    store.queues.register_queue("idle")
    for i in range(7):
        write_heartbeat(store, f"m-{i}", heartbeat(f"m-{i}", {"mail": 1 + i % 2}))
    write_heartbeat(store, "gone", heartbeat("gone", {"mail": 3}, status="stopped"))
    write_heartbeat(store, "quiet", heartbeat("quiet", {"mail": 3}))
    scenario.make_lost(store, "quiet")
    page = operator.get("/queues").html
    [mail] = [tr for tr in page.select("table.queues tbody tr") if "mail" in tr.td.get_text()]
    cell = mail.select('td[data-label="Served by"]')[0]
    assert [a["href"] for a in cell.select("a")][:5] == [f"/workers/m-{i}" for i in range(5)]
    assert cell.get_text(" ", strip=True).endswith("and 3 more threads")  # m-5 ×2, m-6 ×1
    assert "gone" not in cell.get_text() and "quiet" not in cell.get_text()
    [idle] = [tr for tr in page.select("table.queues tbody tr") if "idle" in tr.td.get_text()]
    assert idle.select('td[data-label="Served by"]')[0].get_text(strip=True) == "–"
    whole = operator.get("/queues/mail").text  # the queue's page names up to 50
    assert all(f'href="/workers/m-{i}"' in whole for i in range(7))


def test_a_fleet_bigger_than_what_is_read_is_named_in_part(store: Storage) -> None:
    from ztq.core.monitor.workers import serving

    for i in range(6):
        write_heartbeat(store, f"w-{i}", heartbeat(f"w-{i}", {"mail": 1}))
    some = serving(store, per_status=4)
    assert some.partial and len(some.workers["mail"]) == 4
    assert not serving(store).partial and len(serving(store).workers["mail"]) == 6


@pytest.mark.slow
def test_worker_log_and_history_show_the_ip(operator: TestApp, store: Storage) -> None:
    write_heartbeat(store, "box-2", heartbeat("box-2", {"default": 1}))
    log_event(store, "start", "box-2", "pid 7 serving default")
    log_event(store, "start", "elsewhere", "pid 8", ip="192.0.2.9")  # the event's own IP
    log_event(store, "lost", "forgotten", "task x went back to ready")  # no heartbeat left
    rows = operator.get("/log").html.select("table.grid tbody tr")
    cells = {r.select("td")[2].a.get_text(): r.select("td")[2].get_text(" ", strip=True)
             for r in rows}  # fmt: skip
    assert cells == {"box-2": "box-2 10.1.0.5", "elsewhere": "elsewhere 192.0.2.9",
                     "forgotten": "forgotten"}  # fmt: skip
    assert "10.1.0.5" in operator.get("/workers/box-2").text
    from tests import sample_tasks as t

    t.add.delay(1, 2)
    scenario.work(store, "default", worker="box-2")
    history = operator.get("/history").html.select('td[data-label="Worker"]')
    assert "10.1.0.5" in history[0].get_text()


def test_history_shows_a_comment_escaped_where_the_entry_has_one(
    operator: TestApp, store: Storage
) -> None:
    """The page's side of the comment column, on an entry as ack.lua writes it with the
    comment (the test above runs a real worker)."""
    store.queues.register_queue("mail")
    store.client.xadd(store.keys.history("mail"), {
        "id": "abc", "task": "app.convert", "status": "done", "worker": "w", "thread": "t",
        "enqueued": 1, "started": 2, "ended": 3, "runtime_ms": 1, "summary": "",
        "comment": "<b>a.doc</b> page 3"})  # fmt: skip
    html = operator.get("/history").text
    assert "&lt;b&gt;a.doc&lt;/b&gt; page 3" in html and "<b>a.doc" not in html


@pytest.mark.slow
def test_errors_without_a_traceback_are_unknown_and_grouped_by_what_happened(
    operator: TestApp, store: Storage
) -> None:
    from tests import sample_tasks as t

    lost = t.add.delay(5, 5)
    store.leases.fetch("default", "w9", "default-0", 1, 10)  # a 1 ms lease
    time.sleep(0.01)
    store.leases.reap("default", 1)  # lost its worker once too often: WorkerLost, no traceback
    t.boom.delay("bad")
    scenario.work(store, "default", fail=lambda p: "bad")  # a Python exception
    rows = monitor.score_page(store, "errors", ["default"], None, 10).rows
    assert {r.record.get("error", "").split(":")[0] for r in rows} == {"WorkerLost", "ValueError"}
    groups = operator.get("/errors/groups").html.select("table.grid tbody tr")
    kinds = sorted(g.select('td[data-label="Error type"] span')[0].get_text() for g in groups)
    assert kinds == ["ValueError", "unknown"]
    task = operator.get(f"/tasks/{lost.id}?queue=default").text
    assert "Error type unknown" in task and "WorkerLost: the task lost its worker 1 times" in task
    [raised] = [r.id for r in rows if r.id != lost.id]
    assert "Error type unknown" not in operator.get(f"/tasks/{raised}?queue=default").text
    zh = operator.get("/errors/groups", headers={"Accept-Language": "zh-CN"}).text
    assert ">未知</span>" in zh
