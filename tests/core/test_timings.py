"""Waiting and run time histograms: what ack.lua and fail.lua count on real Redis, and the
percentiles, series and Prometheus buckets read from them."""

from __future__ import annotations

import json
import math
import time

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from ztq.core.engine.record import split_record
from ztq.core.engine.storage import Finished, Storage
from ztq.core.monitor import queues as monitor
from ztq.core.monitor import timings
from ztq.core.monitor.timings import BUCKETS, Histogram, bucket_of

Q = "default"


@pytest.fixture
def store(redis_url: str) -> Storage:
    return ztq.get_storage()


def _shift(store: Storage, task_id: str, **back_ms: int) -> None:
    """Move times of a record back, as if that much time had passed since."""
    raw = store.client.hget(store.keys.tasks(Q), task_id)
    data, payload = split_record(raw)
    for key, ms in back_ms.items():
        data[key] = int(data[key]) - ms
    store.client.hset(store.keys.tasks(Q), task_id, json.dumps(data) + "\n" + payload)


def _run(store: Storage, wait_ms: int, run_ms: int, *, fail: bool = False) -> None:
    """One task that waited ``wait_ms`` before its lease and ran ``run_ms`` before its end."""
    handle = t.add.delay(wait_ms, run_ms)
    _shift(store, handle.id, enqueued=wait_ms + run_ms)
    [lease] = store.leases.fetch(Q, "w", "t", 60_000, 1)
    _shift(store, lease.id, started=run_ms)  # the lease began run_ms ago, wait_ms after ready
    if fail:
        store.leases.fail(Q, "w", lease.id, lease.token, "add", "ValueError: x", "")
    else:
        store.leases.ack(Q, "w", [Finished(lease.id, lease.token, "add", "1")])


@pytest.mark.parametrize("ms", [0, 1, 2, 3, 5, 90, 1000, 1449, 1448, 60_000, 10**7, 10**9])
def test_lua_buckets_times_as_python_reads_them(store: Storage, ms: int) -> None:
    _run(store, ms, ms)
    [raw] = [store.client.hgetall(k) for k in store.client.scan_iter(match="ztq:{default}:stats:*")]
    wait, run = int(raw["wsum"]), int(raw["rsum"])  # what Lua measured (a few ms more)
    assert 0 <= wait - ms <= 50 and 0 <= run - ms <= 50
    assert raw[f"w{bucket_of(wait)}"] == "1" and raw[f"r{bucket_of(run)}"] == "1"
    assert raw["done"] == "1" and len(raw) == 5  # done, wsum, rsum and one bucket each
    b = bucket_of(wait)
    assert wait <= timings.upper_ms(b) and (b == 0 or wait > 2 ** ((b - 1) / 2))


def test_every_finished_run_counts_in_the_minute_the_five_minutes_and_the_totals(
    store: Storage,
) -> None:
    for wait, run in ((10, 100), (20, 200), (4000, 30)):
        _run(store, wait, run)
    _run(store, 5, 5000, fail=True)
    minute = store.client.hgetall(store.keys.stats(Q, int(time.time() // 60)))
    five = store.client.hgetall(store.keys.stats5(Q, int(time.time() // 300)))
    total = store.client.hgetall(store.keys.totals(Q))
    assert minute == five == total  # all in this minute (a test runs in well under one)
    assert (total["done"], total["failed"]) == ("3", "1")
    assert 0 < store.client.pttl(store.keys.stats(Q, int(time.time() // 60))) <= 7_200_000
    assert (
        7_200_000 < store.client.pttl(store.keys.stats5(Q, int(time.time() // 300))) <= 90_000_000
    )
    assert store.client.pttl(store.keys.totals(Q)) == -1
    slot = timings.parse(0, total)
    assert slot.wait.count == slot.run.count == 4
    assert slot.run.quantile(1.0) == pytest.approx(5000, rel=0.42)


def test_queue_stats_give_the_percentiles_of_the_last_hour(store: Storage) -> None:
    for i in range(100):
        _run(store, 200, 1000 if i < 95 else 60_000)
    [stats] = monitor.queue_stats(store, [Q])
    p = stats.window.run.percentiles()
    assert p["p50"] == pytest.approx(1000, rel=0.42)
    assert p["p99"] == pytest.approx(60_000, rel=0.42)
    assert stats.window.wait.percentiles()["p95"] == pytest.approx(200, rel=0.42)
    [day_slot] = [s for s in timings.day_slots(store, Q) if s.done]
    assert day_slot.done == 100 and day_slot.run.count == 100


def test_quantiles_of_a_histogram() -> None:
    h = Histogram()
    assert h.quantile(0.5) is None
    h.counts[bucket_of(100)] = 50
    h.counts[bucket_of(10_000)] = 50
    assert h.quantile(0.25) == pytest.approx(100, rel=0.42)
    assert h.quantile(0.75) == pytest.approx(10_000, rel=0.42)
    h.counts[BUCKETS - 1] = 1  # beyond the last bound: its lower edge
    assert h.quantile(1.0) == pytest.approx(2**23.5)
    bounds = h.cumulative()
    assert bounds[0] == (0.001, 0) and bounds[-1] == (math.inf, 101)
    assert [b for b, _ in bounds][:4] == [0.001, 0.004, 0.016, 0.064]
    assert all(a[1] <= b[1] for a, b in zip(bounds, bounds[1:], strict=False))


def test_a_delayed_task_waits_from_its_due_time_not_its_enqueue(store: Storage) -> None:
    handle = t.add.enqueue((1, 2), delay=3600)
    _shift(store, handle.id, enqueued=7_200_000, due=3_600_000 + 300)  # due 300 ms ago
    store.client.zadd(store.keys.delayed(Q), {handle.id: int(time.time() * 1000) - 300})
    assert store.tasks.promote(Q)[0] == 1
    [lease] = store.leases.fetch(Q, "w", "t", 60_000, 1)
    store.leases.ack(Q, "w", [Finished(lease.id, lease.token, "add", "3")])
    total = timings.parse(0, store.client.hgetall(store.keys.totals(Q)))
    assert 300 <= total.wait.total_ms < 1000  # not the two hours since the enqueue


def test_a_quantile_is_interpolated_inside_its_bucket() -> None:
    h = Histogram()
    b = bucket_of(1000)  # (724, 1024]
    h.counts[b] = 100
    low, high = 2 ** ((b - 1) / 2), 2 ** (b / 2)
    assert h.quantile(0.5) == pytest.approx(low * (high / low) ** 0.5)
    assert h.quantile(0.01) == pytest.approx(low * (high / low) ** 0.01)
    assert h.quantile(1.0) == pytest.approx(high)
