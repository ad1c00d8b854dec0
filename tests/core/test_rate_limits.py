"""A queue's rate limit (``configure_queue(q, rate_limit="N/s")``): the fetch script (and the
enqueue's hand-over to an idle executor) takes no more tokens than GCRA on Redis's clock
allows; a throttled fetch returns when the next token comes, to one executor only; a
throttled task waits in its queue, never failed or retried. Worker processes sharing a
rate: tests/worker/test_rate_limit.py; the model: tests/core/test_state_machine.py."""

from __future__ import annotations

import math
import time
from types import SimpleNamespace

import pytest

import ztq.core as ztq
from ztq.core.engine.queue_limits import Rate
from ztq.core.engine.storage import EnqueueEntry, Finished, Storage
from ztq.core.errors import InvalidOption

Q = "payments"


def fill(storage: Storage, n: int, prefix: str = "t") -> list[str]:
    ids = [f"{prefix}{i}" for i in range(n)]
    payload = '{"task":"tests.sample_tasks.noop","args":[],"kwargs":{}}'
    storage.call(*storage.tasks.enqueue_op(Q, [EnqueueEntry(i, payload) for i in ids]))
    return ids


def redis_ms(storage: Storage) -> int:
    node = storage.client.get_node_from_key(storage.keys.rate(Q)) if storage.is_cluster else None
    secs, micros = storage.client.time(target_nodes=node) if node else storage.client.time()
    return int(secs) * 1000 + int(micros) // 1000


def test_the_forms_accepted_and_the_one_line_refusal() -> None:
    assert Rate.parse("20/s") == Rate(20, "s", 1)
    assert Rate.parse("100/m burst 10") == Rate(100, "m", 10)
    assert str(Rate.parse(" 5 / h  burst 3 ")) == "5/h burst 3"
    assert Rate.parse("200/s").bound(2.0) == 401
    for bad in ["20", "20/d", "0/s", "-1/s", "1.5/s", "20/s burst 0", "20/sec", 20, "", None]:
        with pytest.raises(InvalidOption, match=r"'N/s', 'N/m' or 'N/h'") as err:
            Rate.parse(bad)
        assert "\n" not in str(err.value)


def test_a_fetch_takes_the_tokens_there_are_and_names_the_next_one(storage: Storage) -> None:
    fill(storage, 6)
    ztq.configure_queue(Q, rate_limit="2/s burst 3")
    assert storage.queues.queue_config(Q) == {"rate_limit": "2/s burst 3"}
    got = storage.leases.fetch(Q, "w1", "t", 60_000, 10)
    assert [g.id for g in got] == ["t0", "t1", "t2"]  # the burst, in order
    op = storage.leases.fetch_op(Q, "w2", "t", 60_000, 10)
    reply = storage.call(*op)
    assert storage.leases.parse_fetch(Q, reply) == []
    wait = storage.leases.fetch_throttled(reply)
    assert wait is not None and 0 < wait <= 0.5  # one token each 500 ms
    # a second idle executor is not told the instant: it sleeps until woken
    reply = storage.call(*storage.leases.fetch_op(Q, "w3", "t", 60_000, 10))
    assert storage.leases.fetch_throttled(reply) == math.inf
    assert storage.queues.pending_count(Q) == 3  # the throttled tasks wait in the queue
    assert storage.tasks.record(Q, "t3").state == "queued"  # type: ignore[union-attr]
    assert int(storage.client.hget(storage.keys.totals(Q), "throttled")) == 2


