"""Autoscaling in the console: autoscaled and pinned queues on the workers pages, the Auto
button (POST, CSRF, operator role, audited), and the autoscale decisions of the worker log
in English and Chinese."""

from __future__ import annotations

import pytest
from webtest import TestApp

from tests.console import scenario
from tests.console.conftest import post
from tests.console.test_actions import audit_log
from ztq.core.engine.storage import Storage
from ztq.core.engine.workers import log_event, take_commands

SCALED = {
    "mail": {"min": 0, "max": 8, "pool": "thread", "pinned": False,
             "last": {"message": "mail 2 → 5 threads: 340 waiting, CPU 41%", "queue": "mail",
                      "before": "2", "after": "5", "why": "grow", "waiting": "340",
                      "busy": "2.0", "cpu": "41", "memory": "50"}},
    "pdf": {"min": 1, "max": 4, "pool": "process", "pinned": True, "last": {}},
}  # fmt: skip


def decisions(store: Storage) -> None:
    log_event(store, "autoscale", "w1", "mail 2 → 5 threads: 340 waiting, CPU 41%",
              queue="mail", before=2, after=5, why="grow", waiting=340, busy="2.0", cpu=41,
              memory=50)  # fmt: skip
    log_event(store, "autoscale", "w1", "pdf 4 → 1 threads: needed by mail, 0.7 of 4 busy",
              queue="pdf", before=4, after=1, why="reclaim", waiting=0, busy="0.7", cpu=41,
              memory=50, **{"for": "mail"})  # fmt: skip
    log_event(store, "autoscale", "w1", "mail held at 5 threads: 9 waiting, CPU 91% ≥ 85%",
              queue="mail", before=5, after=5, why="hold_cpu", waiting=9, cpu=91,
              memory=50)  # fmt: skip


@pytest.mark.slow
def test_autoscaled_and_pinned_queues_are_shown(operator: TestApp, store: Storage) -> None:
    scenario.heartbeat(store, "w1", threads={"mail": 5, "default": 2}, autoscale=SCALED)
    page = operator.get("/workers/w1")
    rows = {r.td.get_text(strip=True): r for r in page.html.select("table.threads tbody tr")}
    assert sorted(rows) == ["default", "mail", "pdf"]  # pdf runs 0 threads: still listed
    assert "0..8 auto" in rows["mail"].get_text() and "340 waiting" in rows["mail"].get_text()
    assert "pinned" in rows["pdf"].get_text() and "range 1..4" in rows["pdf"].get_text()
    assert "fixed" in rows["default"].get_text()
    autos = page.html.select("button[name=cmd][value=autoscale]")
    assert len(autos) == 1 and autos[0].find_parent("tr") is rows["pdf"]
    listing = operator.get("/workers").text
    assert "mail × 5" in listing and "0..8 auto" in listing and "pdf × 0" in listing


@pytest.mark.slow
def test_auto_button_sends_the_command_audited(operator: TestApp, store: Storage) -> None:
    scenario.heartbeat(store, "w1", threads={"pdf": 2}, autoscale=SCALED)
    page = operator.get("/workers/w1")
    form = next(f for f in page.forms.values() if 'value="autoscale"' in f.text)
    r = form.submit("cmd", value="autoscale").follow()
    assert "Sent autoscale to w1" in r.text
    [cmd] = take_commands(store, "w1")
    assert (cmd["cmd"], cmd["queue"], cmd["by"]) == ("autoscale", "pdf", "ann")
    assert audit_log(store)[0]["action"] == "worker autoscale"
    assert "queue=pdf" in audit_log(store)[0]["detail"]


@pytest.mark.slow
def test_auto_is_checked_and_needs_an_operator(
    operator: TestApp, viewer: TestApp, store: Storage
) -> None:
    scenario.heartbeat(store, "w1", autoscale=SCALED)
    for queue in ("default", "bad name"):  # not autoscaled here; not a queue name
        r = post(operator, "/workers", {"worker": "w1", "cmd": "autoscale", "queue": queue})
        assert "does not autoscale that queue" in r.follow().text
    scenario.heartbeat(store, "w2", autoscale=SCALED, editable=False)
    r = post(operator, "/workers", {"worker": "w2", "cmd": "autoscale", "queue": "pdf"})
    assert r.follow().html.select(".flash.error")
    r = post(viewer, "/workers", {"worker": "w1", "cmd": "autoscale", "queue": "pdf"},
             expect_errors=True)  # fmt: skip
    assert r.status_int == 403
    r = operator.post("/workers", {"worker": "w1", "cmd": "autoscale", "queue": "pdf"},
                      expect_errors=True)  # fmt: skip
    assert r.status_int in (400, 403)  # no CSRF token
    assert take_commands(store, "w1") == [] and take_commands(store, "w2") == []
    assert not viewer.get("/workers/w1").html.select("button[value=autoscale]")


@pytest.mark.slow
def test_decisions_in_the_worker_log_in_both_languages(operator: TestApp, store: Storage) -> None:
    scenario.heartbeat(store, "w1", autoscale=SCALED)
    decisions(store)
    en = operator.get("/log", {"kind": "autoscale"}).text
    assert "mail 2 → 5 threads: 340 waiting, CPU 41%" in en
    assert "pdf 4 → 1 threads: needed by mail, 0.7 threads busy" in en
    assert "mail held at 5 threads: 9 waiting, host CPU 91% is over the ceiling" in en
    assert "why=" not in en  # the fields make the sentence, not a list
    assert "mail 2 → 5 threads" in operator.get("/workers/w1").text
    page = operator.get("/log").forms["lang"].submit("lang", value="zh")
    zh = operator.get("/log", {"kind": "autoscale"}).text
    assert page.status_int == 303
    assert "智能调度" in zh
    assert "mail 线程 2 → 5：340 个任务等待，CPU 41%" in zh
    assert "pdf 线程 4 → 1：让给 mail，0.7 个线程忙" in zh
    assert "mail 保持 5 个线程：9 个任务等待，主机 CPU 91% 超过上限" in zh
    worker = operator.get("/workers/w1").text
    assert "0..8 自动" in worker and "已固定" in worker and "智能调度记录" in worker
    threads = operator.get("/workers/w1").html.select_one("table.threads").get_text()
    assert "最近决定: mail 线程 2 → 5：340 个任务等待" in threads and "waiting" not in threads
