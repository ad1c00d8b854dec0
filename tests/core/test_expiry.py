"""Expiry (``expires=``, docs/queue-controls.md "Expiry"): a task not started before its
expiry never runs. The enqueue script stores the expiry on Redis's clock; every lease checks
it (fetch, a handed task taken late); an expired task is recorded as ``expired`` (history,
stats, the ``done`` zset), ``handle.get()`` raises ``TaskExpired`` and ``ping`` answers
``"expired"``. On Redis 7, 6.2 and Cluster; the worker process: tests/worker/test_expiry.py;
every move at random: the state-machine test."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from ztq.core.engine.record import split_record
from ztq.core.engine.storage import Finished, Storage
from ztq.core.errors import InvalidOption, NotFound, TaskExpired
from ztq.core.monitor import queues, timings

Q = "default"


def redis_ms(storage: Storage) -> int:
    seconds, micros = storage.client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def meta_of(storage: Storage, task_id: str, queue: str = Q) -> dict:
    raw = storage.client.hget(storage.keys.tasks(queue), task_id)
    assert raw is not None
    return split_record(str(raw))[0]


def age(storage: Storage, task_id: str, queue: str = Q) -> None:
    """Move the task's expiry into the past (as if its time ran out), without a sleep."""
    raw = str(storage.client.hget(storage.keys.tasks(queue), task_id))
    meta, payload = split_record(raw)
    assert isinstance(meta.get("exp"), int)
    meta["exp"] = redis_ms(storage) - 1
    storage.client.hset(storage.keys.tasks(queue), task_id, json.dumps(meta) + "\n" + payload)


def history(storage: Storage, queue: str = Q) -> list[dict[str, str]]:
    return [dict(f) for _, f in storage.client.xrange(storage.keys.history(queue))]


def test_the_enqueue_stores_the_expiry_on_redis_time(storage: Storage) -> None:
    before = redis_ms(storage)
    h = t.add.enqueue((1, 2), expires=30)
    after = redis_ms(storage)
    exp = meta_of(storage, h.id)["exp"]
    assert before + 30_000 <= exp <= after + 30_000
    plain = t.add.delay(5, 6)  # no expiry: the bare enqueue-time form is kept
    raw = str(storage.client.hget(storage.keys.tasks(Q), plain.id))
    assert raw.split("\n")[0].isdigit()
    td = t.add.enqueue((3, 4), expires=timedelta(minutes=2))
    assert meta_of(storage, td.id)["exp"] - meta_of(storage, td.id)["enqueued"] == 120_000


def test_a_task_expired_before_its_first_fetch_never_runs(storage: Storage) -> None:
    gone = t.add.enqueue((1, 1), expires=60)
    live = t.add.enqueue((2, 2), expires=60)
    plain = t.add.delay(3, 3)
    age(storage, gone.id)
    leased = storage.leases.fetch(Q, "w1", "t", 60_000, 5)
    assert [x.id for x in leased] == [live.id, plain.id]  # the fetch went on past it
    assert leased[0].expires_at is not None and leased[1].expires_at is None
    assert ztq.ping(gone) == "expired"
    assert storage.client.zscore(storage.keys.done(Q), gone.id) is not None
    meta = meta_of(storage, gone.id)
    assert meta["state"] == "expired" and "attempts" not in meta and "fence" not in meta
    [entry] = history(storage)
    assert entry["id"] == gone.id and entry["status"] == "expired"
    assert entry["task"] == "tests.sample_tasks.add"
    with pytest.raises(TaskExpired) as err:
        gone.get(timeout=5)
    assert err.value.task_id == gone.id and isinstance(err.value, ztq.ZtqError)
    assert err.value.expired_at == meta["exp"]


