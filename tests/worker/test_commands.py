"""Console commands reaching a worker through Redis, and process slots."""

from __future__ import annotations

import os
import time

import ztq.core as ztq
from tests import sample_tasks as t
from tests.worker.conftest import wait_for
from ztq.core.workers import get_worker, send_command


def running_on(worker, task_id: str) -> bool:
    """The task is past its fetch and running on one of the worker's executors."""
    return any(ex.current and ex.current.lease.id == task_id for ex in worker.executors)


def test_pause_and_resume(start_worker) -> None:
    w = start_worker()
    storage = ztq.get_storage()
    assert send_command(storage, w.id, "pause", by="ops")
    wait_for(lambda: get_worker(storage, w.id).status == "paused")
    time.sleep(0.3)  # let a fetch that was under way finish
    h = t.add.delay(5, 5)
    time.sleep(0.6)
    assert ztq.ping(h) == "queued"
    send_command(storage, w.id, "resume")
    wait_for(lambda: ztq.ping(h) == "done")
    kinds = [e[1]["kind"] for e in storage.client.xrange(storage.keys.events)]
    assert kinds.count("command") == 2


def test_set_threads(start_worker) -> None:
    w = start_worker({"default": 1})
    storage = ztq.get_storage()
    send_command(storage, w.id, "set_threads", queue="default", threads=3)
    wait_for(lambda: get_worker(storage, w.id).get("threads") == {"default": 3})
    send_command(storage, w.id, "set_threads", queue="default", threads=1)
    wait_for(lambda: get_worker(storage, w.id).get("threads") == {"default": 1})
    send_command(storage, w.id, "set_threads", queue="other", threads=2)
    wait_for(lambda: get_worker(storage, w.id).get("threads") == {"default": 1, "other": 2})
    h = t.add.enqueue((2, 2), queue="other")
    wait_for(lambda: ztq.ping(h) == "done")


def test_set_threads_refused_when_config_is_not_active(start_worker) -> None:
    w = start_worker(active_config=False)
    storage = ztq.get_storage()
    send_command(storage, w.id, "set_threads", queue="default", threads=4)
    send_command(storage, w.id, "refresh")
    time.sleep(0.5)
    assert get_worker(storage, w.id).get("threads") == {"default": 1}


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


def test_process_slot_kill_and_hard_timeout(start_worker, tmp_path) -> None:
    w = start_worker({"slow": 1}, pool="process")
    storage = ztq.get_storage()
    stuck = t.sleepy.enqueue((60,), queue="slow")
    wait_for(lambda: running_on(w, stuck.id), timeout=20)
    slot_pid = w.executors[0].slot.pid
    send_command(storage, w.id, "kill", thread="slow-0", task_id=stuck.id)
    wait_for(lambda: ztq.ping(stuck) == "error")
    assert stuck.record().get("error").startswith("Killed")
    wait_for(lambda: w.executors[0].slot.pid != slot_pid)
    # sleep() in C cannot be interrupted by SIGALRM's exception? It can: the soft timeout fires
    soft = t.sleepy.enqueue((60,), queue="slow", timeout=0.5)
    wait_for(lambda: ztq.ping(soft) == "error", timeout=20)
    assert soft.record().get("error").startswith("SoftTimeout")
    ok = t.add.enqueue((1, 1), queue="slow")
    wait_for(lambda: ztq.ping(ok) == "done", timeout=20)
    assert ok.result == 2
    assert os.getpid() != slot_pid


def test_report_job_pid_is_killed_with_the_task(start_worker, tmp_path) -> None:
    w = start_worker()
    storage = ztq.get_storage()
    h = t.runs_child.delay(str(tmp_path / "pid"))
    wait_for(lambda: (tmp_path / "pid").exists() and ztq.ping(h) == "running")
    child = int((tmp_path / "pid").read_text())
    send_command(storage, w.id, "kill", thread="default-0", task_id=h.id)
    wait_for(lambda: ztq.ping(h) == "error")

    def gone() -> bool:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return True
        with open(f"/proc/{child}/stat") as fh:
            return fh.read().split()[2] == "Z"

    wait_for(gone)
