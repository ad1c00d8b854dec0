"""Per-key limits and fair turns (docs/queue-controls.md, "Per-key limits and fair turns"):
a task's key is checked at enqueue and stored; the keys of a queue take turns at every fetch;
a key at its running limit or out of tokens is parked without holding up the others, and
its slot frees with the lease (ack, fail, release, reap). On Redis 7, 6.2 and Cluster.
Worker processes and a SIGKILL: tests/worker/test_keys_workers.py."""

from __future__ import annotations

import math
import time

import pytest

import ztq.core as ztq
from tests.core.test_rate_limits import redis_ms
from tests.key_tasks import Q, call_api, crawl, own_rate, plain, send_mail
from ztq.core.client.batch import relay
from ztq.core.engine.storage import Finished, Leased, Storage
from ztq.core.errors import InvalidOption


def take(storage: Storage, n: int = 1, worker: str = "w1", lease_ms: int = 60_000) -> list[Leased]:
    return storage.leases.fetch(Q, worker, "t", lease_ms, n)


def ack(storage: Storage, leases: list[Leased], worker: str = "w1") -> None:
    assert storage.leases.ack(Q, worker, [Finished(x.id, x.token, "t") for x in leases]) == []


def key_of(storage: Storage, lease: Leased) -> str:
    return storage.tasks.record(Q, lease.id).meta["key"]  # type: ignore[union-attr]


def test_the_key_is_checked_at_enqueue_and_stored(storage: Storage) -> None:
    h = send_mail.delay("acme", 1)
    assert storage.tasks.record(Q, h.id).meta["key"] == "acme"  # type: ignore[union-attr]
    assert crawl.prepare(("example.org",)).key == "host:example.org"
    assert send_mail.prepare(("x", 1), key="other").key == "other"
    assert send_mail.prepare((7, 1)).key == "7"  # an int argument is written as a str
    for bad in ["", "x" * 129, "a\nb", None, 3.5]:
        with pytest.raises(InvalidOption, match="key must be a str of 1 to 128") as err:
            send_mail.delay(bad, 2)
        assert "\n" not in str(err.value)
    with pytest.raises(InvalidOption, match="key must be"):
        plain.enqueue((1,), key="\x00")
    assert storage.queues.pending_count(Q) == 1  # nothing written by the refused ones
    with pytest.raises(InvalidOption, match="concurrency must be an int >= 1"):
        ztq.task(queue=Q, key="a", concurrency=0)(lambda a: None)
    with pytest.raises(InvalidOption, match="rate_limit must be"):
        ztq.task(queue=Q, key="a", rate_limit="fast per key")(lambda a: None)


def test_a_keyed_task_with_its_own_rate_limit_is_refused_not_ignored(storage: Storage) -> None:
    """The keyed fetch checks each key's rate, not a task's own: a key with a task-wide
    rate_limit would silently run past it, so it is refused with one line, nothing sent."""
    with pytest.raises(InvalidOption, match=r"would not be enforced: write '20/s per key'"):
        ztq.task(queue=Q, key="account", rate_limit="20/s")(lambda account: None)
    for call in (lambda: own_rate.enqueue(("acme",), key="acme"),
                 lambda: own_rate.prepare(("acme",), key="acme")):  # fmt: skip
        with pytest.raises(InvalidOption, match="rate_limit='20/s' would not be enforced"):
            call()
    assert storage.queues.pending_count("own-rate") == 0
    assert own_rate.delay("acme").id  # without a key it goes as before
    assert storage.queues.pending_count("own-rate") == 1


@pytest.mark.slow
def test_keys_take_turns_a_small_key_is_not_behind_a_big_one(storage: Storage) -> None:
    for i in range(50):
        send_mail.enqueue(("big", i), key_concurrency=None)
    for i in range(3):
        send_mail.enqueue(("small", i), key_concurrency=None)
    plain.delay(1)
    order = []
    for _ in range(8):
        (lease,) = take(storage)
        order.append(storage.tasks.record(Q, lease.id).meta.get("key"))  # type: ignore[union-attr]
        ack(storage, [lease])
    # the key-less task first (its own lists), then big and small in turn
    assert order == [None, "big", "small", "big", "small", "big", "small", "big"]
    assert storage.queues.pending_count(Q) == 54 - 8


