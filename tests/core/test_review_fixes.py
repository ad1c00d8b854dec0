"""Fixes of a review, each on a real Redis: a coalesced batch after ``SCRIPT FLUSH`` in
EVALSHA mode, an async enqueue where functions are refused and the script cache is cold, an
async producer after its master was demoted, an async connection error retried as redis-py
does, and a restore of a whole trash batch where some ids came back."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

import ztq.core as ztq
from ztq.core.client.aio import AsyncStorage, astorage
from ztq.core.engine.scripts import SCRIPTS
from ztq.core.engine.storage import Storage
from ztq.core.errors import RedisReadOnly
from ztq.worker.embedded import RedisProcess, free_port

app = ztq.App("reviewed", prefix="rf")


@app.task(queue="rf", unique=False)
def job(n: int) -> None:
    pass


@app.task(queue="tq")
def failing(n: int) -> None:
    pass


@pytest.fixture
def storage(redis_url: str) -> Iterator[Storage]:
    app.connect(redis_url)
    yield app.storage()
    app.disconnect_all()


def ready(storage: Storage, queue: str = "rf") -> list[str]:
    client = redis.Redis.from_url(storage.url, decode_responses=True)
    try:
        return list(client.lrange(storage.keys.ready(queue, "normal"), 0, -1))
    finally:
        client.close()


def test_a_coalesced_batch_in_evalsha_mode_reloads_the_scripts_after_a_flush(
    storage: Storage,
) -> None:
    pool = storage.client.connection_pool
    SCRIPTS.packed._functions[pool] = False  # as on Redis 6.2, or an ACL without FCALL
    ops = [
        storage.tasks.enqueue_op("rf", [(f"id{i}", "[1]", "normal", 0, 0, "", 0)]) for i in range(3)
    ]
    assert not any(isinstance(r, Exception) for r in storage.execute_each(ops[:1]))
    storage.client.script_flush()  # Redis restarted: its script cache is empty
    for _ in range(2):
        replies = storage.execute_each(ops)
        assert not any(isinstance(r, ResponseError) for r in replies), replies
    assert sorted(ready(storage)) == ["id0", "id1", "id2"]


def test_an_async_enqueue_without_functions_loads_the_scripts(
    redis_server: RedisProcess, redis_url: str
) -> None:
    admin = redis.Redis(port=redis_server.port)
    admin.execute_command("ACL", "SETUSER", "nofn", "on", "nopass", "~*", "&*", "+@all",
                          "-fcall", "-function")  # fmt: skip
    admin.script_flush()  # a cold script cache
    try:
        app.connect(f"redis://nofn@127.0.0.1:{redis_server.port}/0")

        async def send() -> list[str]:
            return [(await job.adelay(i)).id for i in range(2)]

        ids = asyncio.run(send())
        assert sorted(ready(app.storage())) == sorted(ids)
    finally:
        app.disconnect_all()
        admin.execute_command("ACL", "DELUSER", "nofn")
        admin.close()


def test_an_async_producer_drops_its_connection_to_a_demoted_master(
    storage: Storage, redis_server: RedisProcess
) -> None:
    admin = redis.Redis(port=redis_server.port)

    async def main() -> list[Any]:
        st = await astorage(app)
        await job.adelay(1)
        admin.replicaof("127.0.0.1", free_port())  # read-only now, as after a failover
        try:
            with pytest.raises(RedisReadOnly):
                await job.adelay(2)
        finally:
            admin.replicaof("no", "one")
        pool = st.client.connection_pool
        return [c.is_connected for c in pool._available_connections]

    try:
        left = asyncio.run(main())
    finally:
        admin.close()
    assert left and not any(left)  # the next call connects afresh (to the new master)


def test_an_async_connection_error_is_retried_on_the_pipeline(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = AsyncStorage._send
    calls = []

    async def flaky(self: AsyncStorage, frames: list[bytes]) -> list[Any]:
        calls.append(len(frames))
        if len(calls) == 1:
            raise RedisConnectionError("Connection reset by peer")
        return await real(self, frames)

    monkeypatch.setattr(AsyncStorage, "_send", flaky)

    async def send() -> str:
        return (await job.adelay(1)).id

    task_id = asyncio.run(send())
    assert calls and ready(storage) == [task_id]


@pytest.mark.slow
def test_restoring_a_whole_batch_skips_the_ids_that_came_back(storage: Storage) -> None:
    ids = [failing.delay(i).id for i in range(30)]
    leases = storage.leases.fetch("tq", "w", "t", 60000, 30)
    for lease in leases:
        assert storage.leases.fail("tq", "w", lease.id, lease.token, "failing", "E", "tb",
                            retry_delay_ms=-1) == "error"  # fmt: skip
    assert storage.errors.trash_errors("tq", "b1", ids)[0] == 30
    for i in range(20):
        failing.delay(i)  # the same ids again: they have records again
    assert storage.errors.restore_errors("tq", "b1", limit=4) == (10, 20)
    client = redis.Redis.from_url(storage.url, decode_responses=True)
    try:
        left = client.hkeys(storage.keys.trash("tq", "b1"))
        assert len(left) == 20 and all(client.hexists(storage.keys.tasks("tq"), i) for i in left)
        assert client.zcard(storage.keys.errors("tq")) == 10
    finally:
        client.close()
