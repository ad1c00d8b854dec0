"""Every action of the console: what it changes in Redis, what it reports, what it audits."""

from __future__ import annotations

import pytest
from webtest import TestApp

import ztq.core as ztq
from tests import sample_tasks as t
from tests.console import scenario
from tests.console.conftest import post
from ztq.core.engine.record import decode_payload
from ztq.core.engine.storage import Storage
from ztq.core.engine.workers import disabled_cron, take_commands
from ztq.core.monitor import streams


def audit_log(store: Storage) -> list[dict]:
    """The audit entries of actions (sign-ins and sign-outs left out: other tests cover them)."""
    rows = streams.stream_page(store, "audit", limit=100).rows
    return [r for r in rows if r["action"] not in ("signed in", "signed out")]


def follow_bulk(app: TestApp, response) -> tuple[int, object]:  # type: ignore[no-untyped-def]
    """Press "Continue" on bulk progress pages until the job ends; returns (steps, last)."""
    steps = 1
    while response.status_int == 200 and "data-autosubmit" in response.text:
        response = response.forms["bulk"].submit()
        steps += 1
        assert steps < 200
    return steps, response


def failed(store: Storage, n: int, message: str = "bad", task=t.boom) -> list[str]:  # type: ignore[no-untyped-def]
    # prepare (partial binding): flaky(path, fail_times) is given only its path here
    ids = [task.prepare((f"{message} {i}",)).enqueue().id for i in range(n)]
    scenario.work(store, fail=lambda p: p["args"][0])
    return ids


@pytest.mark.slow
def test_pause_and_resume_a_queue(operator: TestApp, store: Storage) -> None:
    t.add.delay(1, 1)
    r = post(operator, "/queues/default/state", {"action": "pause", "next": "/queues/default"})
    assert r.status_int == 303 and r.location.endswith("/queues/default")
    assert store.queues.is_paused("default")
    assert "Paused default" in r.follow().text and "state-paused" in operator.get("/queues").text
    assert store.leases.fetch("default", "w", "t", 1000, 1) == []
    post(operator, "/queues/default/state", {"action": "resume"})
    assert not store.queues.is_paused("default")
    assert [e["action"] for e in audit_log(store)] == ["resume queue", "pause queue"]
    assert audit_log(store)[0]["user"] == "ann"
    r = post(operator, "/queues/nope/state", {"action": "pause"}, expect_errors=True)
    assert r.status_int == 404


@pytest.mark.slow
def test_redo_one_failed_task(operator: TestApp, store: Storage) -> None:
    [task_id] = failed(store, 1)
    r = post(operator, "/tasks", {"action": "redo", "task": f"default:{task_id}",
                                  "next": f"/tasks/{task_id}"})  # fmt: skip
    assert r.location.endswith(f"/tasks/{task_id}")
    assert "Redo: 1 of 1 task." in r.follow().text
    assert ztq.ping(task_id) == "queued"
    rec = store.tasks.record("default", task_id)
    assert rec is not None and rec.get("redone") == 1 and not rec.get("error")
    [entry] = audit_log(store)
    assert (entry["action"], entry["queue"], entry["ids"], entry["count"]) == (
        "redo", "default", task_id, "1")  # fmt: skip


@pytest.mark.slow
def test_redo_and_delete_a_selection(operator: TestApp, store: Storage) -> None:
    ids = failed(store, 4)
    redo = [("action", "redo")] + [("task", f"default:{i}") for i in ids[:2]]
    post(operator, "/tasks", redo)
    assert [ztq.ping(i) for i in ids] == ["queued", "queued", "error", "error"]
    delete = [("action", "delete")] + [("task", f"default:{i}") for i in ids[2:]]
    r = post(operator, "/tasks", delete).follow()
    assert "Delete: 2 of 2 tasks." in r.text
    assert [ztq.ping(i) for i in ids[2:]] == ["none", "none"]
    # an action on tasks in another state leaves them alone and says so
    r = post(operator, "/tasks", redo).follow()
    assert "2 were in another state" in r.text


