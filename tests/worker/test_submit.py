"""``Storage.submit``: scripts sent now, their replies read later (a worker thread runs a
batch in between). What it promises is what ``execute`` promises, whatever happens between
the two halves: the same replies, the scripts loaded again when Redis lost them, a lost
connection answered by sending again without leasing twice."""

from __future__ import annotations

from typing import Any

import ztq.core as ztq
from tests import sample_tasks as t
from tests.worker.conftest import wait_for
from ztq.core.engine.storage import Storage


def running(storage: Storage, queue: str = "default") -> int:
    return storage.client.zcard(storage.keys.running(queue))


def fetch_op(storage: Storage, limit: int) -> tuple:
    return storage.leases.fetch_op("default", "w1", "t1", 60_000, limit)


def test_submitted_scripts_run_before_their_replies_are_read(storage: Storage) -> None:
    handles = [t.add.delay(i, i) for i in range(5)]
    results = storage.submit([fetch_op(storage, 3)])
    if not (storage.is_cluster or storage.in_memory):  # the packed path: Redis ran it
        # while the caller went on (the others make the whole call when the replies are read)
        wait_for(lambda: running(storage) == 3)
    leased = storage.leases.parse_fetch("default", results()[0])
    assert [x.id for x in leased] == [h.id for h in handles[:3]]
    assert running(storage) == 3
    [again] = storage.execute([fetch_op(storage, 5)])
    assert [x.id for x in storage.leases.parse_fetch("default", again)] == [
        h.id for h in handles[3:]
    ]


def test_a_script_cache_lost_before_the_send_is_loaded_again(storage: Storage) -> None:
    handles = [t.add.delay(i, i) for i in range(2)]
    storage.execute([fetch_op(storage, 0)])  # the client has loaded the scripts
    if not storage.is_cluster:
        version = "7" if storage.in_memory else storage.client.info("server")["redis_version"]
        if int(version.split(".")[0]) >= 7:
            storage.client.function_flush()  # the library (6.2 has no functions)
        storage.client.script_flush()
    leased = storage.leases.parse_fetch("default", storage.submit([fetch_op(storage, 5)])()[0])
    assert sorted(x.id for x in leased) == sorted(h.id for h in handles)


def test_a_reply_lost_between_send_and_read_leases_nothing_twice(proxy: Any) -> None:
    """The fetch ran, then its connection closed before the reply came (a proxy drops it):
    the read sends it again, and the fetch's request id gives the same leases back, taking
    no more."""
    storage = ztq.get_storage()
    handles = [t.add.delay(i, i) for i in range(6)]
    proxy.arm("fetch")
    results = storage.submit([fetch_op(storage, 3)])
    wait_for(lambda: proxy.dropped == 1)
    leased = storage.leases.parse_fetch("default", results()[0])
    assert [x.id for x in leased] == [h.id for h in handles[:3]]
    assert running(storage) == 3  # not 6: the same three, not three more
    assert len({x.token for x in leased}) == 3
