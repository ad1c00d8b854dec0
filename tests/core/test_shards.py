"""One queue over several hash slots (``shards=N``): where enqueue puts a task, that dedup
and every way of finding a task still hold, and what the read side folds back into one
queue. On the machine's Redis, Redis 6.2 and the local Cluster (where the shards really are
in different slots)."""

from __future__ import annotations

import asyncio
import re
import zlib
from pathlib import Path
from typing import Any

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from ztq.core.client.app import App
from ztq.core.engine import keys
from ztq.core.engine.storage import Storage
from ztq.core.errors import ConfigError, InvalidOption
from ztq.core.monitor import overview
from ztq.core.monitor import queues as monitor
from ztq.worker.config import WorkerConfig
from ztq.worker.worker import Worker

SHARDS = ("hot", "hot~1", "hot~2")


def drain(storage: Storage, queues: list[str] | None = None) -> int:
    worker = Worker(WorkerConfig(imports=("tests.sample_tasks",)), storage)
    return worker.drain(queues or ["hot"])


@pytest.mark.slow
def test_a_task_goes_to_the_shard_its_id_hashes_to(storage: Storage) -> None:
    handles = [t.spread.delay(n) for n in range(60)]
    for h in handles:
        assert h.queue == keys.shard_name("hot", zlib.crc32(h.id.encode()) % 3)
        assert storage.tasks.record(h.queue, h.id) is not None
    by_shard = {q: sum(h.queue == q for h in handles) for q in SHARDS}
    assert all(n >= 8 for n in by_shard.values()), by_shard  # 60 ids over 3 shards
    # every shard is known from the first enqueue on, even before a task landed in it
    assert set(SHARDS) <= set(storage.queues.names())
    assert storage.queues.shards_of("hot") == list(SHARDS)


@pytest.mark.cluster
def test_the_shards_are_in_different_slots_on_cluster(redis_cluster: Any) -> None:
    redis_cluster.flush()
    storage = ztq.connect(redis_cluster.url)
    try:
        handles = [t.spread.delay(n) for n in range(30)]
        slots = {storage.client.keyslot(storage.keys.tasks(q)) for q in SHARDS}
        assert len(slots) == 3
        nodes = {storage.client.get_node_from_key(storage.keys.tasks(q)).name for q in SHARDS}
        assert len(nodes) > 1  # a busy queue now writes to more than one master
        assert drain(storage) == 30 and all(h.state.value == "done" for h in handles)
    finally:
        ztq.disconnect_all()


def test_dedup_holds_across_shards(storage: Storage) -> None:
    first = t.spread.delay(7)
    again = t.spread.delay(7)
    assert (again.id, again.queue, again.outcome) == (first.id, first.queue, "exists")
    assert sum(monitor.queue_stats(storage, list(SHARDS))[i].pending for i in range(3)) == 1
    assert asyncio.run(t.spread.adelay(7)).queue == first.queue  # the asyncio producer too


@pytest.mark.slow
def test_every_way_of_finding_a_task_finds_it_in_its_shard(storage: Storage) -> None:
    handles = [t.spread.delay(n) for n in range(12)]
    h = next(h for h in handles if h.queue == "hot~2")
    assert t.spread.handle(h.id).queue == "hot~2"
    assert ztq.ping(h.id, "hot") == "queued"
    assert ztq.ping(h.id) == "queued"
    assert [r.queue for r in monitor.find_task(storage, h.id, "hot")] == ["hot~2"]
    assert drain(storage) == 12
    assert h.get(timeout=5) == h.record().result == int(h.record().args[0])  # type: ignore[union-attr]


def test_a_transaction_and_a_batch_put_each_task_in_its_shard(storage: Storage) -> None:
    with ztq.transaction():
        buffered = [t.spread.delay(n) for n in range(9)]
    for h in buffered:
        assert h.queue == keys.shard_name("hot", zlib.crc32(h.id.encode()) % 3)
        assert ztq.ping(h.id, "hot") == "queued"
        assert storage.tasks.record(h.queue, h.id) is not None


def test_a_call_option_and_a_callback_keep_their_shard_count(storage: Storage) -> None:
    call = t.add.prepare((1, 2), queue="wide", shards=4)
    h = call.enqueue()
    assert h.queue == keys.shard_for("wide", h.id, 4)
    assert storage.queues.shards_of("wide") == ["wide", "wide~1", "wide~2", "wide~3"]
    again = ztq.TaskCall.from_dict(call.to_dict())
    assert again.shards == 4 and again.enqueue().outcome == "exists"