@pytest.mark.slow
def test_run_first_and_delete_pending_tasks(operator: TestApp, store: Storage) -> None:
    ids = [t.add.delay(i, 0).id for i in range(5)]
    form = operator.get("/queues/default").forms["selection"]
    for box in form.fields["task"]:
        box.checked = box._value in (f"default:{ids[3]}", f"default:{ids[4]}")
    form.submit("action", value="first")
    order = [lease.id for lease in store.leases.fetch("default", "w", "t", 60_000, 10)]
    assert order == [ids[3], ids[4], ids[0], ids[1], ids[2]]
    more = [t.add.delay(i, 9).id for i in range(3)]
    post(operator, "/tasks", [("action", "delete"), ("task", f"default:{more[1]}")])
    assert [lease.id for lease in store.leases.fetch("default", "w", "t", 60_000, 10)] == [
        more[0],
        more[2],
    ]


@pytest.mark.slow
def test_delayed_run_now_and_delete(operator: TestApp, store: Storage) -> None:
    a = t.add.enqueue((1, 0), delay=600).id
    b = t.add.enqueue((2, 0), delay=600).id
    post(operator, "/tasks", {"action": "run_now", "task": f"default:{a}"})
    assert ztq.ping(a) == "queued" and ztq.ping(b) == "delayed"
    post(operator, "/tasks", {"action": "first", "task": f"default:{b}"})
    assert ztq.ping(b) == "queued"
    assert [lease.id for lease in store.leases.fetch("default", "w", "t", 60_000, 10)] == [b, a]
    c = t.add.enqueue((3, 0), delay=600).id
    post(operator, "/tasks", {"action": "delete", "task": f"default:{c}"})
    assert ztq.ping(c) == "none"


@pytest.mark.slow
def test_a_running_task_is_killed_through_its_worker_not_deleted(
    operator: TestApp, store: Storage
) -> None:
    h = t.sleepy.delay(10)
    scenario.heartbeat(store, "w1")
    scenario.work(store, worker="w1", thread="default-0", hold=lambda p: True)
    r = post(operator, "/tasks", {"action": "delete", "task": f"default:{h.id}"}).follow()
    assert ztq.ping(h.id) == "running" and "in another state" in r.text
    post(operator, "/tasks", {"action": "kill", "task": f"default:{h.id}"})
    [cmd] = take_commands(store, "w1")
    assert (cmd["cmd"], cmd["thread"], cmd["task_id"], cmd["by"]) == (
        "kill", "default-0", h.id, "ann")  # fmt: skip


@pytest.mark.slow
def test_task_actions_refuse_bad_input(operator: TestApp, store: Storage) -> None:
    r = post(operator, "/tasks", {"action": "redo"}).follow()
    assert "Select tasks" in r.text
    r = post(operator, "/tasks", {"action": "explode", "task": "default:x"}).follow()
    assert "Select tasks" in r.text
    r = post(operator, "/tasks", {"action": "redo", "task": "default:missing"}, expect_errors=True)
    assert r.status_int == 404
    r = post(operator, "/tasks", {"action": "redo", "task": "nope:x"}, expect_errors=True)
    assert r.status_int == 404
    r = post(operator, "/tasks", {"action": "redo", "task": "no colon"}).follow()
    assert "Select tasks" in r.text


@pytest.mark.slow
def test_bulk_redo_of_a_whole_filter_runs_in_batches(operator: TestApp, store: Storage) -> None:
    keep = failed(store, 30, "other", task=t.flaky)  # flaky(path, n): other task, kept
    redo = failed(store, 250, "bulk")
    r = post(operator, "/bulk", {"action": "redo", "source": "errors", "task": "boom",
                                 "next": "/errors"})  # fmt: skip
    assert r.status_int == 200 and "data-autosubmit" in r.text and "<progress" in r.text
    steps, last = follow_bulk(operator, r)
    assert steps >= 3 and last.status_int == 303  # batches of 100 (see conftest)
    assert "Redid 250 tasks." in last.follow().text
    assert all(ztq.ping(i) == "queued" for i in redo)
    assert all(ztq.ping(i) == "error" for i in keep)
    entries = [e for e in audit_log(store) if e["action"] == "bulk redo"]
    assert sum(int(e["count"]) for e in entries) == 250
    assert "task~boom" in entries[0]["detail"]


