"""A producer meets Redis faults (issue 28 point 3, issue 26): a full Redis, a read-only
replica, an unreachable Redis reach the caller of ``delay``, ``adelay``, a coalesced batch
and ``transaction()`` as a ZtqError subclass naming the cause and the remedy, from the
redis-py error, with nothing half-written; and a Redis killed while 16 threads enqueue loses
no task whose handle was returned, each failed call raising its own ZtqError."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError, ReadOnlyError

import ztq.core as ztq
from tests.core.test_coalesce import (
    Held,
    coalesce_from_two_threads,  # noqa: F401 (autouse)
    run,
    until,
)
from ztq.core.errors import RedisFull, RedisReadOnly, RedisUnreachable
from ztq.worker.embedded import RedisProcess, free_port

app = ztq.App("faulty", prefix="pf")


@app.task(queue="pf")
def job(n: int) -> None:
    pass


@pytest.fixture
def server() -> Iterator[RedisProcess]:
    """A Redis of this module's own (it is filled, demoted and killed)."""
    proc = RedisProcess(appendonly=True, extra=["--maxmemory-policy", "noeviction"]).start()
    app.connect(proc.url)
    yield proc
    app.disconnect_all()
    proc.cleanup()


def stored(proc: RedisProcess) -> dict[str, Any]:
    """Everything a producer writes to queue pf: the records and the ready list."""
    client = redis.Redis(port=proc.port, decode_responses=True)
    keys = app.storage().keys
    out = {
        "records": client.hgetall(keys.tasks("pf")),
        "ready": client.lrange(keys.ready("pf", "normal"), 0, -1),
    }
    client.close()
    return out


@pytest.mark.slow
def test_a_full_redis_is_redis_full_for_every_way_of_enqueueing(
    server: RedisProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    job.delay(0)  # the queue is registered: the enqueue script is what meets the full Redis
    admin = redis.Redis(port=server.port)
    admin.config_set("maxmemory", max(1, int(admin.info("memory")["used_memory"]) - 1024))
    before = stored(server)

    def check(exc: BaseException) -> None:
        assert isinstance(exc, RedisFull) and isinstance(exc, ztq.ZtqError)
        assert isinstance(exc.__cause__, OutOfMemoryError)
        assert "maxmemory" in str(exc) and "nothing was enqueued" in str(exc)

    with pytest.raises(RedisFull) as one:
        job.delay(1)
    check(one.value)
    with pytest.raises(RedisFull) as txn, ztq.transaction():
        for n in range(2, 600):  # two script calls
            job.delay(n)
    check(txn.value)
    with pytest.raises(RedisFull) as coro:
        asyncio.run(job.adelay(700))
    check(coro.value)
    held = Held(app.storage(), monkeypatch)  # two callers queued behind a third: one batch
    first, first_out = run(lambda: job.delay(800))
    assert held.entered.wait(10)
    others = []
    for n in (801, 802):
        others.append(run(lambda n=n: job.delay(n)))
        held.queued(len(others))
    held.release()
    for thread, _ in [(first, first_out), *others]:
        thread.join(10)
    errors = [out["error"] for _, out in [(first, first_out), *others]]
    for exc in errors:
        check(exc)
    assert len({id(e) for e in errors}) == 3  # each caller raised its own
    assert stored(server) == before  # nothing half-written
    admin.config_set("maxmemory", 0)
    assert job.delay(1).outcome == "added"  # room again: it goes through
    admin.close()


def test_a_replica_is_redis_read_only(server: RedisProcess) -> None:
    admin = redis.Redis(port=server.port)
    admin.replicaof("127.0.0.1", free_port())  # a master that is not there: read-only
    try:
        for send in (lambda: job.delay(1), lambda: asyncio.run(job.adelay(2))):
            with pytest.raises(RedisReadOnly) as got:
                send()
            assert isinstance(got.value, ztq.ConnectionFailed)
            assert isinstance(got.value.__cause__, ReadOnlyError)
            assert "read-only" in str(got.value) and "master" in str(got.value)
    finally:
        admin.replicaof("no", "one")
        admin.close()


@pytest.mark.slow
def test_an_unreachable_redis_is_redis_unreachable() -> None:
    other = ztq.App("nowhere", redis_url=f"redis://127.0.0.1:{free_port()}/0", prefix="pf")
    fn = other.task(queue="pf", name="tests.nowhere")(lambda: None)
    for send in (fn.delay, lambda: asyncio.run(fn.adelay())):
        with pytest.raises(RedisUnreachable) as got:
            send()
        assert isinstance(got.value.__cause__, RedisConnectionError)
        assert "cannot be reached" in str(got.value)
    other.disconnect_all()


@pytest.mark.slow
def test_redis_killed_while_16_threads_enqueue(server: RedisProcess) -> None:
    """Every call either returned a handle whose task is there once Redis is back (it
    writes each command to its append-only file before answering), or raised its own
    ZtqError from the redis-py error; no thread hangs."""
    results: list[list[Any]] = [[] for _ in range(16)]
    failed = [threading.Event() for _ in range(16)]

    def producer(t: int) -> None:
        n = 0
        while not failed[t].is_set():
            n += 1
            try:
                results[t].append(job.delay(t * 1_000_000 + n))
            except BaseException as exc:
                results[t].append(exc)
                failed[t].set()

    threads = [threading.Thread(target=producer, args=(t,), daemon=True) for t in range(16)]
    for thread in threads:
        thread.start()
    until(lambda: all(len(r) >= 20 for r in results))
    server.stop()  # SIGKILL
    for thread in threads:
        thread.join(20)
        assert not thread.is_alive()
    assert app.storage().coalescer.batches > 0  # the calls were coalesced
    server.start()  # the same port and directory: the append-only file is read back
    client = redis.Redis(port=server.port)
    until(lambda: client.info("persistence")["loading"] == 0)
    tasks = app.storage().keys.tasks("pf")
    errors = []
    for got in results:
        handles = [h for h in got if isinstance(h, ztq.TaskHandle)]
        errors += [e for e in got if not isinstance(e, ztq.TaskHandle)]
        assert handles and len(handles) == len(got) - 1  # then one error ended the thread
        present = client.pipeline(transaction=False)
        for h in handles:
            present.hexists(tasks, h.id)
        assert all(present.execute())
    assert all(isinstance(e, RedisUnreachable) for e in errors), errors
    assert all(isinstance(e.__cause__, redis.RedisError) for e in errors)
    assert len({id(e) for e in errors}) == 16
    client.close()


def test_the_example_of_docs_app_md_runs(server: RedisProcess) -> None:
    """docs/app.md's "When Redis refuses an enqueue" example, on a full Redis."""
    from tests.test_doc_examples import code_blocks

    [code] = [b for b in code_blocks("app.md") if "except RedisFull" in b]
    job.delay(0)
    admin = redis.Redis(port=server.port)
    admin.config_set("maxmemory", 1)
    namespace: dict[str, Any] = {"charge": job}
    try:
        exec(compile(code, "docs/app.md", "exec"), namespace)  # noqa: S102 - our own doc
    finally:
        admin.config_set("maxmemory", 0)
        admin.close()
    assert namespace["handle"] is None
