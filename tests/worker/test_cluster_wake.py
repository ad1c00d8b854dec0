"""On a Redis Cluster a thread serving several queues wakes the moment a task arrives on
any of them (not only the first), without polling; a token taken while nobody waits goes
back to the list for the next waiter."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from tests.worker.conftest import FAST, wait_for
from ztq.core.engine.storage import Storage
from ztq.core.engine.waits import MultiWait
from ztq.worker.config import ThreadSpec, WorkerConfig
from ztq.worker.worker import Worker

pytestmark = pytest.mark.cluster
QUEUES = ("alpha", "bravo", "charlie", "delta")
IDLE = 12.0  # far longer than any wake-up may take, even on a loaded machine
WOKEN = 4.0  # a start within this was woken by the task, not by the idle wait's end


@pytest.fixture
def cluster_storage(redis_cluster: Any) -> Iterator[Storage]:
    redis_cluster.flush()
    storage = ztq.connect(redis_cluster.url)
    yield storage
    ztq.disconnect_all()


@pytest.fixture
def idle_worker(cluster_storage: Storage) -> Iterator[Worker]:
    """One thread serving four queues (four slots), long idle waits, no task yet."""
    cfg = WorkerConfig(redis_url="redis+cluster://unused", name="wake-test",
                       imports=("tests.sample_tasks",),
                       threads=(ThreadSpec("many-0", QUEUES),),
                       **{**FAST, "idle_wait": IDLE, "heartbeat": 1.0, "lease": 5.0})  # fmt: skip
    worker = Worker(cfg, cluster_storage)
    th = threading.Thread(target=worker.run, daemon=True)
    th.start()
    try:
        yield worker
    finally:
        worker.request_stop()
        th.join(20)


def _armed(storage: Storage, queues: tuple[str, ...]) -> bool:
    keys = tuple(storage.keys.wake(q) for q in queues)
    return any(
        w.keys == list(keys) and w.armed.is_set() for w in storage.waits._multi_waits.values()
    )


def test_the_queues_really_are_in_different_slots(cluster_storage: Storage) -> None:
    slots = {cluster_storage.client.keyslot(cluster_storage.keys.wake(q)) for q in QUEUES}
    assert len(slots) == len(QUEUES)


@pytest.mark.parametrize("queue", ["delta", "bravo", "alpha"])
def test_a_task_on_any_queue_starts_at_once(
    cluster_storage: Storage, idle_worker: Worker, queue: str
) -> None:
    wait_for(lambda: _armed(cluster_storage, QUEUES), timeout=15)  # the thread is idle
    started = time.monotonic()
    handle = t.add.enqueue((1, 2), queue=queue)
    wait_for(lambda: ztq.ping(handle) == "done", timeout=IDLE - 1, every=0.005)
    took = time.monotonic() - started
    print(f"{queue}: enqueue -> done in {took * 1000:.0f} ms on an idle 4-queue thread")
    assert took < WOKEN  # ~10 ms on a quiet machine; 1.9 s seen at load 16


def test_a_delayed_task_on_another_queue_is_promoted_on_time(
    cluster_storage: Storage, idle_worker: Worker
) -> None:
    """The scheduler waits on the schedule lists of every queue the same way."""
    wait_for(lambda: _armed(cluster_storage, QUEUES), timeout=15)
    handle = t.add.enqueue((3, 4), queue="charlie", delay=0.3)
    started = time.monotonic()
    wait_for(lambda: ztq.ping(handle) == "done", timeout=IDLE - 1, every=0.005)
    assert time.monotonic() - started < WOKEN


def test_a_token_taken_while_nobody_waits_goes_back(cluster_storage: Storage) -> None:
    keys = [cluster_storage.keys.wake(q) for q in ("echo", "foxtrot")]
    waiter = MultiWait(cluster_storage.client, keys, threading.current_thread())
    assert not waiter.wait(0.3)  # arms the watchers; they stay blocked after it returns
    cluster_storage.client.lpush(keys[1], "1")  # nobody waits now
    # a watcher takes it, finds its owner gone away, and puts it back
    wait_for(lambda: cluster_storage.client.llen(keys[1]) == 1, timeout=10)
    time.sleep(0.2)
    assert cluster_storage.client.llen(keys[1]) == 1  # and no one eats it afterwards
    assert waiter.wait(2.0)  # the next wait finds it at once