@pytest.mark.slow
def test_the_read_side_folds_the_shards_into_one_queue(storage: Storage) -> None:
    for n in range(30):
        t.spread.delay(n)
    later = {t.spread.enqueue((n,), delay=3600).queue for n in range(100, 112)}
    assert later == set(SHARDS)
    per_shard = monitor.queue_stats(storage, list(SHARDS))
    [folded] = monitor.folded_stats(storage, ["hot"])
    assert folded.name == "hot" and folded.shards == list(SHARDS)
    assert folded.pending == sum(s.pending for s in per_shard) == 30
    assert folded.delayed == 12
    assert folded.head_enqueued == min(s.head_enqueued or 10**15 for s in per_shard)
    rows = overview.queues(storage, storage.queues.names(), 30.0)
    assert [r["name"] for r in rows] == ["hot"]  # one row, not three
    assert rows[0]["pending"] == 30 and len(rows[0]["shards"]) == 3
    shard_rows = overview.queues(storage, list(SHARDS), 30.0, fold=False)
    assert [r["name"] for r in shard_rows] == list(SHARDS)


def test_pause_and_resume_act_on_every_shard(storage: Storage) -> None:
    t.spread.delay(1)
    storage.queues.pause("hot")
    assert all(storage.queues.is_paused(q) for q in SHARDS)
    assert monitor.folded_stats(storage, ["hot"])[0].paused
    assert drain(storage) == 0
    storage.queues.resume("hot")
    assert not any(storage.queues.is_paused(q) for q in SHARDS)
    storage.queues.pause("hot~1")  # one shard alone, from its own page
    assert [storage.queues.is_paused(q) for q in SHARDS] == [False, True, False]


def test_a_queue_gets_one_shard_count(storage: Storage) -> None:
    app = App()
    app.task(t.add.fn, name="a1", queue="q", shards=2)
    app.task(t.add.fn, name="a2", queue="q")  # no count: the declared one applies
    assert app.registry.shards("q") == 2
    with pytest.raises(ConfigError, match="every task of a queue must agree"):
        app.task(t.add.fn, name="a3", queue="q", shards=3)
    for bad in (0, 65, True, "2"):
        with pytest.raises(InvalidOption, match="shards must be an int from 1 to 64"):
            t.add.prepare((1, 2), shards=bad)


def test_shard_names_cannot_be_queue_names() -> None:
    with pytest.raises(ztq.InvalidName):
        keys.check_queue("hot~1")
    assert keys.check_physical("hot~1") == "hot~1"
    assert keys.split_shard("hot~12") == ("hot", 12)
    assert keys.split_shard("hot") == ("hot", 0)
    for bad in ("hot~0", "hot~64", "hot~", "~1", "hot~1~2"):
        with pytest.raises(ztq.InvalidName):
            keys.check_physical(bad)


def test_the_scaling_doc_example_runs_as_it_says(storage: Storage) -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "scaling.md").read_text("utf-8")
    section = text.split("\n## One busy queue over several masters: shards\n", 1)[1]
    [code] = re.findall(r"^```python\n(.*?)^```", section.split("\n## ", 1)[0], re.S | re.M)
    printed: list[str] = []
    namespace: dict[str, Any] = {"__name__": "docs_shards_example", "print": printed.append}
    exec(compile(code, "docs/scaling.md", "exec"), namespace)  # noqa: S102 - our own doc
    h = namespace["h"]
    assert printed == [h.queue] and h.queue == keys.shard_for("hot", h.id, 3)
    assert storage.queues.shards_of("hot") == list(SHARDS)


def test_one_transaction_places_each_task_of_many_queues_and_shard_counts(
    storage: Storage,
) -> None:
    """send_many looks each (app, connection, queue, shards) up once: tasks of a sharded
    queue, of plain queues and of one queue sent with and without a shard count, mixed."""
    with ztq.transaction() as handles:
        for n in range(4):
            t.spread.delay(n)  # 'hot': 3 shards, from the task
            t.add.delay(n, 0)  # 'default'
            t.add.prepare((n, 1), queue="wide", shards=4).enqueue()
            t.add.prepare((n, 2), queue="wide").enqueue()  # 'wide' itself
    want = [3, 1, 4, 1] * 4
    assert len(handles) == 16
    for h, shards in zip(handles, want, strict=True):
        base = keys.split_shard(h.queue)[0]
        assert h.queue == keys.shard_for(base, h.id, shards)
        assert storage.tasks.record(h.queue, h.id) is not None