@pytest.mark.slow
def test_a_key_at_its_limit_does_not_hold_up_the_others(storage: Storage) -> None:
    for i in range(5):
        send_mail.delay("a", i)  # at most 2 of "a" at once
    for i in range(5):
        send_mail.delay("b", i)
    got = take(storage, 10)
    keys = [key_of(storage, x) for x in got]
    assert keys.count("a") == 2 and keys.count("b") == 2  # both at their limit of 2
    assert take(storage, 10, "w2") == []  # parked: no fetch takes more
    a = [x for x in got if key_of(storage, x) == "a"]
    ack(storage, a[:1])  # a slot of "a" frees: "a" is back in turn
    (again,) = take(storage, 10, "w2")
    assert key_of(storage, again) == "a"
    # a failure frees a slot too, and so does a release
    b = [x for x in got if key_of(storage, x) == "b"]
    storage.leases.fail(Q, "w1", b[0].id, b[0].token, "t", "E: x", "")
    assert [key_of(storage, x) for x in take(storage, 10, "w3")] == ["b"]
    assert storage.leases.release(Q, "w1", [(b[1].id, b[1].token)]) == 1
    assert [key_of(storage, x) for x in take(storage, 10, "w3")] == ["b"]


def test_a_dead_workers_slot_frees_when_its_lease_is_reaped(storage: Storage) -> None:
    for i in range(3):
        send_mail.delay("a", i)
    got = take(storage, 10, lease_ms=50)
    assert len(got) == 2
    assert take(storage, 10, "w2") == []
    deadline = time.monotonic() + 5
    while not storage.leases.reap(Q, max_lost=5).items and time.monotonic() < deadline:
        time.sleep(0.02)
    again = take(storage, 10, "w2")
    assert len(again) == 2  # the two reaped leases freed their slots: 2 of the 3 run
    # the dead worker's late ack is refused (fenced) and frees nothing twice
    assert storage.leases.ack(Q, "w1", [Finished(x.id, x.token, "t") for x in got]) != []
    assert take(storage, 10, "w3") == []
    ack(storage, again, "w2")
    assert len(take(storage, 10, "w3")) == 1


def test_dedup_delete_first_and_expiry_keep_their_meaning(storage: Storage) -> None:
    h1 = send_mail.delay("a", 1)
    assert send_mail.delay("a", 1).outcome == "exists"  # the same MD5 id: one task
    h2 = send_mail.delay("a", 2)
    h3 = send_mail.enqueue(("a", 3), first=True)  # the head of its key
    assert h2.cancel()
    assert storage.queues.pending_count(Q) == 2
    order = [x.id for x in take(storage, 10)]
    assert order == [h3.id, h1.id]
    h4 = send_mail.enqueue(("c", 1), expires=0.05)
    time.sleep(0.1)  # the expiry passes (Redis's clock)
    assert take(storage, 10, "w2") == []
    assert storage.tasks.record(Q, h4.id).state == "expired"  # type: ignore[union-attr]
    assert storage.queues.pending_count(Q) == 0


@pytest.mark.slow
def test_a_per_key_rate_takes_the_tokens_there_are_and_names_the_next(storage: Storage) -> None:
    for i in range(4):
        call_api.delay("x", i)  # 5/s per key: one token each 200 ms
        call_api.delay("y", i)
    # three fetches back to back in one round trip: none of the 200 ms passes between them,
    # however slow the machine
    replies = storage.execute(
        [storage.leases.fetch_op(Q, w, "t", 60_000, 10) for w in ("w1", "w2", "w3")]
    )
    got = storage.leases.parse_fetch(Q, replies[0])
    assert sorted(key_of(storage, x) for x in got) == ["x", "y"]  # a token each, no more
    assert storage.leases.parse_fetch(Q, replies[1]) == []
    wait = storage.leases.fetch_throttled(replies[1])
    assert wait is not None and 0 < wait <= 0.2  # this executor fetches at the next token
    assert storage.leases.fetch_throttled(replies[2]) == math.inf  # another one sleeps until woken
    time.sleep(wait)
    assert sorted(key_of(storage, x) for x in take(storage, 10, "w2")) == ["x", "y"]
    assert storage.queues.pending_count(Q) == 4  # the throttled ones wait, never failed