@pytest.mark.slow
def test_the_bound_holds_on_redis_time(storage: Storage) -> None:
    """Fetching as fast as possible for over a second: the starts (the records' `started`,
    Redis's clock) in any window of W ms number at most W x rate + burst."""
    fill(storage, 400)
    rate = Rate.parse("100/s burst 5")
    ztq.configure_queue(Q, rate_limit=str(rate))
    taken: list[str] = []
    begin = redis_ms(storage)
    # nothing but the fetches in the loop (the records are read after it): a token left
    # unused for longer than the burst lasts (50 ms) is lost; and on past 1.2 s until 100
    # started: a loaded machine (or the in-memory engine's interpreted Lua) may not ask
    # often enough in 1.2 s to take every token there is
    while (redis_ms(storage) - begin < 1200 or len(taken) < 100) and len(taken) < 400:
        taken += [lease.id for lease in storage.leases.fetch(Q, "w1", "t", 60_000, 50)]
    elapsed = (redis_ms(storage) - begin) / 1000
    starts = sorted(int(storage.tasks.record(Q, i).meta["started"]) for i in taken)  # type: ignore[union-attr]
    assert 100 <= len(starts) <= rate.bound(elapsed) + 1
    for i, s in enumerate(starts):
        in_window = sum(1 for x in starts[i:] if x - s <= 1000)
        assert in_window <= rate.bound(1.0)


def test_lifting_the_limit_wakes_the_idle_executors(storage: Storage) -> None:
    fill(storage, 5)
    ztq.configure_queue(Q, rate_limit="1/h")
    assert len(storage.leases.fetch(Q, "w1", "t", 60_000, 10)) == 1
    reply = storage.call(*storage.leases.fetch_op(Q, "w1", "t", 60_000, 10))
    assert 3590 < (storage.leases.fetch_throttled(reply) or 0) <= 3600
    storage.client.delete(storage.keys.wake(Q))
    ztq.configure_queue(Q, rate_limit=None)
    assert storage.queues.queue_config(Q) == {}
    assert storage.client.llen(storage.keys.wake(Q)) >= 1  # the sleeper is woken now
    assert storage.waits.wait([Q], 0.5)
    assert len(storage.leases.fetch(Q, "w1", "t", 60_000, 10)) == 4


def test_keep_semantics_and_bad_values(storage: Storage) -> None:
    ztq.configure_queue(Q, rate_limit="3/m", max_running=2)
    ztq.configure_queue(Q, max_running=None)  # the rate is kept
    assert storage.queues.queue_config(Q) == {"rate_limit": "3/m"}
    with pytest.raises(InvalidOption, match="rate_limit must be"):
        ztq.configure_queue(Q, rate_limit="3 per minute")
    assert storage.queues.queue_config(Q) == {"rate_limit": "3/m"}


def test_the_hand_over_to_an_idle_executor_takes_a_token(storage: Storage) -> None:
    ztq.configure_queue(Q, rate_limit="1/h")
    reply = storage.call(*storage.leases.fetch_op(Q, "w1", "t", 60_000, 1, 5_000))
    assert storage.leases.fetch_registered(reply)  # empty queue: w1 waits to be handed a task
    fill(storage, 1, "a")
    got = storage.waits.wait_handed(Q, "w1", "t", 1.0)
    assert not isinstance(got, bool) and got is not None and got.id == "a0"  # the one token
    storage.leases.ack(Q, "w1", [Finished(got.id, got.token, "x", "")])
    reply = storage.call(*storage.leases.fetch_op(Q, "w1", "t", 60_000, 1, 5_000))
    assert storage.leases.fetch_registered(reply)
    fill(storage, 1, "b")  # no token left: not handed over, waits in ready
    assert storage.client.llen(storage.keys.hand(Q)) == 0
    assert storage.queues.pending_count(Q) == 1
    assert storage.tasks.record(Q, "b0").state == "queued"  # type: ignore[union-attr]


def test_no_wake_up_while_an_executor_sleeps_until_the_next_token(storage: Storage) -> None:
    fill(storage, 2)
    ztq.configure_queue(Q, rate_limit="1/h")
    storage.leases.fetch(Q, "w1", "t", 60_000, 10)
    reply = storage.call(*storage.leases.fetch_op(Q, "w2", "t", 60_000, 10))
    assert (storage.leases.fetch_throttled(reply) or 0) > 1  # w2 sleeps until the token
    storage.client.delete(storage.keys.wake(Q))
    fill(storage, 3, "n")  # new work: nobody else is woken for it (no early wake-up)
    assert storage.client.llen(storage.keys.wake(Q)) == 0


