"""Many workers: the summaries the heartbeat script keeps, the counts the console takes from
them (never from the heartbeats), paging in name order, and what forget and the retention
clean. The oracle is the old way: read every heartbeat (``list_workers``) and count."""

from __future__ import annotations

import time
from typing import Any

import pytest

import ztq.core as ztq
from tests.console.scenario import make_lost
from ztq.core.engine.storage import Storage
from ztq.core.engine.workers import (
    BAND,
    forget_worker,
    parse_summary,
    summarize,
    write_heartbeat,
)
from ztq.core.monitor.workers import SHOWN, Fleet, count_key, fleet, list_workers, page_workers

ROLES = ("running", "running", "running", "paused", "stopping", "stopped", "lost", "running")


def beat(storage: Storage, wid: str, status: str = "running", **data: Any) -> list[str]:
    body = {"name": wid, "host": "h", "pid": 1, "status": status, "threads": {"a": 2, "b": 1}}
    body["current"] = {"a-0": {"id": "t1", "queue": "a", "task": "x", "started": time.time()}}
    return write_heartbeat(storage, wid, body | data)


def populate(storage: Storage, n: int = 120) -> dict[str, str]:
    """``n`` workers in mixed states (running, paused, stopping, stopped, lost); returns
    id -> the status the console should show."""
    shown = {}
    for i in range(n):
        wid, role = f"w-{i:03d}", ROLES[i % len(ROLES)]
        threads = {"a": 1 + i % 3, "b": i % 2, "bad name!": 5}
        busy = {f"t{j}": {"id": f"t{i}-{j}", "queue": "a"} for j in range(i % 4)}
        beat(storage, wid, "running" if role == "lost" else role, threads=threads, current=busy)
        if role == "lost":
            make_lost(storage, wid)
        shown[wid] = role
    return shown


def oracle(storage: Storage, lost_after: float = 30.0) -> Fleet:
    """What the console showed before: every heartbeat read and counted."""
    counts: dict[str, int] = {}
    threads: dict[str, int] = {}
    paused: dict[str, int] = {}
    busy = 0
    for info in list_workers(storage, lost_after):
        status = count_key(info.status)
        counts[status] = counts.get(status, 0) + 1
        if status in ("lost", "stopped"):
            continue
        _, b, per_queue = parse_summary(summarize(info.data))
        busy += b
        for q, n in per_queue.items():
            threads[q] = threads.get(q, 0) + n
            if status == "paused":  # the threads of paused workers, which take no task
                paused[q] = paused.get(q, 0) + n
    return Fleet(counts, dict(sorted(threads.items())), busy, dict(sorted(paused.items())))


@pytest.mark.slow
def test_counts_of_120_workers_in_mixed_states(storage: Storage) -> None:
    shown = populate(storage)
    f = fleet(storage, 30.0)
    expected = {s: list(shown.values()).count(s) for s in set(shown.values())}
    assert f.counts == expected == {"running": 60, "paused": 15, "stopping": 15,
                                    "stopped": 15, "lost": 15}  # fmt: skip
    assert f == oracle(storage) and f.total == 120
    live = [i for i in range(120) if ROLES[i % 8] not in ("stopped", "lost")]
    assert f.threads == {"a": sum(1 + i % 3 for i in live), "b": sum(i % 2 for i in live)}
    assert f.busy == sum(i % 4 for i in live)
    # changes: threads, status, a lost worker back, a stopped one back, one stops
    beat(storage, "w-000", threads={"a": 7, "c": 2})
    beat(storage, "w-003", "running")
    beat(storage, "w-006", "running")  # was lost
    beat(storage, "w-005", "paused")  # was stopped
    beat(storage, "w-001", "stopped", threads={}, current={})
    beat(storage, "w-002", "<b>odd</b>")  # a foreign status: counted as other
    beat(storage, "w-004", "stopping", threads={"a": 2, "b": 0})  # only busy threads change
    beat(storage, "w-012", "paused", threads={"a": 1}, current={})
    f = fleet(storage, 30.0)
    assert f == oracle(storage)
    assert f.counts["other"] == 1 and f.counts["lost"] == 14 and f.threads["c"] == 2


def test_a_lost_worker_is_counted_without_reading_its_heartbeat(redis_url: str) -> None:
    storage = ztq.get_storage()
    beat(storage, "big", threads={"a": 3}, blob="x" * 1_000_000)
    beat(storage, "small", threads={"a": 1})
    make_lost(storage, "big")
    before = storage.client.info("stats")["total_net_output_bytes"]
    f = fleet(storage, 30.0)
    read = storage.client.info("stats")["total_net_output_bytes"] - before
    assert f.counts == {"running": 1, "lost": 1} and f.threads == {"a": 1} and f.busy == 1
    assert read < 5_000  # the 1 MB heartbeat stayed in Redis
    assert f.counts == oracle(storage).counts


@pytest.mark.slow
def test_pages_in_name_order_and_by_status(storage: Storage) -> None:
    shown = populate(storage)
    names = sorted(shown)
    got, start, pages = [], 0, 0
    while True:
        page = page_workers(storage, 30.0, start=start, limit=50)
        assert page.total == 120 and len(page.workers) <= 50
        got += [w.id for w in page.workers]
        pages += 1
        if page.next is None:
            break
        start = page.next
    assert got == names and pages == 3
    for status in SHOWN:
        found, start = [], 0
        while True:
            page = page_workers(storage, 30.0, status=status, start=start, limit=7, budget=40)
            found += [w.id for w in page.workers]
            assert all(w.status == status for w in page.workers)
            if page.next is None:
                break
            assert page.partial or len(page.workers) == 7
            start = page.next
        assert found == [w for w in names if shown[w] == status], status