@pytest.mark.slow
def test_a_per_key_rate_holds_over_every_window(storage: Storage) -> None:
    for i in range(40):
        call_api.delay("x", i)
        call_api.delay("y", i)
    plain.delay(1)  # a task without a key is not held by them
    starts: dict[str, list[int]] = {"x": [], "y": []}
    begin = redis_ms(storage)
    # 1.3 s, and on until each key started 6: a loaded machine (or the in-memory engine's
    # interpreted Lua) may fetch too seldom to take every token in 1.3 s
    while redis_ms(storage) - begin < 1300 or min(map(len, starts.values())) < 6:
        assert redis_ms(storage) - begin < 20_000, starts
        for lease in take(storage, 20):
            rec = storage.tasks.record(Q, lease.id)
            assert rec is not None
            if "key" in rec.meta:
                starts[rec.meta["key"]].append(int(rec.meta["started"]))
            ack(storage, [lease])
    elapsed = (redis_ms(storage) - begin) / 1000
    for times in starts.values():
        assert 6 <= len(times) <= 5 * elapsed + 2
        for i, s in enumerate(times):
            assert sum(1 for t in times[i:] if t - s < 1000) <= 5 + 1


@pytest.mark.slow
def test_the_doc_example_runs_as_it_says(
    storage: Storage, capsys: pytest.CaptureFixture[str]
) -> None:
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "queue-controls.md").read_text()
    section = text[text.index("## Per-key limits and fair turns") :]
    section = section[: section.index("\n### ")]
    [example] = re.findall(r"^```python\n(.*?)^```", section, re.S | re.M)
    exec(compile(example, "docs/queue-controls.md", "exec"), {"__name__": "docs_keys"})  # noqa: S102
    said = re.findall(r"^print\(.*\)\n# (.*)", example, re.M)
    assert capsys.readouterr().out.splitlines() == [said[0].split(":")[0], said[1]]
    assert storage.queues.queue_limits("mailer").key_concurrency == 10


def test_a_queue_with_keyed_tasks_is_not_forgotten(storage: Storage) -> None:
    h = send_mail.delay("acme", 1)
    assert storage.queues.forget_idle_queue(Q) == f"{Q} holds 1 keys with tasks waiting"
    [lease] = take(storage)
    assert storage.queues.forget_idle_queue(Q).startswith(f"{Q} holds 1 ")  # running
    ack(storage, [lease])
    storage.tasks.remove(Q, [h.id])
    assert storage.queues.forget_idle_queue(Q) == ""
    assert not [k for k in storage.client.scan_iter(match=f"ztq:{{{Q}}}:k:[!r]*")]


@pytest.mark.slow
def test_an_executor_that_took_other_work_leaves_a_keys_next_token(storage: Storage) -> None:
    from tests.key_tasks import slow_api

    slow_api.delay("x", 1)
    slow_api.delay("x", 2)  # 1/m per key: the second waits a minute
    assert len(take(storage, 10)) == 1
    reply = storage.call(*storage.leases.fetch_op(Q, "w2", "t", 60_000, 10))
    assert 0 < (storage.leases.fetch_throttled(reply) or 0) <= 60  # w2 is registered for it
    assert storage.queues.rate_leave(Q, "w3", "t") is False  # not w3's: left as it is
    assert storage.queues.rate_leave(Q, "w2", "t")  # w2 took other work: it leaves the token
    reply = storage.call(*storage.leases.fetch_op(Q, "w3", "t", 60_000, 10))
    assert 0 < (storage.leases.fetch_throttled(reply) or 0) <= 60  # w3 registers in its place