@pytest.mark.slow
def test_bulk_delete_all_errors_and_purge_ready(operator: TestApp, store: Storage) -> None:
    errors = failed(store, 120)
    t.send.delay("x")
    scenario.work(store, "mail", fail=lambda p: "mail down")
    r = post(operator, "/bulk", {"action": "delete", "source": "errors", "queue": "default"})
    _, last = follow_bulk(operator, r)
    assert "Deleted 120 tasks." in last.follow().text
    assert all(ztq.ping(i) == "none" for i in errors)
    assert store.client.zcard(store.keys.errors("mail")) == 1
    ready = [t.add.delay(i, 5).id for i in range(150)]
    r = post(operator, "/bulk", {"action": "delete", "source": "ready", "queue": "default"})
    _, last = follow_bulk(operator, r)
    assert "Deleted 150 tasks." in last.follow().text
    assert all(ztq.ping(i) == "none" for i in ready)
    # redo everything everywhere: no queue given
    post(operator, "/bulk", {"action": "redo", "source": "errors"})
    assert store.client.zcard(store.keys.errors("mail")) == 0


def test_a_purge_of_ready_states_and_takes_the_keyed_tasks(
    operator: TestApp, store: Storage
) -> None:
    """Tasks with a key wait in their keys' lists (docs/queue-controls.md): the confirmation
    counts them and the purge deletes every one it counted."""
    from tests.key_tasks import Q, plain, send_mail

    ids = [send_mail.delay(f"acct{i % 7}", i).id for i in range(40)] + [plain.delay(1).id]
    confirm = operator.get(f"/bulk/confirm?action=delete&source=ready&queue={Q}")
    assert "41 tasks" in confirm.text
    r = post(operator, "/bulk", {"action": "delete", "source": "ready", "queue": Q})
    _, last = follow_bulk(operator, r)
    assert "Deleted 41 tasks." in last.follow().text
    assert all(ztq.ping(i) == "none" for i in ids)
    assert store.queues.pending_count(Q) == 0


def test_bulk_refuses_unknown_kinds_and_queues(operator: TestApp, store: Storage) -> None:
    r = post(operator, "/bulk", {"action": "delete", "source": "running"}).follow()
    assert "Unknown command" in r.text
    r = post(operator, "/bulk", {"action": "redo", "source": "errors", "queue": "nope"}).follow()
    assert "No queue named nope" in r.text


@pytest.mark.slow
def test_a_redo_that_fails_again_does_not_loop(operator: TestApp, store: Storage) -> None:
    ids = failed(store, 250)
    r = post(operator, "/bulk", {"action": "redo", "source": "errors", "queue": "default"})
    steps, ran = 1, []
    while "data-autosubmit" in r.text:
        # between two steps a worker runs what was redone and it fails again at once: the
        # errors set never shrinks, so only the count taken at the start ends the job
        ran += scenario.work(store, fail=lambda p: "again")
        assert len(ran) == 100 * steps
        assert store.client.zcard(store.keys.errors("default")) == 250
        r = r.forms["bulk"].submit()
        steps += 1
        assert steps <= 5, "the bulk redo chases the tasks that failed again"
    assert steps == 3 and r.status_int == 303  # 100 + 100 + 50: each task redone once
    assert "Redid 250 tasks." in r.follow().text
    ran += scenario.work(store, fail=lambda p: "again")
    assert sorted(ran) == sorted(ids)  # every task ran once more, none twice
    assert [store.tasks.record("default", i).get("redone") for i in ids] == [1] * 250
    entries = [e for e in audit_log(store) if e["action"] == "bulk redo"]
    assert sum(int(e["count"]) for e in entries) == 250


