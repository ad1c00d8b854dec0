"""Back-pressure (``configure_queue(q, max_pending=N, when_full=...)``) as producers meet it,
on Redis 7, 6.2 and Cluster: ``raise`` refuses at the call and writes nothing, ``block`` waits
for the room a fetch makes (and no longer than ``block_timeout``), ``buffer`` never waits and
loses nothing. Every state move under a limit: the state-machine test; real worker
processes: tests/worker/test_back_pressure_workers.py."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from ztq.core.client.cron import CronEntry
from ztq.core.engine.storage import Finished, Storage
from ztq.core.errors import InvalidOption, QueueFull
from ztq.core.monitor import queues as monitor

Q = "press"


def add(n: int, **options: object) -> ztq.TaskHandle:
    return t.add.enqueue((n, 0), queue=Q, **options)


def counters(storage: Storage) -> dict[str, int]:
    raw = storage.client.hgetall(storage.keys.totals(Q))
    return {k: int(raw.get(k, 0)) for k in ("refused", "overflowed")}


def test_raise_refuses_at_the_call_and_writes_nothing(storage: Storage) -> None:
    ztq.configure_queue(Q, max_pending=2)
    assert storage.queues.queue_config(Q) == {"max_pending": 2, "when_full": "raise"}
    first = [add(n) for n in range(2)]
    with pytest.raises(QueueFull, match=r"queue press is full: it holds 2 tasks waiting") as err:
        add(2)
    assert err.value.queue == Q and err.value.limit == 2
    assert storage.queues.pending_count(Q) == 2
    assert storage.client.hlen(storage.keys.tasks(Q)) == 2  # no record for the refused one
    assert counters(storage) == {"refused": 1, "overflowed": 0}
    assert add(0).outcome == "exists"  # an identical pending task: nothing added, no error
    assert add(7, delay=60).outcome == "added"  # delayed tasks are not counted or refused
    assert add(8, first=True).outcome == "added"  # first: run before the rest, full or not
    [stats] = monitor.queue_stats(storage, [Q], minutes=1)
    assert stats.full and stats.limits.max_pending == 2 and stats.pending == 3
    lease = storage.leases.fetch(Q, "w", "t", 60_000, 2)
    storage.leases.ack(Q, "w", [Finished(x.id, x.token, "x", "") for x in lease])
    assert add(2).outcome == "added"  # room again
    assert {h.id for h in first} <= {x.id for x in lease} | {first[1].id}


@pytest.mark.slow
def test_block_waits_for_the_room_a_fetch_makes(storage: Storage) -> None:
    ztq.configure_queue(Q, max_pending=1, when_full="block", block_timeout=20)
    add(0)
    done = threading.Event()
    got: list[ztq.TaskHandle] = []

    def producer() -> None:
        got.append(add(1))
        done.set()

    thread = threading.Thread(target=producer, daemon=True)
    thread.start()
    assert not done.wait(0.3)  # blocked: the queue is full
    assert storage.queues.pending_count(Q) == 1
    # it asks again each second (a token is a hint): right after one of those tries, the
    # room a fetch makes must wake it well before its next one
    deadline = time.monotonic() + 5
    while counters(storage)["refused"] < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    started = time.monotonic()
    [lease] = storage.leases.fetch(Q, "w", "t", 60_000, 1)  # room: the producer is woken
    assert done.wait(5), "the blocked producer was not woken by the room a fetch made"
    assert time.monotonic() - started < 0.5  # woken by the token, not by its 1 s poll
    assert got[0].outcome == "added" and lease.id != got[0].id
    assert counters(storage)["refused"] == 2  # two tries were refused, the third went in
    assert storage.client.llen(storage.keys.room(Q)) == 0  # the token was taken


@pytest.mark.slow
def test_block_gives_up_after_block_timeout(storage: Storage) -> None:
    ztq.configure_queue(Q, max_pending=1, when_full="block", block_timeout=0.4)
    add(0)
    started = time.monotonic()
    with pytest.raises(QueueFull, match=r"after waiting 0\.[45]s for room"):
        add(1)
    assert 0.35 < time.monotonic() - started < 2.0
    assert storage.queues.pending_count(Q) == 1


@pytest.mark.slow
def test_buffer_never_waits_and_feeds_the_queue_in_order(storage: Storage) -> None:
    ztq.configure_queue(Q, max_pending=3, when_full="buffer")
    started = time.monotonic()
    handles = [add(n) for n in range(10)]
    assert time.monotonic() - started < 2.0
    assert [h.outcome for h in handles] == ["added"] * 3 + ["overflow"] * 7
    assert handles[5].state == "overflow"
    assert add(5).outcome == "exists"  # dedup holds for a buffered task
    [stats] = monitor.queue_stats(storage, [Q], minutes=1)
    assert (stats.pending, stats.overflow, stats.full) == (3, 7, True)
    page = monitor.pending_page(storage, Q, 0, 20)
    assert [r.id for r in page.rows] == [h.id for h in handles]  # run order: ready, then buffer
    ran: list[str] = []
    while len(ran) < 10:
        leases = storage.leases.fetch(Q, "w", "t", 60_000, 2)
        assert leases, "the buffer did not feed the queue"
        assert storage.queues.pending_count(Q) <= 3
        ran += [x.id for x in leases]
        storage.leases.ack(Q, "w", [Finished(x.id, x.token, "x", "") for x in leases])
    assert ran == [h.id for h in handles]  # nothing lost, FIFO across ready and buffer
    assert counters(storage) == {"refused": 0, "overflowed": 7}
    assert storage.client.llen(storage.keys.overflow(Q)) == 0


def test_lifting_the_limit_moves_the_buffer_in_and_frees_blocked_producers(
    storage: Storage,
) -> None:
    ztq.configure_queue(Q, max_pending=1, when_full="buffer")
    handles = [add(n) for n in range(4)]
    assert storage.queues.pending_count(Q) == 1
    assert storage.queues.configure(Q, max_pending=None) == 3  # all three moved in
    assert (
        storage.queues.pending_count(Q) == 4 and storage.client.llen(storage.keys.overflow(Q)) == 0
    )
    assert [h.state for h in handles] == ["queued"] * 4


def test_cancel_and_delete_of_a_buffered_task_and_the_room_a_delete_makes(
    storage: Storage,
) -> None:
    ztq.configure_queue(Q, max_pending=2, when_full="buffer")
    a, b, c, d = (add(n) for n in range(4))
    assert d.cancel() and d.state == "none"
    assert storage.tasks.remove(Q, [a.id]) == (1, 1)  # room made: the buffer's oldest moves in
    assert c.state == "queued"
    assert monitor.queue_stats(storage, [Q])[0].overflow == 0  # d's entry: a leftover
    assert [r.id for r in monitor.pending_page(storage, Q, 0, 10).rows] == [b.id, c.id]


def test_a_deleted_tasks_leftover_entry_takes_no_room(storage: Storage) -> None:
    """A delete leaves the task's entry in its ready list, marked (no LREM): the limit
    counts the entries less the marks, also when the leftover is the list's only entry."""
    ztq.configure_queue(Q, max_pending=1)
    a = add(0)
    assert storage.tasks.remove(Q, [a.id]) == (1, 1)
    assert storage.client.llen(storage.keys.ready(Q, "normal")) == 1  # the leftover
    assert storage.queues.pending_count(Q) == 0
    assert add(1).outcome == "added"
    with pytest.raises(QueueFull):
        add(2)


