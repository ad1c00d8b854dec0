"""Deleting or moving a waiting task costs the same whatever the queue holds (issue 12).

Timings would be flaky, so these tests count what Redis does instead: the commands a delete,
a cancel and a ``first=True`` move run (``INFO commandstats`` counts the commands of a script
too) are the same with 10 tasks waiting and with 3,000, and none of them is ``LREM`` (a scan
of the list). The entry left behind (a leftover) is invisible: counts, pages and fetches skip
it, a purge takes it. ``bench/growth.py`` measures the time at 1M.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ztq.core.engine.storage import EnqueueEntry, Storage
from ztq.core.monitor import queues as monitor

Q = "cost"
PAYLOAD = '{"task":"cost.t","args":[],"kwargs":{}}'


def fill(storage: Storage, n: int) -> list[str]:
    ids = [f"t{i}" for i in range(n)]
    for start in range(0, n, 500):
        batch = [EnqueueEntry(i, PAYLOAD) for i in ids[start : start + 500]]
        storage.call(*storage.tasks.enqueue_op(Q, batch))
    return ids


def commands(storage: Storage, move: Callable[[], Any]) -> dict[str, int]:
    """The commands ``move`` made Redis run, by name, with how many calls each."""
    storage.client.delete(storage.keys.wake(Q))  # a hint capped at 16 tokens: start empty
    storage.client.config_resetstat()
    move()
    stats = storage.client.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): int(v["calls"])
        for name, v in stats.items()
        if name not in ("cmdstat_config", "cmdstat_info")
    }


def moves(storage: Storage, ids: list[str]) -> dict[str, dict[str, int]]:
    """What a delete, a cancel and a move to the head cost, each in the middle of the list."""
    mid = len(ids) // 2
    entry = [EnqueueEntry(ids[mid + 2], PAYLOAD, first=True)]
    return {
        "delete": commands(storage, lambda: storage.tasks.remove(Q, [ids[mid]])),
        "cancel": commands(storage, lambda: storage.tasks.remove(Q, [ids[mid + 1]], cancel=True)),
        "first": commands(storage, lambda: storage.call(*storage.tasks.enqueue_op(Q, entry))),
    }


@pytest.mark.parametrize("storage", ["redis"], indirect=True)
def test_a_delete_runs_the_same_commands_with_10_or_3000_tasks_waiting(storage: Storage) -> None:
    # a fresh Redis loads the scripts on their first call: do that before counting (alone,
    # this test counted the loading as the cost of the small delete)
    moves(storage, fill(storage, 10))
    storage.tasks.remove(Q, purge="ready", limit=10_000)
    small = moves(storage, fill(storage, 10))
    storage.tasks.remove(Q, purge="ready", limit=10_000)
    big = moves(storage, fill(storage, 3000))
    assert big == small
    for move, ran in big.items():
        assert "lrem" not in ran and "lpos" not in ran, (move, ran)
        assert sum(ran.values()) < 20, (move, ran)  # a handful, not one per task


def test_a_leftover_is_skipped_by_counts_pages_and_fetches(storage: Storage) -> None:
    ids = fill(storage, 6)
    assert storage.tasks.remove(Q, [ids[1]]) == (1, 1)
    first = [EnqueueEntry(ids[4], PAYLOAD, first=True)]
    assert storage.call(*storage.tasks.enqueue_op(Q, first)) == [ids[4], "moved"]
    assert storage.client.llen(storage.keys.ready(Q, "normal")) == 7  # two leftovers
    assert storage.queues.pending_count(Q) == 5
    [stats] = monitor.queue_stats(storage, [Q])
    assert stats.ready["normal"] == 5
    order = [ids[4], ids[0], ids[2], ids[3], ids[5]]
    page = monitor.pending_page(storage, Q, 0, 50)
    assert [r.id for r in page.rows] == order and page.total == 5 and page.next is None
    # enqueued again while its leftover waits: an entry of its own, at the tail
    assert storage.call(*storage.tasks.enqueue_op(Q, [EnqueueEntry(ids[1], PAYLOAD)])) == [
        ids[1],
        "added",
    ]
    assert storage.client.lindex(storage.keys.ready(Q, "normal"), -1) == f"{ids[1]}#1"
    taken = [lease.id for lease in storage.leases.fetch(Q, "w", "t", 60_000, 10)]
    assert taken == [*order, ids[1]]
    assert storage.client.llen(storage.keys.ready(Q, "normal")) == 0
    assert storage.client.hgetall(storage.keys.tasks(Q)).keys() == set(taken)  # no marks left


@pytest.mark.slow
def test_a_page_behind_many_leftovers_is_partial_not_slow(storage: Storage) -> None:
    ids = fill(storage, 1500)
    assert storage.tasks.remove(Q, ids[:1300]) == (1300, 1300)
    page = monitor.pending_page(storage, Q, 0, 10, budget=1000)
    assert page.rows == [] and page.partial and page.scanned == 1010 and page.total == 200
    assert page.next == "1010"
    page = monitor.pending_page(storage, Q, int(page.next), 10, budget=1000)
    assert [r.id for r in page.rows] == ids[1300:1310] and not page.partial
    assert [r.position for r in page.rows] == list(range(1300, 1310))
    # a purge takes the leftovers with the tasks, and counts only the tasks as taken
    assert storage.tasks.remove(Q, purge="ready", limit=2000) == (200, 200)
    assert storage.client.hlen(storage.keys.tasks(Q)) == 0


def purge_as_the_cli_does(storage: Storage) -> int:
    """``ztq queue purge`` (worker/cli/ops.py): the tasks counted when it starts bound it, the
    batches' ``taken`` advance it, their ``deleted`` are what it reports."""
    [stats] = monitor.queue_stats(storage, [Q], minutes=0)
    present, total, taken_all = stats.pending, 0, 0
    while taken_all < present:
        deleted, taken = storage.tasks.remove(
            Q, purge="ready", limit=min(1000, present - taken_all)
        )
        if not taken:
            break
        total, taken_all = total + deleted, taken_all + taken
    return total