def test_expired_tasks_are_counted_like_done_and_failed(storage: Storage) -> None:
    ids = [t.add.enqueue((n, 0), expires=60).id for n in range(3)]
    for i in ids:
        age(storage, i)
    assert storage.leases.fetch(Q, "w1", "t", 60_000, 5) == []
    totals = timings.totals(storage, [Q])[Q]
    assert totals.expired == 3 and totals.done == 0 and totals.failed == 0
    [row] = queues.queue_stats(storage, [Q])
    assert row.window.expired == 3  # the last hour's, for the console's queue page


def test_a_task_expired_while_delayed_ends_at_its_fetch(storage: Storage) -> None:
    h = t.add.enqueue((1, 2), delay=1, expires=60)
    age(storage, h.id)
    storage.client.zadd(storage.keys.delayed(Q), {h.id: 0})  # due now
    assert storage.tasks.promote(Q).moved == 1  # the promoter leaves it to the fetch
    assert storage.leases.fetch(Q, "w1", "t", 60_000, 1) == []
    assert ztq.ping(h) == "expired"


@pytest.mark.parametrize("due", [{"delay": 60}, {"delay": 61}, {"eta_in": 90}])
def test_a_due_time_at_or_after_the_expiry_is_refused(storage: Storage, due: dict) -> None:
    import time

    opts = dict(due)
    if "eta_in" in opts:
        opts["eta"] = time.time() + opts.pop("eta_in")
    with pytest.raises(InvalidOption, match="expire before it is due"):
        t.add.enqueue((1, 2), expires=60, **opts)
    assert storage.client.hlen(storage.keys.tasks(Q)) == 0  # nothing written


def test_a_retry_after_the_expiry_does_not_run(storage: Storage) -> None:
    h = t.add.enqueue((1, 2), expires=60, retries=3)
    [lease] = storage.leases.fetch(Q, "w1", "t", 60_000, 1)
    storage.leases.fail(Q, "w1", lease.id, lease.token, "x", "E: e", "", retry_delay_ms=0)
    assert storage.tasks.promote(Q).moved == 1
    age(storage, h.id)
    assert storage.leases.fetch(Q, "w1", "t", 60_000, 1) == []
    meta = meta_of(storage, h.id)
    assert meta["state"] == "expired" and meta["failures"] == 1
    assert [e["status"] for e in history(storage)] == ["retry", "expired"]


def test_a_reaped_run_after_the_expiry_does_not_run_again(storage: Storage) -> None:
    h = t.add.enqueue((1, 2), expires=60)
    storage.leases.fetch(Q, "w1", "t", 1, 1)
    age(storage, h.id)
    import time

    time.sleep(0.005)  # the 1 ms lease is over
    assert [o for _, _, o in storage.leases.reap(Q, max_lost=3).items] == ["ready"]
    assert storage.leases.fetch(Q, "w2", "t", 60_000, 1) == []
    assert ztq.ping(h) == "expired"


def test_a_task_with_an_expiry_is_not_handed_to_an_idle_executor(storage: Storage) -> None:
    """The executor's blocked read of the hand list can return late (its idle hooks run
    first) and carries no expiry: a task with one waits in the ready list, for a fetch
    (which checks the expiry); one without is handed over as before."""
    [name, keys, args] = storage.leases.fetch_op(Q, "w1", "t", 60_000, 1, wait_ms=5000)
    assert storage.call(name, keys, args)[0] == 1  # registered as the queue's waiter
    h = t.add.enqueue((1, 2), expires=60)
    assert meta_of(storage, h.id)["state"] == "queued"
    age(storage, h.id)
    assert storage.leases.fetch(Q, "w1", "t", 60_000, 2) == []
    assert ztq.ping(h) == "expired"
    assert storage.call(name, keys, args)[0] == 1  # the waiter again
    plain = t.add.delay(7, 7)
    assert meta_of(storage, plain.id)["state"] == "running"  # handed over