# -- a task's own rate limit (@task(rate_limit=...)) -------------------------------------------
def call(storage: Storage, *tasks: tuple[str, str]) -> None:
    """Enqueue (id, task name) pairs in order, payloads in ztq's list form."""
    entries = [EnqueueEntry(i, f'["{name}",[]]') for i, name in tasks]
    storage.call(*storage.tasks.enqueue_op(Q, entries))


def test_a_task_limit_holds_its_tasks_and_not_the_others(storage: Storage) -> None:
    storage.queues.task_rates(Q, {"api": Rate(1, "h", 2), "other": None})
    assert storage.queues.queue_config(Q) == {"task_rates": {"api": "1/h burst 2"}}
    call(storage, ("a1", "api"), ("a2", "api"), ("a3", "api"), ("b1", "other"),
         ("a4", "api"), ("b2", "other"))  # fmt: skip
    got = storage.leases.fetch(Q, "w1", "t", 60_000, 10)
    assert [g.id for g in got] == ["a1", "a2", "b1", "b2"]  # the others are not held up
    now = redis_ms(storage)
    held = dict(storage.client.zrange(storage.keys.delayed(Q), 0, -1, withscores=True))
    assert set(held) == {"a3", "a4"}  # each until the token reserved for it, in order
    assert 0 < held["a3"] - now <= 3_600_000 < held["a4"] - now <= 7_200_000
    for i in ("a3", "a4"):
        rec = storage.tasks.record(Q, i)
        assert rec is not None and rec.state == "queued"  # waiting in its queue, as ping says
        assert rec.meta.get("attempts") is None and rec.meta.get("failures") is None
    assert ztq.ping("a3", Q) == "queued"
    assert storage.leases.fetch(Q, "w1", "t", 60_000, 10) == []
    from ztq.core.monitor import overview

    [row] = overview.queues(storage, [Q], 30)
    assert (row["task_rates"], row["rate_held"]) == ({"api": "1/h burst 2"}, 2)
    storage.queues.task_rates(Q, {"api": None})  # a worker whose task has no limit any more
    assert storage.queues.queue_config(Q) == {}


def test_held_tasks_come_back_at_the_head_in_their_order(storage: Storage) -> None:
    storage.queues.task_rates(Q, {"api": Rate(4, "s", 1)})  # a token each 250 ms
    call(storage, ("a1", "api"), ("a2", "api"), ("a3", "api"), ("b1", "other"))
    assert [g.id for g in storage.leases.fetch(Q, "w1", "t", 60_000, 10)] == ["a1", "b1"]
    call(storage, ("c1", "other"))  # arrived after them: runs after them
    dues = [s for _, s in storage.client.zrange(storage.keys.delayed(Q), 0, -1,
                                                withscores=True)]  # fmt: skip
    while redis_ms(storage) < dues[0]:  # a2's token's time, on Redis's clock
        time.sleep(0.005)
    assert storage.tasks.promote(Q).moved >= 1
    got = storage.leases.fetch(Q, "w1", "t", 60_000, 10)
    if [g.id for g in got][:2] == ["a2", "a3"]:  # a slow machine: a3's time came too
        assert [g.id for g in got] == ["a2", "a3", "c1"]
    else:  # their tokens were theirs already: a2 before c1, a3 still held
        assert [g.id for g in got] == ["a2", "c1"]
    assert all(int(storage.tasks.record(Q, g.id).meta["attempts"]) == 1 for g in got)  # type: ignore[union-attr]


