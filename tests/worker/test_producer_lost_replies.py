"""A producer's lost reply (issue 35, point 1; docs/design.md, "Lost replies"): Redis ran the
enqueue, the connection closed before its reply arrived, the client sent the same call again.
By then an idle worker had taken the task (the hand-over) and run it: the call sent again must
answer as the first one did and enqueue nothing, for ``delay``, ``adelay``, the coalesced
path, a ``Batch`` (its MULTI/EXEC) and a ``transaction()``.

The proxy of ``tests/proxy.py`` forwards the call, keeps Redis's reply until
the worker ran the tasks (``hold``), then closes the connection. Each run is counted in a
hash of the real Redis (``tally``), read around the proxy.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import ztq.core as ztq
from tests import sample_tasks as t
from tests.core.test_coalesce import coalesce_from_two_threads  # noqa: F401 (autouse)
from tests.proxy import ReplyDropper
from tests.worker.conftest import wait_for
from ztq.core.client.coalesce import coalescer

Q = "default"
KEY = "tally"  # field n -> runs of tally(KEY, n)
EXEC = b"*1\r\n$4\r\nEXEC\r\n"  # a MULTI/EXEC's end, as redis-py sends it


@pytest.fixture
def direct(redis_url: str) -> Iterator[redis.Redis]:
    """The real Redis, around the proxy: what the test reads."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def idle_workers(
    proxy: ReplyDropper, start_worker: Callable[..., Any], direct: redis.Redis
) -> None:
    """Four idle executors, one registered for the hand-over; the queue and the scripts
    known (a first task ran), so that the next request naming the script is the call."""
    start_worker({Q: 4})
    warm = t.tally.delay("warm", 0)
    wait_for(lambda: ztq.ping(warm) == "done")
    storage = ztq.get_storage()
    wait_for(lambda: direct.exists(storage.keys.waiter(Q)))


def idle(direct: redis.Redis, counted: int) -> bool:
    """``counted`` tasks ran, nothing waits or runs."""
    k = ztq.get_storage().keys
    busy = direct.zcard(k.running(Q)) + direct.llen(k.hand(Q))
    busy += sum(direct.llen(key) for key in k.ready_all(Q))
    return direct.hlen(KEY) >= counted and busy == 0


def runs(direct: redis.Redis, counted: int) -> list[int]:
    """Each task's runs, once the queue is idle again (a task enqueued twice ran twice)."""
    wait_for(lambda: idle(direct, counted), timeout=20)
    got = direct.hgetall(KEY)
    return [int(got.get(str(n), 0)) for n in range(counted)]


@pytest.mark.usefixtures("idle_workers")
def test_delay(proxy: ReplyDropper, direct: redis.Redis) -> None:
    proxy.arm("enqueue", hold=lambda: idle(direct, 1))
    handle = t.tally.delay(KEY, 0)
    assert proxy.dropped == 1 and handle.outcome == "added"
    assert runs(direct, 1) == [1]


@pytest.mark.usefixtures("idle_workers")
def test_adelay(proxy: ReplyDropper, direct: redis.Redis) -> None:
    proxy.arm("enqueue", hold=lambda: idle(direct, 1))
    handle = asyncio.run(t.tally.adelay(KEY, 0))
    assert proxy.dropped == 1 and handle.outcome == "added"
    assert runs(direct, 1) == [1]


@pytest.mark.usefixtures("idle_workers")
def test_coalesced(
    proxy: ReplyDropper, direct: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight threads enqueue at once: the first call goes alone and is held until the seven
    others queued behind it; their batch (one round trip) loses its replies."""
    storage = ztq.get_storage()
    shared = coalescer(storage)
    alone = storage.call
    first = threading.Event()

    def call(name: str, keys: Any, args: Any) -> Any:
        if name == "enqueue" and not first.is_set():
            first.set()
            wait_for(lambda: len(shared._waiting) == 7)
        return alone(name, keys, args)

    monkeypatch.setattr(storage, "call", call)
    proxy.arm("enqueue", skip=1, hold=lambda: idle(direct, 8))  # the lone call passes
    threads = [threading.Thread(target=t.tally.delay, args=(KEY, n)) for n in range(8)]
    batches = shared.batches
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert proxy.dropped == 1 and shared.batches == batches + 1
    assert runs(direct, 8) == [1] * 8


@pytest.mark.usefixtures("idle_workers")
def test_batch(proxy: ReplyDropper, direct: redis.Redis) -> None:
    proxy.arm(marker=EXEC, hold=lambda: idle(direct, 8))
    with ztq.batch() as b:
        for n in range(8):
            t.tally.delay(KEY, n)
    assert proxy.dropped == 1 and [h.outcome for h in b.handles] == ["added"] * 8
    assert runs(direct, 8) == [1] * 8
    assert b.wait(10).done == 8


@pytest.mark.usefixtures("idle_workers")
def test_transaction(proxy: ReplyDropper, direct: redis.Redis) -> None:
    proxy.arm("enqueue", hold=lambda: idle(direct, 8))
    with ztq.transaction() as handles:
        for n in range(8):
            t.tally.delay(KEY, n)
    assert proxy.dropped == 1 and [h.outcome for h in handles] == ["added"] * 8
    assert runs(direct, 8) == [1] * 8


@pytest.mark.slow
@pytest.mark.usefixtures("idle_workers")
def test_two_percent_of_replies_lost(proxy: ReplyDropper, direct: redis.Redis) -> None:
    """2,000 tasks from two producer threads (alone and coalesced), 2% of the enqueue
    replies lost at random while idle workers take the tasks as they come: none runs twice."""
    proxy.drop_share("enqueue", 0.02)

    def produce(start: int) -> None:
        for n in range(start, 2000, 2):
            t.tally.delay(KEY, n)

    threads = [threading.Thread(target=produce, args=(s,)) for s in (0, 1)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    proxy.drop_share("enqueue", 0)
    counts = runs(direct, 2000)
    assert proxy.dropped >= 20
    assert [n for n, c in enumerate(counts) if c != 1] == []