def test_a_rerun_asked_while_it_runs_does_not_inherit_the_expiry(storage: Storage) -> None:
    """An identical enqueue while the task runs asks for one more run: a new series, which
    the first call's expiry does not end (it ran; the rerun runs too)."""
    h = t.add.enqueue((1, 2), expires=60)
    [lease] = storage.leases.fetch(Q, "w1", "t", 60_000, 1)
    age(storage, h.id)
    assert t.add.enqueue((1, 2), expires=3600).outcome == "rerun"
    assert storage.leases.ack(Q, "w1", [Finished(h.id, lease.token, "x", "3")]) == []
    assert "exp" not in meta_of(storage, h.id)
    [again] = storage.leases.fetch(Q, "w1", "t", 60_000, 1)
    assert again.id == h.id and ztq.ping(h) == "running"


def test_an_enqueue_replaces_a_waiting_copy_whose_expiry_passed(storage: Storage) -> None:
    """The earlier copy waits but can never run: the new call is not 'exists' (it would be
    dropped with it); it takes its place with its own expiry, and runs."""
    h = t.add.enqueue((1, 2), expires=60)
    age(storage, h.id)
    again = t.add.enqueue((1, 2), expires=3600)
    assert again.id == h.id and again.outcome == "added"
    assert meta_of(storage, h.id)["exp"] > redis_ms(storage) + 3_000_000
    [lease] = storage.leases.fetch(Q, "w1", "t", 60_000, 5)
    assert lease.id == h.id and ztq.ping(h) == "running"
    assert storage.leases.fetch(Q, "w1", "t", 60_000, 5) == []  # its old entry was a leftover


@pytest.mark.slow
def test_a_fetch_sweeps_expired_records_no_ack_would(storage: Storage) -> None:
    """Tasks that all expire are ended by fetches, and no ack comes to sweep their records:
    fetches do, once their result TTL passed."""
    handles = [t.add.enqueue((i, 0), expires=60) for i in range(30)]
    for h in handles:
        age(storage, h.id)
    [name, keys, args] = storage.leases.fetch_op(Q, "w1", "t", 60_000, 1, result_ttl_ms=1)
    assert storage.call(name, keys, args)[2:] == []  # all ended as expired
    assert storage.client.zcard(storage.keys.done(Q)) == 30
    start = redis_ms(storage)
    while redis_ms(storage) < start + 3:
        pass
    assert storage.leases.fetch(Q, "w1", "t", 60_000, 1) == []
    assert storage.client.hlen(storage.keys.tasks(Q)) == 10  # 20 a call: bounded work
    assert storage.leases.fetch(Q, "w1", "t", 60_000, 1) == []
    assert storage.client.hlen(storage.keys.tasks(Q)) == 0
    assert storage.client.zcard(storage.keys.done(Q)) == 0


def test_an_identical_enqueue_of_an_expired_task_runs_afresh(storage: Storage) -> None:
    h = t.add.enqueue((1, 2), expires=60)
    age(storage, h.id)
    storage.leases.fetch(Q, "w1", "t", 60_000, 1)
    again = t.add.enqueue((1, 2), expires=60)
    assert again.id == h.id and again.outcome == "added"
    assert storage.client.zscore(storage.keys.done(Q), h.id) is None
    [lease] = storage.leases.fetch(Q, "w1", "t", 60_000, 1)
    storage.leases.ack(Q, "w1", [Finished(lease.id, lease.token, "x", "3")])
    assert h.get(timeout=5) == 3


def test_a_redo_of_a_failed_task_clears_its_expiry(storage: Storage) -> None:
    h = t.add.enqueue((1, 2), expires=60)
    [lease] = storage.leases.fetch(Q, "w1", "t", 60_000, 1)
    storage.leases.fail(Q, "w1", lease.id, lease.token, "x", "E: e", "", retry_delay_ms=-1)
    age(storage, h.id)
    assert storage.tasks.requeue(Q, "error", [h.id]) == 1  # the CLI's redo; the console's: redo.lua
    assert "exp" not in meta_of(storage, h.id)
    [lease] = storage.leases.fetch(Q, "w1", "t", 60_000, 1)
    assert lease.id == h.id


