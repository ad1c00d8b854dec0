"""Alerts on a real redis-server: every rule kind fires and resolves, messages reach a real
HTTP receiver exactly once per transition (across rounds, restarts and evaluators), and a
webhook that is down or slow costs a bounded time and is recorded."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from tests.alert_receiver import Receiver, closed_url
from tests.console import scenario
from ztq.core.alerts.alerter import (
    Alerter,
    AlertSettings,
    current,
    delivery_problem,
    firing_count,
    history,
)
from ztq.core.alerts.rules import parse_rules
from ztq.core.engine.storage import Storage


@pytest.fixture
def store(redis_url: str) -> Iterator[Storage]:
    yield ztq.get_storage()


def alerter(storage: Storage, rules: str, **cfg: object) -> Alerter:
    return Alerter(storage, AlertSettings(parse_rules(rules), **cfg))  # type: ignore[arg-type]


def states(storage: Storage) -> dict[tuple[str, str], str]:
    return {(a.rule, a.subject): a.status for a in current(storage)}


def events(storage: Storage) -> list[tuple[str, str, str]]:
    """(kind, rule, subject) of the history, oldest first."""
    rows = history(storage, limit=500).rows
    return [(e["kind"], e["rule"], e["subject"]) for e in reversed(rows)]


# -- each rule kind fires and resolves ---------------------------------------------------------
def test_error_rate_counts_failed_runs_in_the_window(store: Storage) -> None:
    for n in range(3):
        t.add.enqueue((n, n))
    scenario.work(store, "default", fail=lambda p: "refused")
    a = alerter(store, "error_rate default > 2 in 5m; error_rate * > 3 in 5m; "
                       "error_rate * > 2 in 60m")  # fmt: skip
    now = time.time()
    r = a.evaluate(now)
    assert [(x.rule, x.subject, x.value, x.threshold) for x in r.firing] == [
        ("error_rate * > 2 in 60m", "default", 3, 2),
        ("error_rate default > 2 in 5m", "default", 3, 2),
    ]
    assert r.firing[1].text == "queue default: 3 failed runs in the last 5 min (more than 2)"
    assert firing_count(store) == 2
    r = a.evaluate(now + 6 * 60)  # the failures left the 5 minutes, not the hour
    assert [x.rule for x in r.firing] == ["error_rate * > 2 in 60m"]
    assert events(store)[-1] == ("resolved", "error_rate default > 2 in 5m", "default")
    assert a.evaluate(now + 61 * 60).firing == [] and states(store) == {}


def test_error_rate_as_a_ratio_of_finished_runs(store: Storage) -> None:
    a = alerter(store, "error_rate * > 20% in 10m")
    assert a.evaluate().firing == []  # nothing finished: no ratio
    for n in range(4):
        t.add.enqueue((n, 0))
    scenario.work(store, "default", fail=lambda p: "bad" if p["args"][0] == 0 else None)
    [alert] = a.evaluate().firing
    assert (alert.subject, alert.value, alert.threshold) == ("default", 25.0, 20.0)
    assert alert.text == "queue default: 25% of 4 runs failed in the last 10 min (more than 20%)"
    assert alerter(store, "error_rate * > 25% in 10m").evaluate().firing == []


def test_oldest_wait_fires_until_the_task_is_taken(store: Storage) -> None:
    t.add.enqueue((1, 1))
    a = alerter(store, "oldest_wait * > 300s")
    assert a.evaluate().firing == []
    [alert] = a.evaluate(time.time() + 301).firing
    assert alert.subject == "default" and alert.value > 300 and alert.threshold == 300
    assert alert.text.startswith("queue default: the oldest ready task has waited 5 min")
    scenario.work(store, "default")
    assert a.evaluate(time.time() + 302).firing == []
    assert [e[0] for e in events(store)] == ["firing", "resolved"]


def test_no_worker_fires_for_waiting_tasks_nobody_serves(store: Storage) -> None:
    a = alerter(store, "no_worker *")
    scenario.heartbeat(store, "w1", threads={"default": 1})
    t.send.enqueue(("ann@example.org",))
    t.add.enqueue((1, 2), delay=60)
    [alert] = a.evaluate().firing
    assert (alert.subject, alert.value) == ("mail", 1)
    assert alert.text == "queue mail: 1 task waits and no live worker serves it"
    store.queues.pause("mail")  # paused: nobody is expected to serve it
    assert a.evaluate().firing == []
    store.queues.resume("mail")
    assert len(a.evaluate().firing) == 1
    scenario.heartbeat(store, "w2", threads={"mail": 2})
    assert a.evaluate().firing == []
    scenario.make_lost(store, "w2")  # a lost worker serves nothing
    assert [x.subject for x in a.evaluate().firing] == ["mail"]
    scenario.heartbeat(store, "w2", threads={"mail": 2}, status="stopped")
    assert [x.subject for x in a.evaluate().firing] == ["mail"]


def test_worker_lost_fires_per_worker_and_resolves_when_it_reports(store: Storage) -> None:
    scenario.heartbeat(store, "box-1")
    scenario.heartbeat(store, "box-2")
    scenario.heartbeat(store, "other")
    a = alerter(store, "worker_lost box-*", lost_after=30.0)
    assert a.evaluate().firing == []
    scenario.make_lost(store, "box-2", 95)
    scenario.make_lost(store, "other", 95)
    [alert] = a.evaluate().firing
    assert (alert.subject, alert.threshold) == ("box-2", 30.0) and 94 < alert.value < 120
    assert alert.text.startswith("worker box-2 is lost: no heartbeat for")
    scenario.heartbeat(store, "box-2")
    assert a.evaluate().firing == []
    scenario.make_lost(store, "box-1", 95)
    scenario.heartbeat(store, "box-1", status="stopped")  # stopped on purpose, not lost
    scenario.make_lost(store, "box-1", 95)
    assert a.evaluate().firing == []


def test_for_holds_an_alert_back_as_pending(store: Storage) -> None:
    t.add.enqueue((1, 1))
    a = alerter(store, "no_worker * for 1m")
    now = time.time()
    r = a.evaluate(now)
    assert r.firing == [] and states(store) == {("no_worker * for 1m", "default"): "pending"}
    assert a.evaluate(now + 59).firing == []
    assert len(a.evaluate(now + 60).firing) == 1
    assert events(store) == [("firing", "no_worker * for 1m", "default")]
    scenario.work(store, "default")
    assert a.evaluate(now + 61).firing == [] and states(store) == {}


def test_a_pending_alert_that_clears_leaves_no_trace(store: Storage) -> None:
    t.add.enqueue((1, 1))
    a = alerter(store, "no_worker * for 1m")
    a.evaluate()
    scenario.work(store, "default")
    a.evaluate()
    assert states(store) == {} and events(store) == []


# -- messages ----------------------------------------------------------------------------------
def test_one_firing_and_one_resolved_message_however_many_rounds(store: Storage) -> None:
    with Receiver() as hook:
        a = alerter(store, "no_worker *", webhook=hook.url)
        assert a.evaluate().sent == []  # nothing wrong
        t.add.enqueue((1, 1))
        r = a.evaluate()
        assert [w for w, _ in r.sent] == ["firing"]
        body = hook.next()
        assert body == {
            "text": body["text"],
            "rule": "no_worker *",
            "kind": "no_worker",
            "subject": "default",
            "status": "firing",
            "reminder": False,
            "value": 1,
            "threshold": 0,
            "since": body["since"],
            "since_ms": r.firing[0].since,
        }
        assert body["text"].startswith("[FIRING] no_worker *: queue default: 1 task waits and")
        for _ in range(3):
            assert a.evaluate().sent == []
        # a console restart: a new evaluator on the same Redis
        assert alerter(store, "no_worker *", webhook=hook.url).evaluate().sent == []
        scenario.work(store, "default")
        r = a.evaluate()
        assert [w for w, _ in r.sent] == ["resolved"]
        body = hook.next()
        assert (body["status"], body["subject"]) == ("resolved", "default")
        assert body["text"].startswith("[RESOLVED] no_worker *: queue default:")
        for _ in range(3):
            assert a.evaluate().sent == []
        assert hook.drain() == [] and states(store) == {}
    kinds = [e[0] for e in events(store)]
    assert kinds == ["firing", "sent", "resolved", "sent"]
    assert firing_count(store) == 0


def test_reminders_every_repeat_minutes(store: Storage) -> None:
    t.add.enqueue((1, 1))
    with Receiver() as hook:
        a = alerter(store, "no_worker *", webhook=hook.url, repeat_minutes=1.0)
        now = time.time()
        assert [w for w, _ in a.evaluate(now).sent] == ["firing"]
        assert a.evaluate(now + 59).sent == []
        assert [w for w, _ in a.evaluate(now + 60).sent] == ["reminder"]
        reminder = [hook.next(), hook.next()][1]
        assert reminder["reminder"] is True and reminder["status"] == "firing"
        assert reminder["text"].startswith("[STILL FIRING] no_worker *")
        assert a.evaluate(now + 90).sent == []
        assert [w for w, _ in a.evaluate(now + 121).sent] == ["reminder"]


@pytest.mark.slow
def test_two_evaluators_racing_send_each_message_once(store: Storage) -> None:
    """No lock here: the script's reservations alone keep the evaluators from sending twice."""
    t.add.enqueue((1, 1))
    with Receiver(hold=0.5) as hook:  # a slowish webhook, so that the rounds overlap
        first = alerter(store, "no_worker *", webhook=hook.url)
        second = alerter(store, "no_worker *", webhook=hook.url)
        start = threading.Barrier(4)

        def rounds(a: Alerter) -> None:
            start.wait()
            for _ in range(3):
                a.evaluate()

        threads = [threading.Thread(target=rounds, args=(a,)) for a in (first, second) * 2]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert [b["status"] for b in hook.drain()] == ["firing"]
        scenario.work(store, "default")
        threads = [threading.Thread(target=rounds, args=(a,)) for a in (first, second) * 2]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert [b["status"] for b in hook.drain()] == ["resolved"]