def test_forget_takes_a_worker_out_of_every_count(redis_url: str) -> None:
    storage = ztq.get_storage()
    shown = populate(storage, 40)
    k, c = storage.keys, storage.client
    for wid in ("w-000", "w-005", "w-006"):  # running, stopped, lost
        assert forget_worker(storage, wid)
        assert not c.hexists(k.worker_summaries, wid)
        assert c.zscore(k.worker_states, wid) is None and c.zscore(k.worker_names, wid) is None
    assert fleet(storage, 30.0) == oracle(storage) and fleet(storage, 30.0).total == 37
    for wid in shown:
        forget_worker(storage, wid)
    assert fleet(storage, 30.0) == Fleet({}, {}, 0)
    left = [key for key in c.scan_iter(match="ztq:{ztq}:*") if key != k.events]
    assert left == []  # the totals hash went with its last field


def test_retention_forgets_silent_workers_and_their_summaries(redis_url: str) -> None:
    storage = ztq.get_storage()
    k, c = storage.keys, storage.client
    beat(storage, "old", threads={"a": 4})
    beat(storage, "new", threads={"a": 1})
    make_lost(storage, "old", 2 * 86400)
    assert beat(storage, "new", threads={"a": 1}) == ["old"]
    assert not c.hexists(k.worker_summaries, "old") and c.zscore(k.worker_names, "old") is None
    assert c.zscore(k.worker_states, "old") is None
    assert c.hgetall(k.worker_totals) == {"busy": "1", "t:a": "1"}
    assert fleet(storage, 30.0) == oracle(storage) == Fleet({"running": 1}, {"a": 1}, 1)


def test_summaries_an_older_ztq_left_behind_are_swept(redis_url: str) -> None:
    """An older console forgot a worker (its forget.lua knew workers and seen only): the
    heartbeats of the others sweep its summary once it is silent past the retention."""
    storage = ztq.get_storage()
    k, c = storage.keys, storage.client
    beat(storage, "ghost", threads={"a": 4})
    c.hdel(k.workers, "ghost")
    c.zrem(k.seen, "ghost")
    score = c.zscore(k.worker_states, "ghost")
    c.zadd(k.worker_states, {"ghost": score - 3 * 86400 * 1000})
    deadline = time.monotonic() + 10
    while c.hexists(k.worker_summaries, "ghost") and time.monotonic() < deadline:
        beat(storage, "live", threads={"a": 1})  # one band in one heartbeat of four
    assert not c.hexists(k.worker_summaries, "ghost")
    assert c.hgetall(k.worker_totals) == {"busy": "1", "t:a": "1"}


def test_heartbeats_an_older_ztq_wrote_stay_readable(redis_url: str) -> None:
    """Workers of an older ztq write the heartbeat and ``seen`` only: the console reads
    their heartbeats (only theirs) and counts and pages them with the others."""
    storage = ztq.get_storage()
    k, c = storage.keys, storage.client
    shown = populate(storage, 16)
    now = time.time() * 1000
    for wid, status, at in (
        ("old-a", "running", now),
        ("old-b", "paused", now),
        ("old-c", "running", now - 600_000),
        ("w-0005x", "stopped", now),
    ):
        c.hset(k.workers, wid, f'{{"status":"{status}","threads":{{"a":5}}}}')
        c.zadd(k.seen, {wid: at})
        shown[wid] = "lost" if at < now - 1 else status
    f = fleet(storage, 30.0)
    live = [i for i in range(16) if ROLES[i % 8] not in ("stopped", "lost")]
    assert f == oracle(storage) and f.total == 20
    assert f.threads["a"] == sum(1 + i % 3 for i in live) + 5 + 5  # old-a, old-b
    page = page_workers(storage, 30.0, limit=50)
    assert [w.id for w in page.workers] == sorted(shown) and page.total == 20
    paused = page_workers(storage, 30.0, status="paused", limit=50).workers
    assert [w.id for w in paused] == sorted(w for w, s in shown.items() if s == "paused")
    lost = page_workers(storage, 30.0, status="lost", limit=50).workers
    assert [w.id for w in lost] == sorted(w for w, s in shown.items() if s == "lost")
    beat(storage, "old-a")  # upgraded: it has a summary now
    assert fleet(storage, 30.0) == oracle(storage)


@pytest.mark.parametrize(
    ("data", "summary", "parsed"),
    [
        ({"status": "paused", "threads": {"b": 2, "a": 1}, "current": {"x": {}, "y": {}}},
         "paused 2 a=1 b=2", ("paused", 2, {"a": 1, "b": 2})),
        ({"status": "<script>", "threads": {"a b": 1, "c=d": 2, "e": True, "f": -1, "g": 1.5,
                                            "h": 0, "i": 10**9, "ok": 3}, "current": {"x": 1}},
         "other 0 ok=3", ("other", 0, {"ok": 3})),
        ({"threads": [1], "current": "x"}, "other 0", ("other", 0, {})),
        ({"status": "stopped"}, "stopped 0", ("stopped", 0, {})),
    ],
)  # fmt: skip
def test_a_summary_holds_only_what_it_can_hold(
    data: dict[str, Any], summary: str, parsed: tuple[str, int, dict[str, int]]
) -> None:
    assert summarize(data) == summary
    assert parse_summary(summary) == parsed


def test_state_scores_keep_the_band_and_the_report_time(redis_url: str) -> None:
    storage = ztq.get_storage()
    beat(storage, "p", "paused")
    k, c = storage.keys, storage.client
    band, reported = divmod(int(c.zscore(k.worker_states, "p")), BAND)
    assert band == 2 and reported == int(c.zscore(k.seen, "p"))