@pytest.mark.parametrize("move", ["first", "first-high", "delete"])
def test_a_purge_after_a_move_takes_every_task_once(storage: Storage, move: str) -> None:
    """Issue 24: a purge after a ``first=True`` move deleted 2 of 3 tasks and left a live
    one (record and all) behind, as its batch counted the leftover among the tasks taken."""
    ids = fill(storage, 3)
    if move == "delete":  # a leftover before the tasks: t0's
        assert storage.tasks.remove(Q, [ids[0]]) == (1, 1)
        ids = [*ids[1:], "t3"]
        storage.call(*storage.tasks.enqueue_op(Q, [EnqueueEntry("t3", PAYLOAD)]))
    else:
        prio = "high" if move == "first-high" else "normal"
        first = [EnqueueEntry(ids[1], PAYLOAD, priority=prio, first=True)]
        assert storage.call(*storage.tasks.enqueue_op(Q, first)) == [ids[1], "moved"]
    assert storage.queues.pending_count(Q) == 3
    assert purge_as_the_cli_does(storage) == 3
    assert storage.client.hgetall(storage.keys.tasks(Q)) == {}  # no record, no mark
    for level in ("high", "normal", "low"):
        assert storage.client.llen(storage.keys.ready(Q, level)) == 0
    assert storage.tasks.remove(Q, purge="ready", limit=1000) == (0, 0)


def test_a_purge_batch_counts_tasks_not_leftovers(storage: Storage) -> None:
    ids = fill(storage, 4)
    assert storage.tasks.remove(Q, ids[:2]) == (2, 2)  # two leftovers at the head
    assert storage.tasks.remove(Q, purge="ready", limit=1) == (1, 1)  # both dropped, t2 taken
    assert storage.client.lrange(storage.keys.ready(Q, "normal"), 0, -1) == [ids[3]]
    assert set(storage.client.hkeys(storage.keys.tasks(Q))) == {ids[3]}  # marks dropped too
    assert storage.tasks.remove(Q, purge="ready", limit=1) == (1, 1)
    assert storage.tasks.remove(Q, purge="ready", limit=1) == (0, 0)


@pytest.mark.parametrize("storage", ["redis"], indirect=True)
def test_a_purge_behind_a_long_run_of_leftovers_still_takes_the_task(storage: Storage) -> None:
    """A script call drops a bounded number of leftovers; ``Tasks.remove`` calls again
    until it takes a task or the lists are empty, so ``taken == 0`` still means done."""
    ids = fill(storage, 2600)
    assert storage.tasks.remove(Q, ids[:2500]) == (2500, 2500)
    assert storage.tasks.remove(Q, purge="ready", limit=10) == (10, 10)
    assert storage.tasks.remove(Q, purge="ready", limit=1000) == (90, 90)
    assert storage.tasks.remove(Q, purge="ready", limit=1000) == (0, 0)
    assert storage.client.hlen(storage.keys.tasks(Q)) == 0