def test_the_round_lock_lets_one_evaluator_work(store: Storage) -> None:
    first = alerter(store, "no_worker *", every=30.0)
    second = alerter(store, "no_worker *", every=30.0)
    assert first.step() is not None
    assert second.step() is None and first.step() is None  # until the lock runs out
    fast = alerter(store, "no_worker *", every=0.1)
    store.client.delete(store.keys.alerts_lock)
    assert fast.step() is not None
    assert 0 < store.client.pttl(store.keys.alerts_lock) <= 90


# -- a webhook that is down or slow ------------------------------------------------------------
@pytest.mark.slow
def test_a_webhook_that_is_down_is_recorded_and_tried_again_next_round(
    store: Storage, caplog: pytest.LogCaptureFixture
) -> None:
    t.add.enqueue((1, 1))
    t.send.enqueue(("ann@example.org",))
    url = closed_url()
    a = alerter(store, "no_worker *", webhook=url, attempts=2, timeout=1.0)
    started = time.monotonic()
    r = a.evaluate()
    assert time.monotonic() - started < 5
    # the first message failed; the second was not tried this round (the webhook is down)
    assert [(w, x.subject) for w, x, _ in r.failed] == [("firing", "default")]
    assert "ConnectionRefusedError" in r.failed[0][2] and "after 2 attempts" in r.failed[0][2]
    assert "failed for firing" in caplog.text and url not in caplog.text
    problem = delivery_problem(current(store))
    assert problem is not None and problem.subject == "default"
    assert problem.error.startswith("firing: ConnectionRefusedError")
    assert all(x.notified == 0 for x in current(store))
    # a webhook that stays down: tried every round, in the history every 10 minutes
    now = time.time()
    for later in (1, 2, 599, 601):
        a.evaluate(now + later)
    assert [e[0] for e in events(store)] == ["firing", "firing", "failed", "failed"]
    assert delivery_problem(current(store)).failed == int((now + 601) * 1000)  # type: ignore[union-attr]

    with Receiver() as hook:  # the webhook is back: both are announced, once
        a = alerter(store, "no_worker *", webhook=hook.url)
        assert sorted(x.subject for _, x in a.evaluate().sent) == ["default", "mail"]
        assert a.evaluate().sent == []
        assert sorted(b["subject"] for b in hook.drain()) == ["default", "mail"]
    assert delivery_problem(current(store)) is None


