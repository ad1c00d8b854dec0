"""Lost replies (issue 28, point 4; docs/design.md, "Lost replies"): a fetch, ack, fail or
renew that Redis applied while its reply was lost (a timeout, a reset connection) and that
is then sent again gets what the first call did.

A proxy between the client and a real redis-server forwards one chosen script call and then
drops the connection instead of its reply: Redis applied the call, the client never hears
it and sends it again (the client's retries, as ``connect()`` makes it, or the caller's next
round trip), exactly as in the 20 s stall of the issue.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from redis.backoff import NoBackoff
from redis.retry import Retry

import ztq.core as ztq
from tests.proxy import ReplyDropper
from ztq.core.engine.connection import make_client
from ztq.core.engine.record import split_record
from ztq.core.engine.storage import EnqueueEntry, Finished, Storage
from ztq.core.errors import ConnectionFailed

Q = "lost"
W, T = "w1", "t0"


@pytest.fixture
def proxy(redis_server) -> Iterator[ReplyDropper]:  # type: ignore[no-untyped-def]
    p = ReplyDropper(redis_server.port)
    yield p
    p.close()


@pytest.fixture
def storage(proxy: ReplyDropper, redis_url: str) -> Iterator[Storage]:
    """A storage reaching Redis through the proxy, with the client's retries of connect()."""
    yield ztq.connect(proxy.url)
    ztq.disconnect_all()


def enqueue(storage: Storage, *ids: str) -> None:
    entries = [EnqueueEntry(i, json.dumps(["lost.t", [i]])) for i in ids]
    storage.execute([storage.tasks.enqueue_op(Q, entries)])


def meta(storage: Storage, task_id: str) -> dict[str, object]:
    return split_record(storage.client.hget(storage.keys.tasks(Q), task_id))[0]


def runs(storage: Storage) -> int:
    return int(storage.client.xlen(storage.keys.history(Q)))


def test_a_fetch_whose_reply_was_lost_gets_its_lease_again(
    storage: Storage, proxy: ReplyDropper
) -> None:
    """Not a second task while the first idles until its lease runs out, and one attempt."""
    enqueue(storage, "a", "b")
    proxy.arm("fetch")
    [lease] = storage.leases.fetch(Q, W, T, 30_000, 1)
    assert proxy.dropped == 1
    assert lease.id == "a" and meta(storage, "a")["attempts"] == 1
    assert meta(storage, "a")["fence"] == str(lease.token)
    assert meta(storage, "b")["state"] == "queued"  # the retry took nothing new
    assert storage.client.zcard(storage.keys.running(Q)) == 1
    [nxt] = storage.leases.fetch(Q, W, T, 30_000, 1)  # the reply was read: a new request
    assert nxt.id == "b"


def test_an_ack_whose_reply_was_lost_is_not_refused(storage: Storage, proxy: ReplyDropper) -> None:
    enqueue(storage, "a")
    [lease] = storage.leases.fetch(Q, W, T, 30_000, 1)
    proxy.arm("ack")
    assert storage.leases.ack(Q, W, [Finished("a", lease.token, "lost.t", "1")]) == []
    assert proxy.dropped == 1
    assert meta(storage, "a")["state"] == "done" and runs(storage) == 1  # applied once
    # a worker that kept the ack and sends it again much later: not refused either
    assert storage.leases.ack(Q, W, [Finished("a", lease.token, "lost.t", "1")]) == []
    assert runs(storage) == 1


def test_a_failure_whose_reply_was_lost_gets_the_same_answer(
    storage: Storage, proxy: ReplyDropper
) -> None:
    enqueue(storage, "a")
    [lease] = storage.leases.fetch(Q, W, T, 30_000, 1)
    proxy.arm("fail")
    got = storage.leases.fail(Q, W, "a", lease.token, "lost.t", "E: x", "", retry_delay_ms=60_000)
    assert proxy.dropped == 1
    assert got == "retry" and meta(storage, "a")["failures"] == 1 and runs(storage) == 1
    assert (
        storage.leases.fail(Q, W, "a", lease.token, "lost.t", "E: x", "", retry_delay_ms=0)
        == "retry"
    )
    assert meta(storage, "a")["failures"] == 1


def test_a_renewal_whose_reply_was_lost_does_not_report_an_acked_run_lost(
    storage: Storage, proxy: ReplyDropper
) -> None:
    enqueue(storage, "a")
    [lease] = storage.leases.fetch(Q, W, T, 1_000, 1)
    proxy.arm("renew")
    assert storage.leases.renew(Q, W, 60_000, [("a", lease.token)]) == []
    assert proxy.dropped == 1
    deadline = storage.client.zscore(storage.keys.running(Q), "a")
    assert deadline is not None and deadline > storage.client.time()[0] * 1000 + 30_000
    # the heartbeat's renewal crossed the run's ack (its reply lost, sent again after)
    storage.leases.ack(Q, W, [Finished("a", lease.token, "lost.t")])
    assert storage.leases.renew(Q, W, 60_000, [("a", lease.token)]) == []


def test_a_worker_round_trip_whose_reply_was_lost(storage: Storage, proxy: ReplyDropper) -> None:
    """A worker's ack of a batch and fetch of the next in one pipeline, all its replies
    lost: the pipeline sent again acks nothing twice and gets the same leases."""
    enqueue(storage, "a", "b", "c")
    [a] = storage.leases.fetch(Q, W, T, 30_000, 1)
    ops = [
        storage.leases.ack_op(Q, W, [Finished("a", a.token, "lost.t")]),
        storage.leases.fetch_op(Q, W, T, 30_000, 1),
    ]
    proxy.arm("ack")
    refused, reply = storage.execute(ops)
    assert proxy.dropped == 1 and refused == []
    [b] = storage.leases.parse_fetch(Q, reply)
    assert b.id == "b" and meta(storage, "b")["attempts"] == 1 and runs(storage) == 1
    assert meta(storage, "c")["state"] == "queued"


def test_without_client_retries_the_next_round_trip_sends_the_same_request(
    storage: Storage, proxy: ReplyDropper
) -> None:
    """A client that does not retry (or retried in vain): the call raises; the executor's
    next fetch carries the same request id until a reply to it is read."""
    bare = Storage(make_client(proxy.url, retry=Retry(NoBackoff(), 0)), url=proxy.url)
    try:
        enqueue(storage, "a", "b")
        proxy.arm("fetch")
        with pytest.raises(ConnectionFailed):
            bare.execute([bare.leases.fetch_op(Q, W, T, 30_000, 1)])
        assert proxy.dropped == 1 and meta(bare, "a")["state"] == "running"
        [lease] = bare.leases.parse_fetch(
            Q, bare.execute([bare.leases.fetch_op(Q, W, T, 30_000, 1)])[0]
        )
        assert lease.id == "a" and meta(bare, "a")["attempts"] == 1
        proxy.arm("ack")
        with pytest.raises(ConnectionFailed):
            bare.leases.ack(Q, W, [Finished("a", lease.token, "lost.t")])
        assert bare.leases.ack(Q, W, [Finished("a", lease.token, "lost.t")]) == []  # sent again
        assert runs(bare) == 1
    finally:
        bare.close()
