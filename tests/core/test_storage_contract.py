"""The storage contract, on a real redis-server and on a local three-master Redis Cluster."""

from __future__ import annotations

import threading
import time

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from ztq.core.client.cron import CronEntry
from ztq.core.engine.record import decode_payload
from ztq.core.engine.storage import EnqueueEntry, Finished, Leased, Storage

W = "worker-a"


def fetch_all(storage: Storage, queue: str = "default", limit: int = 100) -> list[str]:
    return [lease.id for lease in storage.leases.fetch(queue, W, "t0", 30_000, limit)]


def test_enqueue_fetch_ack_roundtrip(storage: Storage) -> None:
    h = t.add.delay(1, 2)
    assert h.outcome == "added" and ztq.ping(h) == "queued"
    [lease] = storage.leases.fetch("default", W, "t0", 30_000, 10)
    assert lease.id == h.id and lease.token == 1
    assert ztq.ping(h.id) == "running"
    refused = storage.leases.ack("default", W, [Finished(h.id, lease.token, t.add.name, "3")])
    assert refused == []
    assert ztq.ping(h.id) == "done" and h.result == 3
    assert "default" in storage.queues.names()


def test_identical_pending_task_is_one_task(storage: Storage) -> None:
    a = t.add.delay(1, 2)
    b = t.add.delay(1, 2)
    assert a.id == b.id and b.outcome == "exists"
    assert fetch_all(storage) == [a.id]


def test_identical_task_while_running_runs_once_more(storage: Storage) -> None:
    a = t.add.delay(1, 2)
    [lease] = storage.leases.fetch("default", W, "t0", 30_000, 1)
    again = t.add.delay(1, 2)
    assert again.outcome == "rerun"
    assert fetch_all(storage) == []  # not twice at the same time
    storage.leases.ack("default", W, [Finished(a.id, lease.token, t.add.name)])
    assert fetch_all(storage) == [a.id]


def test_an_enqueue_sent_again_gets_its_first_answer_within_the_window(storage: Storage) -> None:
    """The same call (its request id) sent again after its task was handed on, run and done
    answers as the first time and adds nothing (docs/design.md, "Lost replies"); its answer
    is kept for the request window, in the queue's slot; past the window the same call is a
    new enqueue (an identical task enqueued again: it runs again)."""
    payload = '["tests.sample_tasks.add",[1,2]]'
    op = storage.tasks.enqueue_op(
        "default", [EnqueueEntry("once", payload), EnqueueEntry("two", payload)]
    )
    assert storage.call(*op) == ["once", "added", "two", "added"]
    fetched = storage.leases.fetch("default", W, "t0", 30_000, 2)
    storage.leases.ack("default", W, [Finished(x.id, x.token, t.add.name, "3") for x in fetched])
    assert storage.call(*op) == ["once", "added", "two", "added"]  # not a second run
    assert [storage.tasks.record("default", i).state for i in ("once", "two")] == ["done", "done"]
    assert fetch_all(storage) == []
    [key] = [k for k in op[1] if ":req:" in k]
    assert key.startswith(storage.keys.prefix + ":{default}:req:")
    assert 0 < storage.client.pttl(key) <= storage.request_window_ms == 120_000
    storage.client.delete(key)  # the window passed
    assert storage.call(*op) == ["once", "added", "two", "added"]
    assert sorted(fetch_all(storage)) == ["once", "two"]


def test_unique_false_and_explicit_id(storage: Storage) -> None:
    a = t.add.enqueue((1, 2), unique=False)
    b = t.add.enqueue((1, 2), unique=False)
    c = t.add.enqueue((1, 2), id="fixed")
    d = t.add.enqueue((5, 5), id="fixed")
    assert a.id != b.id and c.id == d.id == "fixed" and d.outcome == "exists"
    assert sorted(fetch_all(storage)) == sorted([a.id, b.id, "fixed"])


def test_priorities_and_fifo_within_a_level(storage: Storage) -> None:
    low = [t.add.enqueue((i, 0), priority="low").id for i in range(3)]
    normal = [t.add.delay(i, 1).id for i in range(3)]
    high = [t.add.enqueue((i, 2), priority="high").id for i in range(3)]
    assert fetch_all(storage) == high + normal + low


def test_first_runs_before_the_rest_and_moves_a_pending_task(storage: Storage) -> None:
    ids = [t.add.delay(i, 0).id for i in range(4)]
    newcomer = t.add.enqueue((9, 9), first=True)
    moved = t.add.enqueue((2, 0), first=True)
    assert moved.outcome == "moved" and moved.id == ids[2]
    assert fetch_all(storage) == [ids[2], newcomer.id, ids[0], ids[1], ids[3]]


