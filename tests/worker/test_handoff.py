"""Enqueue to start in one round trip: an idle executor that watches one queue registers as
its waiter with the fetch that found it empty, and an enqueue leases the next task straight
to it (docs/design.md). The moves themselves: the state-machine test (invariant 10)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from tests.worker.conftest import wait_for
from ztq.worker.worker import Worker

ROOT = Path(__file__).resolve().parents[2]


def waiter(queue: str = "default", fresh: bool = False) -> str | None:
    """The worker registered as the queue's waiter; with ``fresh``, only while its
    registration has more than half a second left (it renews it every ``idle_wait``)."""
    storage = ztq.get_storage()
    raw = storage.client.get(storage.keys.waiter(queue))
    if raw is None:
        return None
    worker, _, _, until = str(raw).split("\t")
    seconds, micros = storage.client.time()
    if fresh and int(until) - (seconds * 1000 + micros // 1000) < 500:
        return None
    return worker


@pytest.mark.slow
def test_an_idle_executor_gets_the_task_leased_by_the_enqueue(
    start_worker: Callable[..., Worker],
) -> None:
    w = start_worker({"default": 1}, name="idle-1", idle_wait=1.0)
    wait_for(lambda: waiter(fresh=True) == "idle-1")  # its empty fetch registered it
    storage = ztq.get_storage()
    h = t.sleepy.delay(0.5, "")
    rec = storage.tasks.record("default", h.id)  # right after the enqueue returned
    assert rec is not None and str(rec.state) == "running" and rec.get("worker") == "idle-1"
    assert storage.client.llen(storage.keys.ready("default", "normal")) == 0  # never queued
    assert h.get(timeout=10) == "slept"
    wait_for(lambda: waiter() == "idle-1")  # idle again: registered again
    assert w.executors[0].is_alive()


def test_a_second_idle_executor_waits_on_the_wake_list(
    start_worker: Callable[..., Worker],
) -> None:
    start_worker({"default": 2}, name="two-1", idle_wait=1.0)
    wait_for(lambda: waiter() == "two-1")
    handles = [t.add.delay(n, 1) for n in range(20)]  # one is handed, the rest woken for
    assert [h.get(timeout=10) for h in handles] == [n + 1 for n in range(20)]


@pytest.mark.slow
def test_a_task_handed_to_an_executor_that_stops_goes_back(
    start_worker: Callable[..., Worker],
) -> None:
    """A worker paused while a task was handed to its idle thread gives the task back."""
    w = start_worker({"default": 1, "other": 1}, name="retire-1", idle_wait=1.0)
    wait_for(lambda: waiter(fresh=True) == "retire-1")
    [ex] = [e for e in w.executors if e.spec.queues == ("default",)]
    storage = ztq.get_storage()
    w.paused.set()  # it takes nothing new: a task handed now is given back at once
    h = t.add.delay(2, 3)
    wait_for(lambda: storage.tasks.record("default", h.id).state.value == "queued")
    assert storage.client.llen(storage.keys.hand("default")) == 0
    w.paused.clear()
    assert h.get(timeout=10) == 5 and ex.is_alive()


def test_a_stopping_worker_does_not_wait_out_its_idle_threads_blocked_reads(
    start_worker: Callable[..., Worker],
) -> None:
    w = start_worker({"default": 1, "mail": 1}, name="quick-stop", idle_wait=60.0)
    wait_for(lambda: waiter() == "quick-stop")  # blocked in its read for 8 s (MAX_BLOCK)
    w.request_stop()  # each read is woken: the stop does not wait for one to time out
    wait_for(lambda: not any(ex.is_alive() for ex in w.executors), timeout=6)


def test_a_stopping_worker_wakes_every_idle_thread_of_a_queue(
    start_worker: Callable[..., Worker], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four threads blocked on one queue's wake list: one token woke one of them, and the
    other three waited out their read (an idle 4-thread worker took 5 s to stop)."""
    storage = ztq.get_storage()
    reading: set[str] = set()  # the threads blocked in a read now
    timed_out: list[str] = []

    def watched(method: Callable[..., Any]) -> Callable[..., Any]:
        def read(*args: Any, **kwargs: Any) -> Any:
            me = threading.current_thread().name
            reading.add(me)
            try:
                got = method(*args, **kwargs)
            finally:
                reading.discard(me)
            if got is False:  # the read ran out its time: nothing woke it
                timed_out.append(me)
            return got

        return read

    for name in ("wait", "wait_handed"):
        monkeypatch.setattr(storage.waits, name, watched(getattr(storage.waits, name)))
    w = start_worker({"default": 4}, name="four-stop", idle_wait=60.0)
    # the four blocked in their read (8 s: MAX_BLOCK), the scheduler in its own
    wait_for(lambda: {f"ztq-default-{i}" for i in range(4)} <= reading)
    timed_out.clear()
    w.request_stop()
    wait_for(lambda: not any(ex.is_alive() for ex in w.executors), timeout=30)
    assert not timed_out, f"the stop waited for these reads to time out: {timed_out}"


@pytest.fixture
def idle_process(redis_url: str, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    log = open(tmp_path / "idle.log", "ab")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [sys.executable, "-m", "ztq.worker", "--redis", redis_url, "--name", "doomed",
         "--import", "tests.sample_tasks", "--queue", "default:1", "--lease", "1.5",
         "--heartbeat", "0.3"],
        cwd=ROOT, stdout=log, stderr=log)  # fmt: skip
    yield proc
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    log.close()


@pytest.mark.slow
def test_a_task_handed_to_a_dead_executor_runs_once_elsewhere_after_its_lease(
    idle_process: subprocess.Popen[bytes], start_worker: Callable[..., Worker], tmp_path: Path
) -> None:
    wait_for(lambda: waiter() == "doomed", timeout=20)
    os.kill(idle_process.pid, signal.SIGKILL)  # its registration outlives it
    idle_process.wait(10)
    marker = tmp_path / "ran"
    h = t.record.delay(str(marker), "once")
    storage = ztq.get_storage()
    assert storage.tasks.record("default", h.id).get("worker") == "doomed"  # handed to the dead
    start_worker({"default": 1}, name="rescuer", lease=1.5)  # its reaper watches default
    started = time.monotonic()
    wait_for(lambda: marker.exists(), timeout=20)
    print(f"\nhanded to a dead executor: ran elsewhere after {time.monotonic() - started:.2f}s")
    wait_for(lambda: storage.tasks.record("default", h.id) is None or h.state.value == "done")
    assert marker.read_text() == "once\n"
    assert storage.client.llen(storage.keys.hand("default")) == 0  # the reaper dropped it