def test_a_queue_with_task_limits_hands_nothing_over(storage: Storage) -> None:
    storage.queues.task_rates(Q, {"api": Rate(1, "h")})
    reply = storage.call(*storage.leases.fetch_op(Q, "w1", "t", 60_000, 1, 5_000))
    assert storage.leases.fetch_registered(reply)
    call(storage, ("a1", "api"))
    assert storage.client.llen(storage.keys.hand(Q)) == 0  # woken instead: the fetch checks
    assert storage.client.llen(storage.keys.wake(Q)) >= 1
    assert [g.id for g in storage.leases.fetch(Q, "w1", "t", 60_000, 1)] == ["a1"]
    call(storage, ("a2", "api"))
    assert storage.leases.fetch(Q, "w1", "t", 60_000, 1) == []  # held: 1/h
    assert storage.tasks.record(Q, "a2").state == "queued"  # type: ignore[union-attr]


@pytest.mark.slow
def test_a_held_task_that_starts_keeps_no_mark(storage: Storage) -> None:
    """Once leased, a held task is an ordinary run: a retry later is a plain delayed task
    (shown as delayed, back at the tail), and its waiting time counts from its enqueue."""
    storage.queues.task_rates(Q, {"api": Rate(20, "s", 1)})
    call(storage, ("a1", "api"), ("a2", "api"))
    storage.leases.fetch(Q, "w1", "t", 60_000, 10)
    assert storage.tasks.record(Q, "a2").meta.get("held") == 1  # type: ignore[union-attr]
    storage.tasks.requeue(Q, "delayed", ["a2"])  # run now
    [lease] = storage.leases.fetch(Q, "w1", "t", 60_000, 10)
    meta = storage.tasks.record(Q, "a2").meta  # type: ignore[union-attr]
    assert lease.id == "a2" and "held" not in meta and "due" not in meta
    assert storage.leases.fail(Q, "w1", "a2", lease.token, "api", "E: x", "", retry_delay_ms=60_000)
    assert storage.tasks.record(Q, "a2").state == "delayed"  # type: ignore[union-attr]


def test_a_raised_rate_carries_the_starts_owed_into_its_period(storage: Storage) -> None:
    """1/m, one start: the next token is a minute away; raised to 100/s, the start owed is
    10 ms in the new period (the minute's wait was kept)."""
    fill(storage, 3)
    ztq.configure_queue(Q, rate_limit="1/m")
    assert len(storage.leases.fetch(Q, "w1", "t", 60_000, 10)) == 1
    ztq.configure_queue(Q, rate_limit="100/s")
    start = redis_ms(storage)
    while redis_ms(storage) < start + 15:
        pass
    assert len(storage.leases.fetch(Q, "w1", "t", 60_000, 1)) == 1
    ztq.configure_queue(Q, rate_limit="100/s burst 2")  # the same period: kept as it is
    tat = float(storage.client.hget(storage.keys.rate(Q), "tat"))
    assert tat - redis_ms(storage) <= 20


def test_a_thread_waiting_for_a_far_token_reads_the_wake_lists_again() -> None:
    """A blocking read is capped (8 s): a thread whose token is farther away reads again,
    so a stop, or work of another queue, still reaches it (it slept out the rest of the
    wait, deaf to both)."""
    import threading

    from ztq.worker.executors.throttle import wait_for_token

    class Reads:
        def __init__(self) -> None:
            self.calls: list[float] = []

        def wait(self, queues: list[str], seconds: float) -> bool:
            self.calls.append(seconds)
            return len(self.calls) == 3  # the third read is woken

    reads = Reads()
    retired = threading.Event()
    started = time.monotonic()
    storage = SimpleNamespace(waits=reads)  # the storage's part it waits with
    wait_for_token(storage, ["a", "b"], 30.0, retired, lambda: False)  # type: ignore[arg-type]
    assert len(reads.calls) == 3 and time.monotonic() - started < 1
    stopping = Reads()
    storage = SimpleNamespace(waits=stopping)
    wait_for_token(storage, ["a"], 30.0, retired, lambda: len(stopping.calls) >= 2)  # type: ignore[arg-type]
    assert len(stopping.calls) == 2


