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
from tests.key_tasks import Q, call_api, crawl, own_rate, plain, send_mail
from ztq.core.engine.storage import Finished, Leased, Storage
from ztq.core.errors import InvalidOption


def take(storage: Storage, n: int = 1, worker: str = "w1", lease_ms: int = 60_000) -> list[Leased]:
    return storage.fetch(Q, worker, "t", lease_ms, n)


def ack(storage: Storage, leases: list[Leased], worker: str = "w1") -> None:
    assert storage.ack(Q, worker, [Finished(x.id, x.token, "t") for x in leases]) == []


def key_of(storage: Storage, lease: Leased) -> str:
    return storage.record(Q, lease.id).meta["key"]  # type: ignore[union-attr]


def test_the_key_is_checked_at_enqueue_and_stored(storage: Storage) -> None:
    h = send_mail.delay("acme", 1)
    assert storage.record(Q, h.id).meta["key"] == "acme"  # type: ignore[union-attr]
    assert crawl.prepare(("example.org",)).key == "host:example.org"
    assert send_mail.prepare(("x", 1), key="other").key == "other"
    assert send_mail.prepare((7, 1)).key == "7"  # an int argument is written as a str
    for bad in ["", "x" * 129, "a\nb", None, 3.5]:
        with pytest.raises(InvalidOption, match="key must be a str of 1 to 128") as err:
            send_mail.delay(bad, 2)
        assert "\n" not in str(err.value)
    with pytest.raises(InvalidOption, match="key must be"):
        plain.enqueue((1,), key="\x00")
    assert storage.pending_count(Q) == 1  # nothing written by the refused ones
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
    assert storage.pending_count("own-rate") == 0
    assert own_rate.delay("acme").id  # without a key it goes as before
    assert storage.pending_count("own-rate") == 1


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
        order.append(storage.record(Q, lease.id).meta.get("key"))  # type: ignore[union-attr]
        ack(storage, [lease])
    # the key-less task first (its own lists), then big and small in turn
    assert order == [None, "big", "small", "big", "small", "big", "small", "big"]
    assert storage.pending_count(Q) == 54 - 8


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
    storage.fail(Q, "w1", b[0].id, b[0].token, "t", "E: x", "")
    assert [key_of(storage, x) for x in take(storage, 10, "w3")] == ["b"]
    assert storage.release(Q, "w1", [(b[1].id, b[1].token)]) == 1
    assert [key_of(storage, x) for x in take(storage, 10, "w3")] == ["b"]


def test_a_dead_workers_slot_frees_when_its_lease_is_reaped(storage: Storage) -> None:
    for i in range(3):
        send_mail.delay("a", i)
    got = take(storage, 10, lease_ms=50)
    assert len(got) == 2
    assert take(storage, 10, "w2") == []
    deadline = time.monotonic() + 5
    while not storage.reap(Q, max_lost=5).items and time.monotonic() < deadline:
        time.sleep(0.02)
    again = take(storage, 10, "w2")
    assert len(again) == 2  # the two reaped leases freed their slots: 2 of the 3 run
    # the dead worker's late ack is refused (fenced) and frees nothing twice
    assert storage.ack(Q, "w1", [Finished(x.id, x.token, "t") for x in got]) != []
    assert take(storage, 10, "w3") == []
    ack(storage, again, "w2")
    assert len(take(storage, 10, "w3")) == 1


def test_dedup_delete_first_and_expiry_keep_their_meaning(storage: Storage) -> None:
    h1 = send_mail.delay("a", 1)
    assert send_mail.delay("a", 1).outcome == "exists"  # the same MD5 id: one task
    h2 = send_mail.delay("a", 2)
    h3 = send_mail.enqueue(("a", 3), first=True)  # the head of its key
    assert h2.cancel()
    assert storage.pending_count(Q) == 2
    order = [x.id for x in take(storage, 10)]
    assert order == [h3.id, h1.id]
    h4 = send_mail.enqueue(("c", 1), expires=0.05)
    time.sleep(0.1)  # the expiry passes (Redis's clock)
    assert take(storage, 10, "w2") == []
    assert storage.record(Q, h4.id).state == "expired"  # type: ignore[union-attr]
    assert storage.pending_count(Q) == 0


