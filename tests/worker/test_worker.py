"""The worker on a real redis-server: running, failing, retrying, callbacks, batches."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from tests.worker.conftest import wait_for
from ztq.core.monitor.workers import list_workers


def read_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_runs_tasks_and_keeps_results(start_worker) -> None:
    start_worker({"default": 2, "mail": 1})
    handles = [t.add.delay(i, i) for i in range(40)]
    mail = t.send.delay("ann@example.org")
    wait_for(lambda: all(ztq.ping(h) == "done" for h in [*handles, mail]))
    assert [h.result for h in handles] == [2 * i for i in range(40)]
    assert mail.result == "sent to ann@example.org"


def test_history_and_stats_are_written(start_worker) -> None:
    start_worker()
    h = t.add.delay(1, 1)
    wait_for(lambda: ztq.ping(h) == "done")
    storage = ztq.get_storage()
    entries = storage.client.xrange(storage.keys.history("default"))
    assert [(e[1]["id"], e[1]["status"]) for e in entries] == [(h.id, "done")]
    minute = int(time.time() // 60)
    counts = [
        storage.client.hget(storage.keys.stats("default", m), "done") for m in (minute - 1, minute)
    ]
    assert sum(int(c or 0) for c in counts) == 1


def test_failure_lands_in_error_queue_with_details(start_worker) -> None:
    w = start_worker()
    h = t.boom.delay("kaput")
    wait_for(lambda: ztq.ping(h) == "error")
    rec = h.record()
    assert rec is not None
    assert rec.get("error") == "ValueError: kaput"
    assert "Traceback" in rec.get("traceback") and "kaput" in rec.get("traceback")
    assert rec.get("failed_worker") == w.id and rec.get("attempts") == 1
    assert rec.get("started") and rec.get("ended")


def test_retries_with_backoff_then_success(start_worker, tmp_path: Path) -> None:
    start_worker()
    counter = tmp_path / "count"
    h = t.flaky.enqueue((str(counter), 2), retries=3)
    wait_for(lambda: ztq.ping(h) == "done")
    assert counter.read_text() == "3" and h.result == "ok"


def test_retries_exhausted_go_to_errors(start_worker, tmp_path: Path) -> None:
    start_worker()
    counter = tmp_path / "count"
    h = t.flaky.enqueue((str(counter), 5), retries=1)
    wait_for(lambda: ztq.ping(h) == "error")
    assert counter.read_text() == "2"


def test_retry_exception_reschedules(start_worker, tmp_path: Path) -> None:
    start_worker()
    h = t.asks_retry.delay(str(tmp_path / "n"))
    wait_for(lambda: ztq.ping(h) == "done")
    assert h.result == "second time"


def test_callbacks_on_success_failure_and_progress(start_worker, tmp_path: Path) -> None:
    start_worker({"default": 2})
    ok_log, fail_log, prog_log = tmp_path / "ok", tmp_path / "fail", tmp_path / "prog"
    cb = t.record.prepare((str(ok_log), "called back"))
    chained = t.record.prepare((str(ok_log), "first"), callback=cb)  # two levels
    h1 = t.add.enqueue((1, 2), callback=chained)
    h2 = t.boom.enqueue(("bad",), on_failure=t.on_fail.prepare((str(fail_log),)))
    h3 = t.progressing.enqueue((4,), on_progress=t.on_prog.prepare((str(prog_log),)))
    wait_for(lambda: read_lines(ok_log) == ["first", "called back"])
    wait_for(lambda: read_lines(fail_log) == ["ValueError|bad"])
    wait_for(lambda: sorted(read_lines(prog_log)) == ["100", "25", "50", "75"])
    wait_for(lambda: ztq.ping(h3) == "done")
    assert ztq.ping(h1) == "done" and ztq.ping(h2) == "error"


def test_progress_and_comment_visible_while_running(start_worker, tmp_path: Path) -> None:
    start_worker()  # one thread: the progress callback waits in the queue behind the task
    storage = ztq.get_storage()
    release, prog_log = tmp_path / "release", tmp_path / "prog"
    h = t.reports_then_waits.enqueue(
        (str(release), "halfway there", 50), on_progress=t.on_prog.prepare((str(prog_log),))
    )
    rec = wait_for(lambda: (r := h.record()) is not None and r.get("progress") and r)
    assert rec.state == "running" and rec.get("thread") == "default-0"
    assert json.loads(rec.get("progress")) == {"pct": 50, "of": "pages"}
    assert rec.get("comment") == "halfway there"
    workers = wait_for(lambda: [w for w in list_workers(storage) if w.get("current")])
    assert workers[0].get("current")["default-0"]["id"] == h.id
    ready = storage.client.lrange(storage.keys.ready("default", "normal"), 0, -1)
    [callback] = [storage.tasks.record("default", i) for i in ready]
    assert callback.state == "queued" and callback.task == "tests.sample_tasks.on_prog"
    assert callback.kwargs == {"progress": {"pct": 50, "of": "pages"}}
    release.touch()
    wait_for(lambda: ztq.ping(h) == "done" and read_lines(prog_log) == ["50"])
    assert h.result == "released"


def test_bad_payload_unknown_task_wrong_args_go_to_errors(start_worker) -> None:
    storage = ztq.get_storage()
    start_worker()
    bad_json = "bad-json"
    storage.client.hset(storage.keys.tasks("default"), bad_json, '{"state":"queued"}\n{oops')
    storage.client.rpush(storage.keys.ready("default", "normal"), bad_json)
    unknown = ztq.TaskCall("nowhere.to_be_found", (1,)).enqueue()
    # the producer refuses these arguments now; a call made by name (or by an older client)
    # still reaches the worker, which refuses them too
    wrong = ztq.TaskCall(t.add.name, (1, 2, 3), retries=5).enqueue()
    after = t.add.delay(10, 10)
    wait_for(lambda: ztq.ping(after) == "done")  # the worker kept going
    wait_for(
        lambda: all(ztq.ping(i, "default") == "error" for i in (bad_json, unknown.id, wrong.id))
    )
    errors = {
        i: storage.tasks.record("default", i).get("error") for i in (bad_json, unknown.id, wrong.id)
    }
    assert "not valid JSON" in errors[bad_json]
    assert (
        errors[unknown.id].startswith("UnknownTask") and "nowhere.to_be_found" in errors[unknown.id]
    )
    assert errors[wrong.id].startswith("WrongArguments")
    assert (
        storage.tasks.record("default", wrong.id).get("attempts") == 1
    )  # no retries for bad arguments


def test_batch_commit_after_n_and_when_dry(start_worker, tmp_path: Path, monkeypatch) -> None:
    log = tmp_path / "batch"
    monkeypatch.setattr(t, "BATCH_LOG", str(log))
    docs = tmp_path / "docs"
    storage = ztq.get_storage()
    storage.queues.pause("default")
    handles = [t.index_doc.delay(str(docs), i) for i in range(7)]
    start_worker()
    storage.queues.resume("default")
    wait_for(lambda: all(ztq.ping(h) == "done" for h in handles))
    wait_for(lambda: len(read_lines(log)) == 3)  # 3 + 3, then the dry queue commits the last 1


def test_soft_timeout_in_a_thread(start_worker) -> None:
    start_worker()
    h = t.busy_loop.enqueue((30,), timeout=0.5)
    wait_for(lambda: ztq.ping(h) == "error", timeout=10)
    assert h.record().get("error").startswith("SoftTimeout")


def test_heartbeat_describes_the_worker(start_worker) -> None:
    w = start_worker({"default": 2, "mail": 1})
    [info] = wait_for(lambda: [w for w in list_workers(ztq.get_storage()) if w.get("threads")])
    assert info.id == w.id and info.status == "running"
    for key in ("host", "ip", "pid", "cpu_percent", "mem_total", "mem_percent", "rss", "started"):
        assert info.get(key) is not None, key
    assert info.get("threads") == {"default": 2, "mail": 1}
    events = ztq.get_storage().client.xrange(ztq.get_storage().keys.events)
    assert events[0][1]["kind"] == "start" and events[0][1]["worker"] == w.id


def test_payload_with_many_args_round_trip(start_worker) -> None:
    start_worker()
    h = t.noop.enqueue(([1, {"a": []}], "x" * 10_000))
    wait_for(lambda: ztq.ping(h) == "done")
    assert h.record().args[1] == "x" * 10_000


def test_soft_timeouts_fire_at_the_deadline_not_at_the_next_heartbeat(start_worker) -> None:
    """Two timed runs on one thread, with a heartbeat far longer than the timeout: each
    ends within half a second of its limit (it used to wait for the next heartbeat)."""
    start_worker(heartbeat=5.0, lease=15.0)
    handles = [t.busy_loop.enqueue((30,), timeout=0.3, unique=False) for _ in range(2)]
    wait_for(lambda: all(ztq.ping(h) == "error" for h in handles), timeout=20)
    for h in handles:
        rec = h.record()
        assert rec is not None and rec.get("error").startswith("SoftTimeout")
        assert 300 <= rec.get("ended") - rec.get("started") < 2000  # the heartbeat is 5 s


@pytest.mark.slow
def test_a_worker_with_more_threads_than_redis_py_pools_runs_each_task_once(
    start_worker, tmp_path
) -> None:
    """redis-py caps a connection pool at 100: 130 threads must not lose acks to it."""
    from tests import sample_tasks as st

    worker = start_worker({"default": 130})
    marker = tmp_path / "ran"
    handles = [st.sleepy.enqueue((0.3, str(marker)), unique=False) for _ in range(260)]
    for h in handles:
        assert h.get(timeout=30) == "slept"
    assert all(h.record().get("attempts") == 1 for h in handles)
    assert len(marker.read_text().splitlines()) == 260  # none ran twice
    assert worker.storage.client.connection_pool.max_connections >= 130
