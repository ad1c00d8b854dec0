"""Exact error counters (docs/console.md, "Exact counts"): every script that moves a task
into or out of a queue's error list moves its group's and kind's counters, so a page reads
them in O(groups) at any size; a list written before them is counted once, in steps, and
moves during that rebuild keep the count exact."""

from __future__ import annotations

import json

import pytest

from ztq.core.engine.storage import EnqueueEntry, Storage
from ztq.core.monitor.groups import group_key, kind_key

Q = "cq"
TB = 'Traceback (most recent call last):\n  File "/srv/app/{f}.py", line {n}, in send\n{e}\n'
CASES = [  # (error, traceback): two frames of one kind, another kind, died, odd heads
    ("SMTPError: down", TB.format(f="mail", n=10, e="SMTPError: down")),
    ("SMTPError: down", TB.format(f="mail", n=22, e="SMTPError: down")),
    ("KeyError: 'x'", TB.format(f="data", n=5, e="KeyError")),
    ("WorkerLost: the task lost its worker 3 times", ""),
    ("ошибка: не вышло", TB.format(f="ру", n=1, e="x")),
    ("", ""),
    ("Err" + "é" * 100 + ": x", "File nowhere"),
]


def add(st: Storage, queue: str, task_id: str) -> None:
    entry = EnqueueEntry(task_id, json.dumps({"task": "m.t", "args": [task_id]}))
    st.execute([st.tasks.enqueue_op(queue, [entry])])


def fail_all(st: Storage, errors: list[tuple[str, str]], queue: str = Q) -> list[str]:
    ids = []
    for n, (error, tb) in enumerate(errors):
        task_id = f"id{len(ids)}-{n}-{error[:3]}"
        add(st, queue, task_id)
        [lease] = st.leases.fetch(queue, "w", "t", 60_000, 1)
        assert st.leases.fail(queue, "w", lease.id, lease.token, "m.t", error, tb) == "error"
        ids.append(lease.id)
    return ids


def recount(st: Storage, queue: str = Q) -> tuple[dict[str, int], dict[str, int]]:
    """The counts by reading every record of the error list (what the counters must say)."""
    groups: dict[str, int] = {}
    kinds: dict[str, int] = {}
    ids = st.client.zrange(st.keys.errors(queue), 0, -1)
    for rec in st.tasks.records(queue, ids):
        if rec is not None and rec.state.value == "error":
            groups[group_key(rec)] = groups.get(group_key(rec), 0) + 1
            kinds[kind_key(rec)] = kinds.get(kind_key(rec), 0) + 1
    return groups, kinds


def counted(st: Storage, queue: str = Q) -> tuple[dict[str, int], dict[str, int]]:
    c = st.errors.error_counts([queue])[queue]
    return ({k: v.count for k, v in c.groups.items()}, {k: v.count for k, v in c.kinds.items()})


@pytest.mark.slow
def test_every_move_keeps_the_counters_exact(storage: Storage) -> None:
    ids = fail_all(storage, CASES * 3)
    assert counted(storage) == recount(storage)
    groups, kinds = counted(storage)
    assert sum(groups.values()) == len(ids) and len(kinds) < len(groups)  # two frames, one kind
    info = storage.errors.error_counts([Q])[Q].groups
    assert {v.info["t"] for v in info.values()} >= {"SMTPError", "KeyError", "unknown"}
    storage.tasks.requeue(Q, "error", ids[:2])
    assert counted(storage) == recount(storage)
    storage.errors.redo_errors(Q, "b1", oldest=3)
    assert counted(storage) == recount(storage)
    assert storage.errors.trash_errors(Q, "b2", ids[5:9])[0] == 4
    assert counted(storage) == recount(storage)
    storage.errors.restore_errors(Q, "b2", ids[5:7])
    assert counted(storage) == recount(storage)
    storage.tasks.remove(Q, ids[9:11])
    storage.tasks.remove(Q, purge="errors", limit=2)
    assert counted(storage) == recount(storage)
    add(storage, Q, ids[-1])  # an enqueue of a failed id acts as a redo
    assert counted(storage) == recount(storage)
    storage.tasks.remove(Q, purge="errors", limit=1000)
    assert counted(storage) == ({}, {})
    assert storage.client.hget(storage.keys.tasks(Q), "#egs") is None


@pytest.mark.slow
@pytest.mark.parametrize("step", [1, 3, 1000])
def test_a_list_written_before_the_counters_is_counted_once(storage: Storage, step: int) -> None:
    ids = fail_all(storage, CASES * 2)
    tasks = storage.keys.tasks(Q)
    # as a release before them left it: no counters, no keys kept on the records
    fields = [f for f in storage.client.hkeys(tasks) if f.startswith("#e")]
    storage.client.hdel(tasks, *fields)
    for i in ids:
        raw = storage.client.hget(tasks, i)
        head, _, body = raw.partition("\n")
        meta = json.loads(head)
        meta.pop("eg"), meta.pop("ek")
        storage.client.hset(tasks, i, json.dumps(meta) + "\n" + body)
    assert storage.errors.count_errors(Q, step=step) >= len(ids) // step
    assert counted(storage) == recount(storage)


@pytest.mark.slow
def test_moves_during_the_rebuild_count_once(storage: Storage) -> None:
    ids = fail_all(storage, CASES * 2)
    tasks = storage.keys.tasks(Q)
    fields = [f for f in storage.client.hkeys(tasks) if f.startswith("#e")]
    storage.client.hdel(tasks, *fields)
    keys = [tasks, storage.keys.errors(Q)]
    assert storage.call("count_errors", keys, [4]) == 0  # part of the list counted
    storage.tasks.requeue(Q, "error", [ids[0], ids[-1]])  # one counted, one not yet
    fail_all(storage, CASES[:2])  # new failures past the position
    storage.errors.trash_errors(Q, "b1", ids[1:3])
    storage.errors.restore_errors(Q, "b1", ids[1:2])  # back before the position
    storage.errors.count_errors(Q, step=3)
    assert counted(storage) == recount(storage)
