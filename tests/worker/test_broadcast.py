"""Broadcasts and subscribed tasks with in-process workers on a real redis-server: who runs
a broadcast, what the handle says, what a paused, stopped or dead worker does."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import ztq.core as ztq
from tests import channel_tasks as t
from tests.worker.conftest import FAST, wait_for
from ztq.core.messaging.broadcast import listen_op
from ztq.worker.channels import keep_reading
from ztq.worker.worker import Worker

IMPORTS = ("tests.channel_tasks",)


def web_worker(start_worker: Callable[..., Worker], name: str, **options: object) -> Worker:
    """A worker serving queue web, once it reads the queue's broadcasts."""
    w = start_worker({"web": 1}, name=name, imports=IMPORTS, **options)
    # readers appear with the first beat: an empty set is not "every reader joined"
    readers = w.channels.readers
    wait_for(lambda: readers and all("web" in r.positions for r in readers.values()))
    return w


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_each_live_worker_runs_a_broadcast_once_and_the_handle_says_how(
    start_worker: Callable[..., Worker], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    web_worker(start_worker, "a")
    web_worker(start_worker, "b")
    start_worker({"other": 1}, name="elsewhere", imports=IMPORTS)  # does not serve web
    h = t.note.broadcast(str(out), "hi")
    assert h.targets == ("a", "b") and h.task == "tests.channel_tasks.note"
    runs = h.wait(timeout=60)
    assert [(r.worker, r.state, r.expected) for r in runs] == [("a", "done", True),
                                                              ("b", "done", True)]  # fmt: skip
    assert all(r.result == {"pid": r.result["pid"], "text": "hi"} for r in runs)
    assert all(r.started is not None and r.ended is not None and r.ended >= r.started for r in runs)
    assert len(lines(out)) == 2
    again = ztq.broadcast_handle("web", h.id)
    assert again.targets == h.targets and again.runs() == runs

    bad = t.refuse.broadcast("no config here")
    assert [(r.state, r.error) for r in bad.wait(timeout=60)] == [
        ("failed", "RuntimeError: no config here")
    ] * 2
    # a worker joining now does not run the old ones; a new one it does
    web_worker(start_worker, "c")
    later = t.note.broadcast(str(out), "later")
    assert [r.worker for r in later.wait(timeout=60)] == ["a", "b", "c"]
    assert [r.worker for r in h.runs()] == ["a", "b"]
    assert sorted(x.split()[1] for x in lines(out)) == ["hi", "hi", "later", "later", "later"]


def test_a_worker_asked_to_catch_up_runs_what_was_sent_before_it_started(
    start_worker: Callable[..., Worker], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    web_worker(start_worker, "first")
    old = t.note.broadcast(str(out), "old")
    old.wait(timeout=60)
    monkeypatch.setattr(ztq.default_app(), "broadcast_catch_up", 60.0)
    web_worker(start_worker, "catcher")
    wait_for(lambda: [r.worker for r in old.runs() if r.state == "done"] == ["catcher", "first"])
    assert not old.runs()[0].expected  # it was not live when the broadcast went out


@pytest.mark.slow
def test_the_worker_setting_broadcast_catch_up_asks_it_of_a_worker(
    start_worker: Callable[..., Worker], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same from the worker's settings (flag --broadcast-catch-up, ZTQ_BROADCAST_CATCH_UP,
    ini), the app saying nothing: a deploy can ask it without touching code."""
    from ztq.worker.config import load_config

    monkeypatch.setenv("ZTQ_BROADCAST_CATCH_UP", "60")
    assert load_config(None).broadcast_catch_up == 60.0
    out = tmp_path / "out"
    web_worker(start_worker, "first")
    old = t.note.broadcast(str(out), "old")
    old.wait(timeout=60)
    web_worker(start_worker, "plain")  # neither it nor its app asks: it does not run it
    web_worker(start_worker, "catcher", broadcast_catch_up=60.0)
    wait_for(lambda: [r.worker for r in old.runs() if r.state == "done"] == ["catcher", "first"])
    assert sorted(x.split()[1] for x in lines(out)) == ["old", "old"]


def test_a_broadcast_run_goes_through_the_apps_run_hooks(
    start_worker: Callable[..., Worker], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Logs and tracing see broadcast runs as they see task runs (before_run, after_run)."""
    from ztq.core.middleware.base import Middleware, Outcome, Run

    seen: list[tuple[str, str, str]] = []

    class Spy(Middleware):
        def before_run(self, run: Run) -> None:
            seen.append(("before", run.task, run.queue))

        def after_run(self, run: Run, outcome: Outcome) -> None:
            seen.append(("after", run.task, "ok" if outcome.ok else outcome.error_type))

    spy = Spy()
    ztq.default_app().middleware.add(spy)
    try:
        caplog.set_level("DEBUG", logger="ztq.runs")  # the start line is DEBUG
        web_worker(start_worker, "hooked")
        h = t.note.broadcast(str(tmp_path / "out"), "hi")
        h.wait(timeout=60)
        assert seen == [("before", t.note.name, "web"), ("after", t.note.name, "ok")]
        assert f"task start id={h.id} task={t.note.name} queue=web" in caplog.text
    finally:
        ztq.default_app().middleware.remove(spy)


@pytest.mark.slow
def test_a_paused_worker_holds_broadcasts_until_it_resumes(
    start_worker: Callable[..., Worker], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    busy = web_worker(start_worker, "busy")
    web_worker(start_worker, "free")
    busy.handle_command({"cmd": "pause"})
    h = t.note.broadcast(str(out), "x")
    with pytest.raises(ztq.ResultTimeout, match="busy pending"):
        h.wait(timeout=0.5)  # still a target: its presence is renewed while paused
    assert {r.worker: r.state for r in h.runs()} == {"busy": "pending", "free": "done"}
    busy.handle_command({"cmd": "resume"})
    assert [r.state for r in h.wait(timeout=60)] == ["done", "done"]


@pytest.mark.slow
def test_a_paused_queue_holds_its_broadcasts(
    start_worker: Callable[..., Worker], tmp_path: Path
) -> None:
    web_worker(start_worker, "w")
    ztq.get_storage().queues.pause("web")
    h = t.note.broadcast(str(tmp_path / "out"), "x")
    with pytest.raises(ztq.ResultTimeout):
        h.wait(timeout=0.5)
    ztq.get_storage().queues.resume("web")
    assert [r.state for r in h.wait(timeout=60)] == ["done"]


@pytest.mark.slow
def test_a_stopped_worker_leaves_and_a_dead_one_is_reported_lost(
    start_worker: Callable[..., Worker], tmp_path: Path
) -> None:
    storage = ztq.get_storage()
    leaving = web_worker(start_worker, "leaving")
    web_worker(start_worker, "staying")
    leaving.request_stop()
    wait_for(lambda: storage.client.zscore(storage.keys.listeners("web"), "leaving") is None)
    assert t.note.broadcast(str(tmp_path / "out"), "x").targets == ("staying",)

    # a listener that stops beating (killed -9): counted on until its presence runs out
    storage.call(*listen_op(storage, "web", "join", "ghost", 300))
    h = t.note.broadcast(str(tmp_path / "out"), "y")
    assert h.targets == ("ghost", "staying")
    started = time.monotonic()
    runs = h.wait(timeout=60)  # wakes up when the ghost's presence ends, not later
    assert {r.worker: r.state for r in runs} == {"ghost": "lost", "staying": "done"}
    assert time.monotonic() - started < 2.0


def test_a_listener_that_restarted_will_not_run_what_it_missed(
    start_worker: Callable[..., Worker], tmp_path: Path
) -> None:
    storage = ztq.get_storage()
    storage.call(*listen_op(storage, "web", "join", "box", 60_000))
    h = t.note.broadcast(str(tmp_path / "out"), "x")
    assert [r.state for r in h.runs()] == ["pending"]
    storage.call(*listen_op(storage, "web", "join", "box", 60_000))  # started again
    assert [r.state for r in h.wait(timeout=1)] == ["lost"]


def test_a_broadcast_to_nobody_has_no_runs(redis_url: str) -> None:
    h = t.note.broadcast("/nonexistent", "x")
    assert h.targets == () and h.wait(timeout=1) == []
    with pytest.raises(ztq.NotFound):
        ztq.broadcast_handle("web", "f" * 32)


def test_a_subscribed_task_runs_once_per_message(
    start_worker: Callable[..., Worker], tmp_path: Path
) -> None:
    out = tmp_path / "orders.jsonl"
    w1 = start_worker({"audit": 1}, name="au-1", imports=IMPORTS)
    start_worker({"audit": 1}, name="au-2", imports=IMPORTS)  # the same subscriber: shared
    orders = ztq.channel("test-orders")
    wait_for(lambda: [s.consumers for s in orders.info().subscribers] == [2])
    for i in range(20):
        assert orders.publish({"order": i, "out": str(out)})
    wait_for(lambda: len(lines(out)) == 20)
    assert sorted(json.loads(x)["order"] for x in lines(out)) == list(range(20))
    # the last line is written before its run ends and the message is acknowledged
    wait_for(lambda: [s.lag for s in orders.info().subscribers] == [0])
    [sub] = orders.info().subscribers
    assert (sub.name, sub.lag) == ("tests.channel_tasks.record", 0)
    wait_for(lambda: orders.info().held == 0)
    # the runs are ordinary tasks of queue audit, with ids made from the messages
    assert w1.storage.client.hlen(w1.storage.keys.tasks("audit")) == 20


def test_a_worker_that_begins_to_serve_a_queue_reads_its_subscriptions(
    start_worker: Callable[..., Worker], tmp_path: Path
) -> None:
    """set-threads (or the autoscaler) adds queue audit: its subscribed task's channel is
    read from the next heartbeat on, without a restart."""
    out = tmp_path / "orders.jsonl"
    w = start_worker({"default": 1}, name="late-1", imports=IMPORTS)
    orders = ztq.channel("test-orders")
    assert orders.publish({"order": 0, "out": str(out)}) is None  # nobody subscribes yet
    w.set_threads("audit", 1)
    wait_for(lambda: [s.consumers for s in orders.info().subscribers] == [1])
    assert orders.publish({"order": 1, "out": str(out)})
    wait_for(lambda: len(lines(out)) == 1)
    assert json.loads(lines(out)[0])["order"] == 1
    w.set_threads("audit", 0)  # the reader keeps reading; its runs wait for a worker of audit
    assert len(w.channels.subscriptions) == 1


@pytest.mark.slow
def test_a_subscription_into_a_full_queue_waits_and_loses_no_message(
    start_worker: Callable[..., Worker], tmp_path: Path
) -> None:
    """The task's queue refuses (max_pending, raise): the reader leaves the batch
    unacknowledged and takes it over again later; every message runs once."""
    out = tmp_path / "orders.jsonl"
    storage = ztq.get_storage()
    storage.queues.register_queue("audit")
    ztq.configure_queue("audit", max_pending=2)
    w = start_worker({"audit": 1}, name="full-1", imports=IMPORTS)
    orders = ztq.channel("test-orders")
    wait_for(lambda: [s.consumers for s in orders.info().subscribers] == [1])
    w.set_threads("audit", 0)  # it reads on, and nobody runs the tasks
    # retired once its thread ended: until then it may be the queue's waiter, take a task
    # handed to it and give it back (a task accepted before: never refused by the limit)
    wait_for(lambda: not any(ex.is_alive() for ex in w.executors if "audit" in ex.spec.queues))
    for i in range(5):
        assert orders.publish({"order": i, "out": str(out)})
    wait_for(lambda: int(storage.client.hget(storage.keys.totals("audit"), "refused") or 0))
    assert storage.queues.pending_count("audit") == 2  # what fitted; the rest waits in the channel
    w.set_threads("audit", 1)  # a worker of audit drains it: the rest get in
    wait_for(lambda: len(lines(out)) == 5, timeout=30)
    assert sorted(json.loads(x)["order"] for x in lines(out)) == list(range(5))
    wait_for(lambda: orders.info().held == 0, timeout=30)


@pytest.mark.cluster
def test_on_a_cluster_one_reader_per_queue_runs_each_queues_broadcasts(
    redis_cluster: Any, tmp_path: Path
) -> None:
    """Queues in different slots: one XREAD cannot span them, so a reader each."""
    from ztq.core.messaging.broadcast import send_broadcast
    from ztq.worker.config import ThreadSpec, WorkerConfig

    redis_cluster.flush()
    storage = ztq.connect(redis_cluster.url)
    queues = ("alpha", "bravo")
    assert len({storage.client.keyslot(storage.keys.broadcasts(q)) for q in queues}) == 2
    cfg = WorkerConfig(redis_url="redis+cluster://unused", name="c-1", imports=IMPORTS,
                       threads=(ThreadSpec("both", queues),),
                       **{**FAST, "heartbeat": 0.3, "lease": 2.0})  # fmt: skip
    worker = Worker(cfg, storage)
    th = threading.Thread(target=worker.run, daemon=True)
    th.start()
    try:
        wait_for(lambda: sorted(q for r in worker.channels.readers.values() for q in r.positions)
                 == list(queues))  # fmt: skip
        assert sorted(worker.channels.readers) == list(queues)
        out = tmp_path / "out"
        sent = [send_broadcast(t.note.prepare((str(out), q), queue=q)) for q in queues]
        for h in sent:
            assert [(r.worker, r.state) for r in h.wait(timeout=60)] == [("c-1", "done")]
        assert sorted(x.split()[1] for x in lines(out)) == ["alpha", "bravo"]
    finally:
        worker.request_stop()
        th.join(20)
        ztq.disconnect_all()


def test_a_reader_ends_quietly_on_an_error_after_the_stop_and_not_before() -> None:
    """A stopped worker does not wait for a reader still waiting in Redis; an embedded
    worker's app may then close the connections under that read, and redis-py fails with
    errors of its own (a TypeError for a socket closed under it): the reader ends without a
    traceback. Before the stop, such an error is a bug and is raised."""
    stopping = threading.Event()

    def closed_under_it(block: float | None) -> int:
        stopping.set()
        raise TypeError("argument must be an int, or have a fileno() method.")

    keep_reading(closed_under_it, stopping, "broadcasts")  # returns, raises nothing
    stopping.clear()

    def broken(block: float | None) -> int:
        raise TypeError("a bug")

    with pytest.raises(TypeError, match="a bug"):
        keep_reading(broken, stopping, "broadcasts")