def test_held_tasks_whose_slots_passed_do_not_start_together(storage: Storage) -> None:
    """Held tasks promoted long after their tokens (a paused queue, every thread busy)
    would all start at once, over the bound: each reserves a token anew instead."""
    import json

    from ztq.core.engine.record import split_record

    storage.queues.task_rates(Q, {"api": Rate(1, "h", 1)})
    call(storage, ("a1", "api"), ("a2", "api"), ("a3", "api"))
    assert [g.id for g in storage.leases.fetch(Q, "w1", "t", 60_000, 10)] == ["a1"]
    past = redis_ms(storage) - 3 * 3_600_000  # their slots passed hours ago
    for i in ("a2", "a3"):
        meta, payload = split_record(str(storage.client.hget(storage.keys.tasks(Q), i)))
        meta["due"] = past
        storage.client.hset(storage.keys.tasks(Q), i, json.dumps(meta) + "\n" + payload)
        storage.client.zadd(storage.keys.delayed(Q), {i: past})
    assert storage.tasks.promote(Q).moved == 2
    assert storage.leases.fetch(Q, "w1", "t", 60_000, 10) == []  # held again, each for a new token
    held = storage.client.zrange(storage.keys.delayed(Q), 0, -1, withscores=True)
    assert [i for i, _ in held] == ["a2", "a3"] and held[0][1] > redis_ms(storage)


def test_an_executor_that_took_other_work_leaves_its_registration(storage: Storage) -> None:
    """Registered for the next token, a thread serving two queues ran the other queue's
    task: the token went unused until an idle wait ended (a 2/s drain took 10 s, not 5.5).
    It leaves the registration, only its own, and wakes an idle executor to take it."""
    fill(storage, 3)
    ztq.configure_queue(Q, rate_limit="1/h")
    assert len(storage.leases.fetch(Q, "w1", "t", 60_000, 10)) == 1
    reply = storage.call(*storage.leases.fetch_op(Q, "w1", "mixed", 60_000, 10))
    assert 0 < storage.leases.fetch_throttled(reply) < math.inf  # registered for the next token
    storage.client.delete(storage.keys.wake(Q))
    assert not storage.queues.rate_leave(Q, "w2", "other")  # not its registration: left alone
    assert storage.client.hget(storage.keys.rate(Q), "who") == "w1\tmixed"
    assert storage.queues.rate_leave(Q, "w1", "mixed")
    assert storage.client.hget(storage.keys.rate(Q), "who") is None
    assert storage.client.llen(storage.keys.wake(Q)) == 1  # an idle executor is woken
    reply = storage.call(*storage.leases.fetch_op(Q, "w2", "t", 60_000, 10))
    assert 0 < storage.leases.fetch_throttled(reply) < math.inf  # and registers in its place


def test_the_executor_leaves_the_tokens_it_registered_for() -> None:
    from ztq.worker.executors.throttle import Tokens

    class Calls:
        def __init__(self) -> None:
            self.left: list[tuple[str, str, str]] = []

        def fetch_throttled(self, reply: list[int]) -> float | None:
            return None if reply[0] < 3 else reply[2] / 1000

        def rate_leave(self, queue: str, worker: str, thread: str) -> bool:
            self.left.append((queue, worker, thread))
            return True

    calls, tokens = Calls(), Tokens()
    storage = SimpleNamespace(leases=calls, queues=calls)  # the parts the tokens use
    tokens.note(storage, "a", [3, "r", 800])  # type: ignore[arg-type]
    tokens.note(storage, "b", [0, "r"])  # type: ignore[arg-type]
    assert tokens.wait == 0.8 and tokens.queues == ["a"]
    tokens.leave(storage, "w1", "mixed")  # type: ignore[arg-type]
    assert calls.left == [("a", "w1", "mixed")] and tokens.pop() is None