def test_an_expired_record_goes_with_its_result_ttl(storage: Storage) -> None:
    h = t.add.enqueue((1, 2), expires=60)
    age(storage, h.id)
    name, keys, args = storage.leases.fetch_op(Q, "w1", "t", 60_000, 1, result_ttl_ms=0)
    storage.call(name, keys, args)
    assert storage.client.hget(storage.keys.tasks(Q), h.id) is None  # dropped at once
    with pytest.raises(TaskExpired):  # the history says how it ended
        h.get(timeout=5)
    other = t.add.enqueue((5, 5), expires=60)
    age(storage, other.id)
    storage.leases.fetch(Q, "w1", "t", 60_000, 1)
    storage.client.zadd(storage.keys.done(Q), {other.id: 0})  # its result ttl ran out
    t.add.delay(9, 9)
    [lease] = storage.leases.fetch(Q, "w1", "t", 60_000, 1)
    storage.leases.ack(Q, "w1", [Finished(lease.id, lease.token, "x", "")])  # cleans old records
    assert storage.client.hget(storage.keys.tasks(Q), other.id) is None
    with pytest.raises((TaskExpired, NotFound)):
        other.get(timeout=5)


def test_options_reach_every_enqueue_path(storage: Storage) -> None:
    @ztq.task(expires=30, name="tests.core.expiring")
    def expiring(n: int) -> int:
        return n

    assert "exp" in meta_of(storage, expiring.delay(1).id)
    assert "exp" in meta_of(storage, expiring.prepare((2,)).enqueue().id)
    assert "exp" not in meta_of(storage, expiring.enqueue((3,), expires=None).id)
    with ztq.transaction():
        tx = t.add.enqueue((8, 8), expires=30)
    assert "exp" in meta_of(storage, tx.id)
    overridden = expiring.enqueue((4,), expires=5)
    m = meta_of(storage, overridden.id)
    assert m["exp"] - m["enqueued"] == 5000


def test_the_doc_examples_run_as_they_say(
    storage: Storage, capsys: pytest.CaptureFixture[str]
) -> None:
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "queue-controls.md").read_text()
    section = text[text.index("## Expiry") :]
    before, after = re.findall(r"^```python\n(.*?)^```", section, re.S | re.M)
    namespace: dict = {"__name__": "docs_queue_controls"}
    exec(compile(before, "docs/queue-controls.md", "exec"), namespace)  # noqa: S102
    said = re.search(r"print\(exc\)  # (.*)", before)
    assert said and capsys.readouterr().out == said.group(1) + "\n"
    h = namespace["h"]
    assert storage.queues.pending_count("mail") == 3
    assert "exp" not in meta_of(storage, namespace["send_reset_mail"].prepare((44,)).resolve_id(),
                                "mail")  # fmt: skip
    age(storage, h.id, "mail")  # the hour passed; a worker's fetch meets it
    assert [x.id for x in storage.leases.fetch("mail", "w", "t", 60_000, 5)] != [h.id]
    exec(compile(after, "docs/queue-controls.md", "exec"), namespace)  # noqa: S102


def test_aenqueue_and_callbacks_carry_the_expiry(storage: Storage) -> None:
    import asyncio

    from ztq.core.client.calls import TaskCall

    async def send() -> str:
        h = await t.add.aenqueue((6, 7), expires=45)
        return h.id

    task_id = asyncio.run(send())
    m = meta_of(storage, task_id)
    assert m["exp"] - m["enqueued"] == 45_000
    cb = t.add.prepare((1,), expires=timedelta(seconds=90), pass_result=True)
    parent = t.add.prepare((2, 3), callback=cb)
    again = TaskCall.from_dict(parent.to_dict()).callback
    assert again is not None and again.expires == 90 and again.expires_ms() == 90_000
