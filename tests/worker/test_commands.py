"""Console commands reaching a worker through Redis, and process slots."""

from __future__ import annotations

import os
import threading
import time

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from tests.worker.conftest import wait_for
from ztq.core.engine.workers import get_worker, send_command, take_commands
from ztq.worker.config import ScaleSpec, ThreadSpec
from ztq.worker.executors.threads import Executor


def running_on(worker, task_id: str) -> bool:
    """The task is past its fetch and running on one of the worker's executors."""
    return any(ex.current and ex.current.lease.id == task_id for ex in worker.executors)


def command_events(storage) -> list[str]:
    """Messages of the ``command`` entries of the worker event log, oldest first."""
    entries = storage.client.xrange(storage.keys.events)
    return [e[1]["message"] for e in entries if e[1]["kind"] == "command"]


def live_executors(worker) -> int:
    return sum(1 for ex in worker.executors if ex.is_alive() and not ex.retired.is_set())


def gone(pid: int) -> bool:
    """The process has exited (and was reaped, or is a zombie waiting for it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split()[2] == "Z"


class StepCounter:
    """Counts the loop steps of an executor (each decides afresh whether to fetch)."""

    def __init__(self, executor) -> None:
        self.started = 0
        self.finished: list[int] = []
        original = executor.step

        def step() -> int:
            n = self.started
            self.started += 1
            try:
                return original()
            finally:
                self.finished.append(n)

        executor.step = step

    def wait_for_a_fresh_step(self) -> None:
        """Wait until a step that began after this call has ended."""
        mark = self.started
        wait_for(lambda: any(n >= mark for n in self.finished))


@pytest.mark.slow
def test_pause_and_resume(start_worker) -> None:
    w = start_worker()
    storage = ztq.get_storage()
    [executor] = w.executors
    steps = StepCounter(executor)
    assert send_command(storage, w.id, "pause", by="ops")
    wait_for(lambda: command_events(storage) == ["pause by ops"])
    assert get_worker(storage, w.id).status == "paused"  # written before the event
    steps.wait_for_a_fresh_step()  # from here on every step of the executor sees the pause
    h = t.add.delay(5, 5)
    steps.wait_for_a_fresh_step()  # a whole step since the task became ready: no fetch
    steps.wait_for_a_fresh_step()
    assert ztq.ping(h) == "queued"
    assert get_worker(storage, w.id).status == "paused" and executor.is_alive()
    assert send_command(storage, w.id, "resume", by="ops")
    wait_for(lambda: ztq.ping(h) == "done")
    assert h.result == 10
    # the task may finish before the worker logs the command that let it run
    wait_for(lambda: command_events(storage) == ["pause by ops", "resume by ops"])
    wait_for(lambda: get_worker(storage, w.id).status == "running")


def test_set_threads(start_worker) -> None:
    w = start_worker({"default": 1})
    storage = ztq.get_storage()
    send_command(storage, w.id, "set_threads", queue="default", threads=3)
    wait_for(lambda: get_worker(storage, w.id).get("threads") == {"default": 3})
    assert live_executors(w) == 3
    send_command(storage, w.id, "set_threads", queue="default", threads=1)
    wait_for(lambda: get_worker(storage, w.id).get("threads") == {"default": 1})
    send_command(storage, w.id, "set_threads", queue="other", threads=2)
    wait_for(lambda: get_worker(storage, w.id).get("threads") == {"default": 1, "other": 2})
    h = t.add.enqueue((2, 2), queue="other")
    wait_for(lambda: ztq.ping(h) == "done")


def test_set_threads_counts_the_threads_an_autoscale_decision_left(start_worker) -> None:
    """The autoscaler resizes a queue on the worker's main thread while a command may set
    its threads on another: the operator's count is applied to the executors as the pin
    finds them. Here a decision (1 -> 3 threads) lands as set_threads pins the queue: counted
    before the pin, 1 thread would have been taken for the base and 4 left."""
    spec = ScaleSpec("mail", 1, 4)
    w = start_worker(threads=tuple(spec.initial()), scaled=(spec,))
    pin = w.scaler.pin

    def decided_meanwhile(queue: str) -> bool:
        w.resize(queue, 3, event=False)  # what Scaler.step does, holding the lock pin takes
        return pin(queue)

    w.scaler.pin = decided_meanwhile  # type: ignore[method-assign]
    assert w.resize("mail", 2, pin=True)
    assert live_executors(w) == 2 and w.scaler.pinned == {"mail"}
    wait_for(lambda: get_worker(ztq.get_storage(), w.id).get("threads") == {"mail": 2})


def test_an_executor_listed_but_not_yet_started_is_not_pruned(start_worker) -> None:
    """The autoscaler's measure drops ended executors from the worker's list. A resize lists
    a new executor just before it starts its thread: not alive yet, but not ended, so it
    stays (else set_threads could add a thread that no heartbeat ever counts again)."""
    spec = ScaleSpec("mail", 1, 4)
    w = start_worker(threads=tuple(spec.initial()), scaled=(spec,))
    ex = Executor(w, ThreadSpec("mail-9", ("mail",), "thread"))
    with w.threads_lock:
        w.executors.append(ex)  # as Worker.add_executor does, before ex.start()
    w.scaler.measure(time.time())
    assert ex in w.executors
    ex.start()  # the worker stops it with the others


def test_set_threads_refused_when_config_is_not_active(start_worker) -> None:
    w = start_worker(active_config=False)
    storage = ztq.get_storage()
    send_command(storage, w.id, "set_threads", queue="default", threads=4, by="ops")
    wait_for(lambda: command_events(storage) == ["set_threads by ops"])  # it arrived
    assert get_worker(storage, w.id).get("threads") == {"default": 1}
    assert live_executors(w) == 1
    kinds = [e[1]["kind"] for e in storage.client.xrange(storage.keys.events)]
    assert "config" not in kinds


def test_a_stopping_worker_does_not_wait_out_its_command_read(start_worker, monkeypatch) -> None:
    """The command thread blocks reading the worker's command list; a stop wakes it with a
    token (not a command) instead of waiting for the read to time out. The read is made 5 s
    long here, so that waiting it out would show."""
    reading = threading.Event()

    def take(storage, worker_id: str, timeout: float = 0.0) -> list[dict]:
        if timeout:
            reading.set()
            timeout = 5.0
        return take_commands(storage, worker_id, timeout)

    monkeypatch.setattr("ztq.worker.worker.take_commands", take)
    w = start_worker()
    assert reading.wait(5) and w.command_thread is not None
    started = time.monotonic()
    w.request_stop()
    w.command_thread.join(4.0)
    assert not w.command_thread.is_alive() and time.monotonic() - started < 4.0


def test_command_for_unknown_worker_is_refused(redis_url: str) -> None:
    assert send_command(ztq.get_storage(), "nobody", "pause") is False


def test_stop_command_stops_the_worker(start_worker) -> None:
    w = start_worker()
    send_command(ztq.get_storage(), w.id, "stop")
    wait_for(lambda: not any(ex.is_alive() for ex in w.executors))
    wait_for(lambda: get_worker(ztq.get_storage(), w.id).status == "stopped")


def test_kill_a_stuck_task_in_a_thread(start_worker) -> None:
    w = start_worker()
    storage = ztq.get_storage()
    h = t.busy_loop.delay(60)
    wait_for(lambda: running_on(w, h.id))
    send_command(storage, w.id, "kill", thread="default-0", task_id=h.id)
    wait_for(lambda: ztq.ping(h) == "error")
    assert h.record().get("error").startswith("Killed")


@pytest.mark.slow
def test_process_slot_kill_and_hard_timeout(start_worker, tmp_path) -> None:
    w = start_worker({"slow": 1}, pool="process")
    storage = ztq.get_storage()
    stuck = t.sleepy.enqueue((60,), queue="slow")
    wait_for(lambda: running_on(w, stuck.id), timeout=20)
    slot_pid = w.executors[0].slot.pid
    send_command(storage, w.id, "kill", thread="slow-0", task_id=stuck.id)
    wait_for(lambda: ztq.ping(stuck) == "error")
    assert stuck.record().get("error").startswith("Killed")
    history = storage.client.xrange(storage.keys.history("slow"))
    assert [e["task"] for _, e in history if e["id"] == stuck.id] == [t.sleepy.name]
    wait_for(lambda: w.executors[0].slot.pid != slot_pid)
    assert gone(slot_pid)  # the killed slot process was not left behind
    # time.sleep in the slot's child is interrupted by the SIGALRM of the soft timeout
    soft = t.sleepy.enqueue((60,), queue="slow", timeout=0.5)
    wait_for(lambda: ztq.ping(soft) == "error", timeout=20)
    assert soft.record().get("error").startswith("SoftTimeout")
    ok = t.add.enqueue((1, 1), queue="slow")
    wait_for(lambda: ztq.ping(ok) == "done", timeout=20)
    assert ok.result == 2


def test_report_job_pid_is_killed_with_the_task(start_worker, tmp_path) -> None:
    w = start_worker()
    storage = ztq.get_storage()
    h = t.runs_child.delay(str(tmp_path / "pid"))
    wait_for(lambda: (tmp_path / "pid").exists() and ztq.ping(h) == "running")
    child = int((tmp_path / "pid").read_text())
    send_command(storage, w.id, "kill", thread="default-0", task_id=h.id)
    wait_for(lambda: ztq.ping(h) == "error")
    wait_for(lambda: gone(child))