def test_a_batch_writes_what_fits_and_names_the_rest(storage: Storage) -> None:
    ztq.configure_queue(Q, max_pending=2)
    with pytest.raises(QueueFull) as err, ztq.transaction():
        for n in range(5):
            add(n)
    assert len(err.value.refused) == 3 and len(err.value.handles) == 2
    assert "3 of 5 task(s) not enqueued" in str(err.value)
    assert storage.queues.pending_count(Q) == 2
    assert set(err.value.refused).isdisjoint({h.id for h in err.value.handles})


@pytest.mark.parametrize("when_full", ["raise", "block"])
def test_a_cron_tick_that_finds_its_queue_full_is_not_fired_and_the_others_are(
    storage: Storage, when_full: str, caplog: pytest.LogCaptureFixture
) -> None:
    ztq.configure_queue(Q, max_pending=1, when_full=when_full, block_timeout=30)
    add(0)
    table = ztq.CronTable(
        [
            CronEntry("pressing", t.add.prepare((1, 1), queue=Q), "* * * * *"),
            CronEntry("other", t.add.prepare((2, 2), queue="elsewhere"), "* * * * *"),
        ]
    )
    started = time.monotonic()
    handles, _ = table.fire(now=(int(time.time()) // 60) * 60 + 0.5)
    assert time.monotonic() - started < 5  # the cron thread does not wait for room
    assert [h.queue for h in handles] == ["elsewhere"]
    assert "cron pressing: tick not fired: queue press is full" in caplog.text
    assert storage.queues.pending_count(Q) == 1


@pytest.mark.slow
def test_asyncio_producers_meet_the_same_limit(storage: Storage) -> None:
    ztq.configure_queue(Q, max_pending=1, when_full="block", block_timeout=0.3)

    async def main() -> None:
        await t.add.aenqueue((0, 0), queue=Q)
        with pytest.raises(QueueFull, match="after waiting"):
            await t.add.aenqueue((1, 0), queue=Q)
        ztq.configure_queue(Q, when_full="raise")
        with pytest.raises(QueueFull, match="is full"):
            await t.add.aenqueue((1, 0), queue=Q)

    asyncio.run(main())
    assert storage.queues.pending_count(Q) == 1


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"max_pending": 0}, "max_pending must be an int >= 1"),
        ({"max_pending": "10"}, "max_pending must be an int >= 1"),
        ({"when_full": "drop"}, "when_full must be 'raise', 'block' or 'buffer', not 'drop'"),
        ({"block_timeout": 0}, "block_timeout must be seconds"),
        ({"block_timeout": 7200}, "block_timeout must be seconds"),
        ({}, "give at least one setting"),
    ],
)
def test_bad_settings_are_refused_and_change_nothing(
    storage: Storage, settings: dict[str, object], message: str
) -> None:
    ztq.configure_queue(Q, max_pending=5)
    with pytest.raises(InvalidOption, match=message):
        ztq.configure_queue(Q, **settings)  # type: ignore[arg-type]
    assert storage.queues.queue_config(Q) == {"max_pending": 5, "when_full": "raise"}


def test_a_sharded_queue_cannot_have_a_pending_limit(storage: Storage) -> None:
    storage.queues.register_shards("wide", 3)
    with pytest.raises(InvalidOption, match="queue wide is sharded"):
        ztq.configure_queue("wide", max_pending=10)