@pytest.mark.slow
def test_delays_retries_and_the_pending_limit_keep_their_meaning(storage: Storage) -> None:
    h = send_mail.enqueue(("a", 1), delay=0.05)  # delayed, then its key's turn
    send_mail.delay("b", 1)
    assert [key_of(storage, x) for x in take(storage, 10)] == ["b"]
    deadline = time.monotonic() + 5
    while storage.tasks.promote(Q).moved == 0 and time.monotonic() < deadline:
        time.sleep(0.01)  # its due time passes on Redis's clock
    [lease] = take(storage, 10)
    assert lease.id == h.id
    # a failed run retried later: its slot frees at the failure, it waits in `delayed`,
    # and comes back to its key's list
    assert (
        storage.leases.fail(Q, "w1", h.id, lease.token, "t", "E: x", "", retry_delay_ms=1)
        == "retry"
    )
    while storage.tasks.promote(Q).moved == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    [again] = take(storage, 10)
    assert again.id == h.id and again.failures == 1
    # the pending limit counts keyed tasks waiting
    ztq.configure_queue(Q, max_pending=2)
    send_mail.delay("c", 1)
    send_mail.delay("c", 2)
    with pytest.raises(ztq.QueueFull):
        send_mail.delay("d", 1)
    ztq.configure_queue(Q, when_full="buffer")
    assert send_mail.delay("d", 1).state.value == "overflow"
    take(storage, 1, "w3")  # room made: the buffered one enters its key's list
    assert [key_of(storage, x) for x in take(storage, 10, "w4")] == ["c", "d"]


def test_a_batch_member_with_a_key_ends_its_batch(storage: Storage) -> None:
    with ztq.batch() as b:
        send_mail.delay("a", 1)
    [lease] = take(storage)
    ack(storage, [lease])
    from ztq.core.client.batch import relay

    relay(storage, [Q])
    assert b.status().done == 1 and b.status().state == "success"


def test_a_purge_of_ready_takes_the_keyed_tasks_too(storage: Storage) -> None:
    """``pending_count`` (and the console's "Delete all ready" confirmation) counts the tasks
    waiting in their keys' lists: the purge takes every one it counted, a batch member among
    them ends its batch, and the keys come out of the rotation as they run dry."""
    plain.delay(1)
    for n in range(5):
        send_mail.delay("acme", n)
    send_mail.enqueue(("beta", 1), priority="high")
    stale = send_mail.delay("beta", 2)
    assert stale.cancel()  # a leftover entry in beta's list: dropped, not counted
    with ztq.batch() as b:
        member = send_mail.delay("gamma", 1)
    assert storage.queues.pending_count(Q) == 8
    deleted, taken = storage.tasks.remove(Q, purge="ready", limit=3)
    assert (deleted, taken) == (3, 3)
    total = deleted
    while taken:
        deleted, taken = storage.tasks.remove(Q, purge="ready", limit=3)
        total += deleted
    assert total == 8
    assert storage.queues.pending_count(Q) == 0
    assert storage.tasks.record(Q, member.id) is None
    relay(storage, [Q])
    assert b.status().failed == 1
    assert take(storage, 10) == []
    h = send_mail.delay("acme", 99)  # the key takes its turn again
    assert [x.id for x in take(storage, 10)] == [h.id]


def test_a_weighted_key_takes_its_weight_in_tasks_each_turn(storage: Storage) -> None:
    """An operator's weight W: the key takes W tasks in a row each turn, the others one,
    across fetches of any size; parked or dry, its next turn starts afresh; 1 clears it."""
    for n in range(12):  # crawl has no running limit: each fetch below acks before the next
        for host in ("gold", "tin", "zinc"):
            crawl.delay(host, n)  # key "host:<host>"
    storage.key_turns.weigh_key(Q, "host:gold", 3)
    [gold] = [k for k in storage.key_turns.key_totals(Q).top if k.key == "host:gold"]
    assert gold.weight == 3
    order = []
    for size in (1, 2, 1, 4, 2):  # one-by-one and batched fetches see the same turns
        got = take(storage, size)
        order += [key_of(storage, x)[5:] for x in got]
        ack(storage, got)
    turn = ["gold", "gold", "gold", "tin", "zinc"]
    assert order == turn * 2, order
    storage.key_turns.weigh_key(Q, "host:gold", 1)  # back to one a turn
    got = take(storage, 6)
    assert [key_of(storage, x)[5:] for x in got] == ["gold", "tin", "zinc"] * 2
    for bad in (0, 1001, 2.5, "3", True):
        with pytest.raises(InvalidOption, match="weight is an int from 1 to 1000"):
            storage.key_turns.weigh_key(Q, "gold", bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidOption, match="key must be"):
        storage.key_turns.weigh_key(Q, "a\nb", 2)