@pytest.mark.slow
def test_a_per_key_rate_takes_the_tokens_there_are_and_names_the_next(storage: Storage) -> None:
    for i in range(4):
        call_api.delay("x", i)  # 5/s per key: one token each 200 ms
        call_api.delay("y", i)
    got = take(storage, 10)
    assert sorted(key_of(storage, x) for x in got) == ["x", "y"]  # a token each, no more
    reply = storage.call(*storage.fetch_op(Q, "w2", "t", 60_000, 10))
    assert storage.parse_fetch(Q, reply) == []
    wait = storage.fetch_throttled(reply)
    assert wait is not None and 0 < wait <= 0.2  # this executor fetches at the next token
    reply = storage.call(*storage.fetch_op(Q, "w3", "t", 60_000, 10))
    assert storage.fetch_throttled(reply) == math.inf  # another one sleeps until woken
    time.sleep(wait)
    assert sorted(key_of(storage, x) for x in take(storage, 10, "w2")) == ["x", "y"]
    assert storage.pending_count(Q) == 4  # the throttled ones wait, never failed


@pytest.mark.slow
def test_a_per_key_rate_holds_over_every_window(storage: Storage) -> None:
    for i in range(40):
        call_api.delay("x", i)
        call_api.delay("y", i)
    plain.delay(1)  # a task without a key is not held by them
    starts: dict[str, list[int]] = {"x": [], "y": []}
    deadline = time.monotonic() + 1.3
    while time.monotonic() < deadline:
        for lease in take(storage, 20):
            rec = storage.record(Q, lease.id)
            assert rec is not None
            if "key" in rec.meta:
                starts[rec.meta["key"]].append(int(rec.meta["started"]))
            ack(storage, [lease])
    for times in starts.values():
        assert 6 <= len(times) <= 5 * 1.3 + 2
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
    assert storage.queue_limits("mailer").key_concurrency == 10


def test_a_queue_with_keyed_tasks_is_not_forgotten(storage: Storage) -> None:
    h = send_mail.delay("acme", 1)
    assert storage.forget_idle_queue(Q) == f"{Q} holds 1 keys with tasks waiting"
    [lease] = take(storage)
    assert storage.forget_idle_queue(Q).startswith(f"{Q} holds 1 ")  # running
    ack(storage, [lease])
    storage.remove(Q, [h.id])
    assert storage.forget_idle_queue(Q) == ""
    assert not [k for k in storage.client.scan_iter(match=f"ztq:{{{Q}}}:k:[!r]*")]


@pytest.mark.slow
def test_an_executor_that_took_other_work_leaves_a_keys_next_token(storage: Storage) -> None:
    from tests.key_tasks import slow_api

    slow_api.delay("x", 1)
    slow_api.delay("x", 2)  # 1/m per key: the second waits a minute
    assert len(take(storage, 10)) == 1
    reply = storage.call(*storage.fetch_op(Q, "w2", "t", 60_000, 10))
    assert 0 < (storage.fetch_throttled(reply) or 0) <= 60  # w2 is registered for it
    assert storage.rate_leave(Q, "w3", "t") is False  # not w3's: left as it is
    assert storage.rate_leave(Q, "w2", "t")  # w2 took other work: it leaves the token
    reply = storage.call(*storage.fetch_op(Q, "w3", "t", 60_000, 10))
    assert 0 < (storage.fetch_throttled(reply) or 0) <= 60  # w3 registers in its place


@pytest.mark.slow
def test_delays_retries_and_the_pending_limit_keep_their_meaning(storage: Storage) -> None:
    h = send_mail.enqueue(("a", 1), delay=0.05)  # delayed, then its key's turn
    send_mail.delay("b", 1)
    assert [key_of(storage, x) for x in take(storage, 10)] == ["b"]
    deadline = time.monotonic() + 5
    while storage.promote(Q).moved == 0 and time.monotonic() < deadline:
        time.sleep(0.01)  # its due time passes on Redis's clock
    [lease] = take(storage, 10)
    assert lease.id == h.id
    # a failed run retried later: its slot frees at the failure, it waits in `delayed`,
    # and comes back to its key's list
    assert storage.fail(Q, "w1", h.id, lease.token, "t", "E: x", "", retry_delay_ms=1) == "retry"
    while storage.promote(Q).moved == 0 and time.monotonic() < deadline:
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