def test_an_alert_that_clears_before_its_message_got_through_sends_nothing(
    store: Storage,
) -> None:
    t.add.enqueue((1, 1))
    a = alerter(store, "no_worker *", webhook=closed_url(), attempts=1)
    assert len(a.evaluate().failed) == 1
    scenario.work(store, "default")
    with Receiver() as hook:
        a = alerter(store, "no_worker *", webhook=hook.url)
        assert a.evaluate().sent == [] and states(store) == {}
        assert hook.drain() == []


@pytest.mark.slow
def test_server_errors_are_retried_client_errors_are_not(store: Storage) -> None:
    t.add.enqueue((1, 1))
    with Receiver(status=503) as hook:
        r = alerter(store, "no_worker *", webhook=hook.url, attempts=3).evaluate()
        assert r.failed[0][2] == "HTTP 503 (after 3 attempts)"
        assert len(hook.drain()) == 3
    with Receiver(status=404) as hook:
        r = alerter(store, "no_worker *", webhook=hook.url, attempts=3).evaluate()
        assert r.failed[0][2] == "HTTP 404"
        assert len(hook.drain()) == 1


@pytest.mark.slow
def test_a_slow_webhook_costs_a_bounded_time(store: Storage) -> None:
    t.add.enqueue((1, 1))
    with Receiver(hold=30) as hook:
        a = alerter(store, "no_worker *", webhook=hook.url, attempts=2, timeout=0.3)
        started = time.monotonic()
        r = a.evaluate()
        took = time.monotonic() - started
        assert took < 2 * 0.3 + 0.5 + 1.0, took
        assert [w for w, _, _ in r.failed] == ["firing"]
        assert "timed out" in r.failed[0][2]