def test_first_moves_a_delayed_task_to_run_now(storage: Storage) -> None:
    h = t.add.enqueue((1, 1), delay=60)
    assert ztq.ping(h) == "delayed"
    assert t.add.enqueue((1, 1), first=True).outcome == "moved"
    assert fetch_all(storage) == [h.id]


@pytest.mark.slow
def test_delayed_task_becomes_ready_when_due(storage: Storage) -> None:
    soon = t.add.enqueue((1, 1), delay=0.3)
    later = t.add.enqueue((2, 2), delay=60)
    moved, nxt, _ = storage.tasks.promote("default")
    assert moved == 0 and nxt is not None
    assert fetch_all(storage) == []
    time.sleep(0.35)
    moved, nxt, now = storage.tasks.promote("default")
    assert moved == 1 and ztq.ping(soon) == "queued" and ztq.ping(later) == "delayed"
    assert nxt is not None and nxt > now + 50_000
    assert 50 < storage.tasks.promote("default").wait < 61


@pytest.mark.slow
def test_delayed_moved_exactly_once_by_concurrent_movers(storage: Storage) -> None:
    handles = [t.add.enqueue((i, 0), delay=0.2) for i in range(300)]
    time.sleep(0.25)
    moved: list[int] = []
    barrier = threading.Barrier(6)

    def mover() -> None:
        barrier.wait()
        total = 0
        for _ in range(20):
            total += storage.tasks.promote("default", limit=7)[0]
        moved.append(total)

    threads = [threading.Thread(target=mover) for _ in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sum(moved) == 300
    got = fetch_all(storage, limit=1000)
    assert sorted(got) == sorted(h.id for h in handles)  # each exactly once


@pytest.mark.slow
def test_transaction_is_all_or_nothing(storage: Storage) -> None:
    with pytest.raises(RuntimeError), ztq.transaction():
        t.add.delay(1, 1)
        t.send.delay("a@example.org")
        raise RuntimeError("rolled back")
    assert fetch_all(storage) == [] and fetch_all(storage, "mail") == []
    with ztq.transaction() as handles:
        inside = t.add.delay(1, 1)
        assert inside.outcome == "buffered"
        with pytest.raises(ztq.NotFound, match="written when the transaction or batch block ends"):
            ztq.ping(inside)  # nothing of it is in Redis yet, and the error says why
        t.send.delay("a@example.org")
        t.add.delay(1, 1)  # a duplicate inside the block is still one task
    assert [h.outcome for h in handles] == ["added", "added", "exists"]
    assert fetch_all(storage) == [inside.id]
    assert len(fetch_all(storage, "mail")) == 1


def test_transaction_manager_enqueues_on_commit_only(storage: Storage) -> None:
    import transaction

    ztq.use_transaction_manager(True)
    try:
        transaction.begin()
        t.add.delay(7, 7)
        transaction.abort()
        assert fetch_all(storage) == []
        transaction.begin()
        h = t.add.delay(8, 8)
        assert ztq.ping(h) == "none"
        transaction.commit()
        assert fetch_all(storage) == [h.id]
    finally:
        ztq.use_transaction_manager(False)


def test_cron_enqueues_once_per_tick_however_many_workers(storage: Storage) -> None:
    entry = ztq.add_cron(t.noop.prepare(), "* * * * *", name="every-minute")
    try:
        tick = (int(time.time()) // 60) * 60 + 0.5
        tables = [ztq.CronTable([CronEntry(entry.name, entry.call, entry.spec)]) for _ in range(5)]
        outcomes = [h.outcome for tb in tables for h in tb.fire(now=tick)[0]]
        assert sorted(outcomes) == ["added", "skipped", "skipped", "skipped", "skipped"]
        [lease] = storage.leases.fetch("default", W, "t0", 30_000, 10)
        assert (
            storage.leases.ack("default", W, [Finished(lease.id, lease.token, t.noop.name)]) == []
        )
        # the same tick again after the task ran and finished: still not enqueued twice
        again = ztq.CronTable([CronEntry(entry.name, entry.call, entry.spec)])
        assert [h.outcome for h in again.fire(now=tick + 1)[0]] == ["skipped"]
        # the next minute is a new tick
        nxt = ztq.CronTable([CronEntry(entry.name, entry.call, entry.spec)])
        assert [h.outcome for h in nxt.fire(now=tick + 60)[0]] == ["added"]
    finally:
        ztq.remove_cron("every-minute")


def test_fail_goes_to_error_queue_and_redo_brings_it_back(storage: Storage) -> None:
    h = t.boom.delay("bad")
    [lease] = storage.leases.fetch("default", W, "t0", 30_000, 1)
    assert (
        storage.leases.fail("default", W, h.id, lease.token, t.boom.name, "ValueError: bad", "tb")
        == "error"
    )
    rec = h.record()
    assert rec is not None and rec.state == "error" and rec.get("error") == "ValueError: bad"
    assert rec.get("failed_worker") == W and rec.get("traceback") == "tb"
    assert storage.tasks.requeue("default", "error", [h.id]) == 1
    assert ztq.ping(h) == "queued" and fetch_all(storage) == [h.id]


@pytest.mark.slow
@pytest.mark.parametrize("char", ["é", "错", "\U0001f4a5", "Z\u0336"])
def test_history_summary_is_cut_between_characters(storage: Storage, char: str) -> None:
    """The summary keeps 200 bytes of the error: never half a character (a reader decodes
    the stream as UTF-8, and one broken entry made the whole history unreadable)."""
    h = t.boom.delay()
    [lease] = storage.leases.fetch("default", W, "t0", 30_000, 1)
    for pad in range(4):  # every way a character can straddle byte 200
        error = "E: " + "x" * pad + char * 200
        storage.leases.fail(
            "default", W, h.id, lease.token, t.boom.name, error, "", retry_delay_ms=0
        )
        storage.tasks.promote("default")
        [lease] = storage.leases.fetch("default", W, "t0", 30_000, 1)
        summary = storage.client.xrevrange(storage.keys.history("default"), count=1)[0][1]
        summary = summary["summary"]
        assert error.startswith(summary) and 196 < len(summary.encode()) <= 200


def test_fail_with_retry_goes_to_delayed(storage: Storage) -> None:
    h = t.boom.delay()
    [lease] = storage.leases.fetch("default", W, "t0", 30_000, 1)
    out = storage.leases.fail(
        "default", W, h.id, lease.token, t.boom.name, "E: x", "", retry_delay_ms=100
    )
    assert out == "retry" and ztq.ping(h) == "delayed"
    time.sleep(0.15)
    assert storage.tasks.promote("default")[0] == 1
    [again] = storage.leases.fetch("default", W, "t0", 30_000, 1)
    assert again.token == 2  # attempts count across retries


def test_expired_lease_returns_to_ready_and_stale_ack_is_refused(storage: Storage) -> None:
    h = t.add.delay(1, 2)
    [first] = storage.leases.fetch("default", "w1", "t0", 50, 1)
    time.sleep(0.1)
    assert storage.leases.reap("default", max_lost=3).items == [(h.id, "w1", "ready")]
    [second] = storage.leases.fetch("default", "w2", "t0", 30_000, 1)
    assert second.token == first.token + 1
    # the first worker wakes up and tries to finish: refused (fencing token)
    assert storage.leases.ack("default", "w1", [Finished(h.id, first.token, t.add.name)]) == [h.id]
    assert (
        storage.leases.fail("default", "w1", h.id, first.token, t.add.name, "E: x", "") == "refused"
    )
    assert storage.leases.renew("default", "w1", 30_000, [(h.id, first.token)]) == [h.id]
    assert storage.leases.renew("default", "w2", 30_000, [(h.id, second.token)]) == []
    assert storage.leases.ack("default", "w2", [Finished(h.id, second.token, t.add.name)]) == []
    assert ztq.ping(h) == "done"


def test_poison_pill_goes_to_errors_after_max_lost(storage: Storage) -> None:
    h = t.add.delay(4, 4)
    for i in range(2):
        storage.leases.fetch("default", f"w{i}", "t0", 10, 1)
        time.sleep(0.03)
        outcome = storage.leases.reap("default", max_lost=2).items
    assert outcome == [(h.id, "w1", "error")]
    rec = h.record()
    assert rec is not None and rec.state == "error" and "poison pill" in rec.get("error")


def test_paused_queue_hands_out_nothing(storage: Storage) -> None:
    t.add.delay(1, 2)
    storage.queues.pause("default")
    assert fetch_all(storage) == [] and storage.queues.is_paused("default")
    storage.queues.resume("default")
    assert len(fetch_all(storage)) == 1


def test_delete_and_purge(storage: Storage) -> None:
    ids = [t.add.delay(i, 0).id for i in range(5)]
    delayed = t.add.enqueue((1, 1), delay=60)
    assert storage.tasks.remove("default", [ids[1], delayed.id, "nope"]) == (2, 3)
    assert ztq.ping(ids[1], "default") == "none" and ztq.ping(delayed) == "none"
    deleted = 0
    while True:
        d, taken = storage.tasks.remove("default", purge="ready", limit=2)
        deleted += d
        if taken == 0:
            break
    assert deleted == 4 and fetch_all(storage) == []


def test_running_task_is_not_deleted(storage: Storage) -> None:
    h = t.add.delay(1, 2)
    storage.leases.fetch("default", W, "t0", 30_000, 1)
    assert storage.tasks.remove("default", [h.id]) == (0, 1)
    assert ztq.ping(h) == "running"


def test_progress_is_stored_only_under_the_live_lease(storage: Storage) -> None:
    h = t.add.delay(1, 2)
    [lease] = storage.leases.fetch("default", W, "t0", 30_000, 1)
    assert storage.leases.set_run_info("default", h.id, lease.token, W, "progress", '{"pct": 40}')
    assert h.progress == {"pct": 40}
    assert not storage.leases.set_run_info("default", h.id, lease.token + 1, W, "progress", "{}")
    # the right token from another worker is refused too: the check is one (token, worker)
    assert not storage.leases.set_run_info(
        "default", h.id, lease.token, "intruder", "progress", "{}"
    )
    assert h.progress == {"pct": 40}


def test_arguments_survive_lua_untouched(storage: Storage) -> None:
    args = ([], {}, 12345678901234567890, 0.1, 'é\n"x"', None)
    h = t.noop.enqueue(args, {"empty": {}, "list": []})
    [lease] = storage.leases.fetch("default", W, "t0", 30_000, 1)
    payload = decode_payload(lease.payload)
    assert payload["args"] == list(args) and payload["kwargs"] == {"empty": {}, "list": []}
    assert h.id == lease.id


def test_ping_unknown_is_none(storage: Storage) -> None:
    assert ztq.ping("0" * 32) == "none"


def test_scripts_are_reloaded_after_script_flush(storage: Storage) -> None:
    """What a Redis restart does to the script cache, for single calls and pipelines."""
    t.add.delay(1, 1)
    flush = storage.client.script_flush
    flush()
    with ztq.transaction():  # a pipeline first
        t.add.delay(2, 2)
        t.add.delay(3, 3)
    flush()
    assert len(fetch_all(storage)) == 3  # a single call


def test_a_disabled_cron_entry_lets_its_ticks_pass(storage: Storage) -> None:
    from ztq.core.client.cron import CronEntry
    from ztq.core.engine.workers import disabled_cron, set_cron_enabled

    entry = CronEntry("off-entry", t.noop.prepare(), "* * * * *")
    table = ztq.CronTable([entry])
    tick = (int(time.time()) // 60) * 60 + 0.5
    set_cron_enabled(storage, "off-entry", False, by="ops")
    assert table.fire(now=tick, skip=disabled_cron(storage))[0] == []
    set_cron_enabled(storage, "off-entry", True)
    assert [h.outcome for h in table.fire(now=tick + 60, skip=disabled_cron(storage))[0]] == [
        "added"
    ]


def _lose_lease(storage: Storage, worker: str, thread: str) -> Leased:
    """Lease the head task with a lease that is already over, and let the reaper take it."""
    [lease] = storage.leases.fetch("default", worker, thread, 0, 1)
    assert [item[0] for item in storage.leases.reap("default", max_lost=10).items] == [lease.id]
    return lease


def test_stale_ack_after_a_redo_is_refused(storage: Storage) -> None:
    """The sequence found from outside: w1/A's lease is reaped, w2 fails it, an operator
    redoes it, w1/B leases it again. A's late ack must be refused and B's accepted."""
    h = t.boom.delay("x")
    a = _lose_lease(storage, "w1", "A")
    [w2] = storage.leases.fetch("default", "w2", "t0", 30_000, 1)
    assert storage.leases.fail("default", "w2", h.id, w2.token, t.boom.name, "E: x", "") == "error"
    assert storage.tasks.requeue("default", "error", [h.id]) == 1
    [b] = storage.leases.fetch("default", "w1", "B", 30_000, 1)
    assert b.token > w2.token > a.token
    assert storage.leases.ack(
        "default", "w1", [Finished(h.id, a.token, t.boom.name, '"stale"')]
    ) == [h.id]
    assert not storage.leases.set_run_info("default", h.id, a.token, "w1", "progress", "{}")
    assert storage.leases.renew("default", "w1", 30_000, [(h.id, a.token)]) == [h.id]
    assert storage.leases.release("default", "w1", [(h.id, a.token)]) == 0
    assert (
        storage.leases.ack("default", "w1", [Finished(h.id, b.token, t.boom.name, '"real"')]) == []
    )
    assert ztq.ping(h) == "done" and h.result == "real"


def test_tokens_never_repeat_across_rerun_reenqueue_and_delete(storage: Storage) -> None:
    h = t.add.delay(1, 1)
    tokens = [_lose_lease(storage, "w1", "A").token]
    [run] = storage.leases.fetch("default", "w1", "B", 30_000, 1)
    tokens.append(run.token)
    assert t.add.delay(1, 1).outcome == "rerun"  # an identical enqueue during the run
    assert storage.leases.ack("default", "w1", [Finished(h.id, run.token, t.add.name)]) == []
    [rerun] = storage.leases.fetch("default", "w1", "A", 30_000, 1)
    tokens.append(rerun.token)
    assert storage.leases.ack("default", "w1", [Finished(h.id, rerun.token, t.add.name)]) == []
    assert t.add.delay(1, 1).outcome == "added"  # replaces the finished record
    [again] = storage.leases.fetch("default", "w1", "A", 30_000, 1)
    tokens.append(again.token)
    storage.leases.release("default", "w1", [(h.id, again.token)])
    assert storage.tasks.remove("default", [h.id]) == (1, 1)  # deleted, then the same id again
    assert t.add.delay(1, 1).outcome == "added"
    [last] = storage.leases.fetch("default", "w1", "A", 30_000, 1)
    tokens.append(last.token)
    assert tokens == sorted(set(tokens))  # strictly growing: no token handed out twice
    for stale in tokens[:-1]:
        assert storage.leases.ack("default", "w1", [Finished(h.id, stale, t.add.name)]) == [h.id]
    assert ztq.ping(h) == "running"


def test_lost_leases_do_not_use_up_retries(storage: Storage) -> None:
    """``retries`` counts failures of the task's code; ``max_lost`` counts lost leases."""
    h = t.boom.delay("x")
    _lose_lease(storage, "w1", "A")
    _lose_lease(storage, "w1", "A")
    [lease] = storage.leases.fetch("default", "w2", "t0", 30_000, 1)
    assert lease.failures == 0  # two crashes, but the code has not failed yet
    out = storage.leases.fail(
        "default", "w2", h.id, lease.token, t.boom.name, "E: x", "", retry_delay_ms=0
    )
    assert out == "retry"
    storage.tasks.promote("default")
    [retry] = storage.leases.fetch("default", "w2", "t0", 30_000, 1)
    assert retry.failures == 1
    rec = h.record()
    assert rec is not None and (rec.get("lost"), rec.get("failures"), rec.get("attempts")) == (
        2,
        1,
        4,
    )
    storage.leases.fail("default", "w2", h.id, retry.token, t.boom.name, "E: x", "")
    assert storage.tasks.requeue("default", "error", [h.id]) == 1  # a redo starts a new series
    [redone] = storage.leases.fetch("default", "w2", "t0", 30_000, 1)
    rec = h.record()
    assert redone.failures == 0 and rec is not None
    assert (rec.get("lost"), rec.get("failures"), rec.get("attempts")) == (None, None, 1)


def test_a_rerun_request_ends_with_the_run_it_was_made_during(storage: Storage) -> None:
    """A poison pill that had a rerun request, redone: it runs once and is done (the request
    belonged to the lost run; it used to survive and cost an extra run after the redo)."""
    h = t.add.delay(3, 3)
    storage.leases.fetch("default", "w1", "A", 0, 1)
    assert t.add.delay(3, 3).outcome == "rerun"
    assert [item[2] for item in storage.leases.reap("default", max_lost=1).items] == ["error"]
    assert storage.tasks.requeue("default", "error", [h.id]) == 1
    [run] = storage.leases.fetch("default", "w1", "A", 30_000, 1)
    assert storage.leases.ack("default", "w1", [Finished(h.id, run.token, t.add.name, "6")]) == []
    assert ztq.ping(h) == "done" and fetch_all(storage) == []


def test_tokens_past_1e14_stay_distinct(storage: Storage) -> None:
    """cjson writes numbers with 14 digits; tokens are stored as strings so that they do not
    merge when a queue's counter grows large."""
    ids = [t.add.delay(i, 0).id for i in range(3)]
    storage.client.set(storage.keys.fence("default"), 10**14 - 1)
    leases = storage.leases.fetch("default", W, "t0", 30_000, 3)
    assert [lease.token for lease in leases] == [10**14, 10**14 + 1, 10**14 + 2]
    stale = [Finished(lease.id, 10**14, t.add.name) for lease in leases[1:]]
    assert storage.leases.ack("default", W, stale) == ids[1:]
    live = [Finished(lease.id, lease.token, t.add.name) for lease in leases]
    assert storage.leases.ack("default", W, live) == []