@pytest.mark.slow
def test_worker_commands(operator: TestApp, store: Storage) -> None:
    scenario.heartbeat(store, "w1", threads={"default": 2})
    for cmd in ("refresh", "pause", "resume", "stop"):
        r = post(operator, "/workers", {"worker": "w1", "cmd": cmd, "next": "/workers/w1"})
        assert r.location.endswith("/workers/w1")
    post(operator, "/workers", {"worker": "w1", "cmd": "set_threads", "queue": "mail",
                                "threads": "3"})  # fmt: skip
    post(operator, "/workers", {"worker": "w1", "cmd": "kill", "thread": "default-1",
                                "task_id": "abc"})  # fmt: skip
    cmds = take_commands(store, "w1")
    assert [c["cmd"] for c in cmds] == ["refresh", "pause", "resume", "stop", "set_threads", "kill"]
    assert cmds[4]["queue"] == "mail" and cmds[4]["threads"] == 3
    assert all(c["by"] == "ann" for c in cmds)
    actions = [e["action"] for e in audit_log(store)]
    assert actions[0] == "worker kill" and "worker pause" in actions


@pytest.mark.slow
def test_worker_commands_are_validated(operator: TestApp, store: Storage) -> None:
    scenario.heartbeat(store, "w1", editable=False)
    bad = [
        {"cmd": "set_threads", "queue": "mail", "threads": "300"},
        {"cmd": "set_threads", "queue": "bad name", "threads": "1"},
        {"cmd": "set_threads", "queue": "mail", "threads": "x"},
        {"cmd": "set_threads", "queue": "mail", "threads": "2"},  # not editable
        {"cmd": "kill", "thread": "", "task_id": "abc"},
        {"cmd": "explode"},
    ]
    for data in bad:
        r = post(operator, "/workers", {"worker": "w1", **data}).follow()
        assert r.html.select(".flash.error"), data
    assert take_commands(store, "w1") == []
    r = post(operator, "/workers", {"worker": "ghost", "cmd": "pause"}, expect_errors=True)
    assert r.status_int == 404


@pytest.mark.slow
def test_forget_a_lost_worker(operator: TestApp, store: Storage) -> None:
    scenario.heartbeat(store, "gone")
    scenario.make_lost(store, "gone")
    assert "state-lost" in operator.get("/workers").text
    post(operator, "/workers", {"worker": "gone", "cmd": "forget"})
    assert "gone" not in operator.get("/api/workers").text
    assert operator.get("/workers/gone", expect_errors=True).status_int == 404


@pytest.mark.slow
def test_run_a_cron_entry_now(operator: TestApp, store: Storage) -> None:
    scenario.cron(store, "every-5", task="tests.sample_tasks.add", args=[2, 3])
    r = post(operator, "/cron/run", {"name": "every-5"}).follow()
    assert "Enqueued every-5 now" in r.text
    [lease] = store.leases.fetch("default", "w", "t", 60_000, 5)
    assert decode_payload(lease.payload)["args"] == [2, 3]
    assert "run cron now" in [e["action"] for e in audit_log(store)]
    r = post(operator, "/cron/run", {"name": "nope"}).follow()
    assert "No cron entry named nope" in r.text


@pytest.mark.slow
def test_disable_and_enable_a_cron_entry(operator: TestApp, store: Storage) -> None:
    scenario.cron(store, "every-5", task="tests.sample_tasks.add", args=[2, 3])
    r = post(operator, "/cron/toggle", {"name": "every-5", "enable": "0"}).follow()
    assert "Cron entry every-5 disabled" in r.text and "disabled</span>" in r.text
    assert disabled_cron(store) == {"every-5"}
    assert "disable cron" in [e["action"] for e in audit_log(store)]
    r = post(operator, "/cron/toggle", {"name": "every-5", "enable": "1"}).follow()
    assert "Cron entry every-5 enabled" in r.text and disabled_cron(store) == set()
    r = post(operator, "/cron/toggle", {"name": "nope", "enable": "0"}).follow()
    assert "No cron entry named nope" in r.text and disabled_cron(store) == set()


@pytest.mark.slow
def test_the_audit_page_lists_who_did_what(operator: TestApp, store: Storage) -> None:
    [task_id] = failed(store, 1)
    post(operator, "/tasks", {"action": "delete", "task": f"default:{task_id}"})
    html = operator.get("/audit").text
    assert "ann" in html and "delete" in html and task_id in html
    assert task_id in operator.get(f"/audit?q={task_id}").text
    assert task_id not in operator.get("/audit?user=vic").text
