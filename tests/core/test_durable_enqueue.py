"""Durable enqueue: ``replicas=N`` (per app or per call) waits with WAIT until N replicas
have the enqueue, and raises NotReplicated when they do not confirm in time. Real
redis-server processes: a master with a replica, a replica frozen with SIGSTOP, a Cluster."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from ztq.core import App, transaction
from ztq.core.errors import ConfigError, InvalidOption, NotReplicated
from ztq.worker.embedded import RedisProcess


@pytest.fixture
def pair() -> Iterator[tuple[RedisProcess, RedisProcess]]:
    """A master and its replica, in sync."""
    master = RedisProcess(extra=["--repl-diskless-sync-delay", "0"]).start()  # sync now, not in 5 s
    replica = RedisProcess(extra=["--replicaof", "127.0.0.1", str(master.port)])
    try:
        replica.start()
        client = redis.Redis(port=replica.port, decode_responses=True)
        deadline = time.monotonic() + 15
        while client.info("replication").get("master_link_status") != "up":
            assert time.monotonic() < deadline, "the replica did not sync"
            time.sleep(0.05)
        client.close()
        # and it confirms writes: after a sync the master counts it for WAIT from its first
        # ack on (sent once a second), which this waits for
        admin = redis.Redis(port=master.port)
        admin.set("synced", 1)  # writes for WAIT to wait on, that leave nothing behind
        admin.delete("synced")
        assert admin.wait(1, 15_000) == 1, "the replica does not acknowledge writes"
        admin.close()
        yield master, replica
    finally:
        replica.stop()
        master.stop()


def _app(url: str, **kw: Any) -> tuple[App, Any]:
    app = App("durable", redis_url=url, **kw)

    @app.task(name="mail.send")
    def send(to: str) -> None: ...

    return app, send


@pytest.mark.slow
def test_an_enqueue_returns_once_the_replica_has_it(pair: tuple[RedisProcess, ...]) -> None:
    master, replica = pair
    app, send = _app(master.url, replicas=1)
    handle = send.delay("ann@example.org")
    on_replica = redis.Redis(port=replica.port, decode_responses=True)
    assert on_replica.hexists("ztq:{default}:tasks", handle.id)  # there already, no sleep
    with transaction():
        for n in range(20):
            send.delay(f"user{n}@example.org")
    assert on_replica.hlen("ztq:{default}:tasks") == 21
    on_replica.close()
    app.connections.close_all()


@pytest.mark.slow
def test_a_silent_replica_makes_the_enqueue_raise_and_retrying_is_safe(
    pair: tuple[RedisProcess, ...],
) -> None:
    master, replica = pair
    app, send = _app(master.url, replicas=1, replica_timeout=0.3)
    assert replica.pid is not None
    os.kill(replica.pid, signal.SIGSTOP)  # the replica stops answering
    try:
        started = time.monotonic()
        with pytest.raises(NotReplicated) as caught:
            send.delay("bob@example.org")
        assert 0.25 < time.monotonic() - started < 3
        assert caught.value.confirmed == 0 and caught.value.wanted == 1
        [handle] = caught.value.handles
        assert handle.outcome == "added"  # on the master all the same
        with pytest.raises(NotReplicated) as many, transaction():
            for n in range(3):
                send.delay(f"c{n}@example.org")
        assert len(many.value.handles) == 3
        assert send.enqueue(("dan@example.org",), replicas=0).outcome == "added"
    finally:
        os.kill(replica.pid, signal.SIGCONT)
    again = send.delay("bob@example.org")
    assert again.outcome == "exists" and again.id == handle.id  # one task, now replicated
    app.connections.close_all()


def test_a_call_can_ask_for_replicas_the_app_does_not(redis_url: str) -> None:
    """A server without replicas: replicas=1 on one call fails, the others do not wait."""
    app, send = _app(redis_url, replica_timeout=0.1)
    assert send.delay("x@example.org").outcome == "added"
    with pytest.raises(NotReplicated, match="only 0 of 1 replica"):
        send.enqueue(("y@example.org",), replicas=1)
    app.connections.close_all()


def test_bad_durability_options_are_refused() -> None:
    with pytest.raises(ConfigError, match="replicas must be an int >= 0"):
        App("x", replicas=-1)
    with pytest.raises(ConfigError, match="replica_timeout"):
        App("x", replica_timeout=0)
    _, send = _app("redis://127.0.0.1:1/0")
    with pytest.raises(InvalidOption, match="replicas must be an int >= 0, not 'two'"):
        send.prepare(("z",), replicas="two")


@pytest.mark.cluster
def test_on_a_cluster_each_master_is_waited_on(redis_cluster: object) -> None:
    """Queues on different masters in one transaction: a WAIT per master; these masters
    have no replicas, so replicas=1 reports 0 and replicas=0 does not wait at all."""
    redis_cluster.flush()  # type: ignore[attr-defined]  # the cluster is shared by the session
    app, send = _app(redis_cluster.url, replicas=1, replica_timeout=0.1)  # type: ignore[attr-defined]
    with pytest.raises(NotReplicated) as caught, transaction():
        for q in ("mail", "pdf", "crawl", "index", "default"):
            send.enqueue((q,), queue=q)
    assert len(caught.value.handles) == 5 and caught.value.confirmed == 0
    storage = app.connections.get()
    nodes = {storage.client.get_node_from_key(storage.keys.tasks(q)).name
             for q in ("mail", "pdf", "crawl", "index", "default")}  # fmt: skip
    assert len(nodes) >= 2  # the queues really are spread over several masters
    for q in ("mail", "pdf", "crawl", "index", "default"):
        assert storage.queues.pending_count(q) == 1
    assert send.enqueue(("more",), queue="pdf", replicas=0).outcome == "added"
    app.connections.close_all()


def test_asyncio_enqueues_wait_for_replicas_too(pair: tuple[RedisProcess, ...]) -> None:
    import asyncio

    master, replica = pair
    app, send = _app(master.url, replicas=1, replica_timeout=0.3)

    async def enqueue(to: str) -> Any:
        return await send.adelay(to)

    handle = asyncio.run(enqueue("ann@example.org"))
    on_replica = redis.Redis(port=replica.port, decode_responses=True)
    assert on_replica.hexists("ztq:{default}:tasks", handle.id)
    on_replica.close()
    assert replica.pid is not None
    os.kill(replica.pid, signal.SIGSTOP)
    try:
        with pytest.raises(NotReplicated):
            asyncio.run(enqueue("bob@example.org"))
    finally:
        os.kill(replica.pid, signal.SIGCONT)
    app.connections.close_all()


@pytest.mark.slow
def test_the_example_of_docs_app_md_runs(pair: tuple[RedisProcess, ...], monkeypatch: Any) -> None:
    from tests.test_doc_examples import code_blocks

    master, replica = pair
    monkeypatch.setenv("ZTQ_REDIS_URL", master.url)
    [code] = [b for b in code_blocks("app.md") if "replicas=1" in b]
    namespace: dict[str, Any] = {"__name__": "docs_durable_example"}
    exec(compile(code, "docs/app.md", "exec"), namespace)  # noqa: S102 - our own doc
    on_replica = redis.Redis(port=replica.port, decode_responses=True)
    assert on_replica.hlen("ztq:{orders}:tasks") == 2 and "retry_later" not in namespace
    assert replica.pid is not None
    os.kill(replica.pid, signal.SIGSTOP)
    try:
        namespace["charge"].delay(44)
    except NotReplicated as exc:
        assert [h.id for h in exc.handles] and exc.confirmed == 0
    else:
        raise AssertionError("a frozen replica confirmed an enqueue")
    finally:
        os.kill(replica.pid, signal.SIGCONT)
    on_replica.close()
    namespace["shop"].connections.close_all()


def test_an_asyncio_enqueue_to_a_replica_is_a_connection_failure(
    pair: tuple[RedisProcess, ...],
) -> None:
    """A demoted master answers writes with READONLY: callers retry it like an outage."""
    import asyncio

    from ztq.core.errors import ConnectionFailed

    _, replica = pair
    app, send = _app(replica.url)
    with pytest.raises(ConnectionFailed, match="is a replica now"):
        asyncio.run(send.adelay("ann@example.org"))
    with pytest.raises(ConnectionFailed, match="is a replica now"):
        send.delay("ann@example.org")
    app.connections.close_all()
