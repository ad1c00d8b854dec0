"""The packed path's connections (core/engine/wire/framing.py, HeldConnections): one per
thread and pool, held for the thread's life, closed with the thread, by ``Storage.close`` and
after a demoted master's READONLY, so that the next call connects afresh."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import redis

import ztq.core as ztq
from tests import sample_tasks as t
from ztq.core.engine.wire.framing import HELD
from ztq.core.errors import ConnectionFailed
from ztq.worker.embedded import RedisProcess


def clients(port: int) -> int:
    """Connections open on the server, this probe's own not counted."""
    probe = redis.Redis(port=port)
    try:
        return int(probe.info("clients")["connected_clients"]) - 1
    finally:
        probe.close()


def wait_for(check: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.fixture
def server() -> Iterator[RedisProcess]:
    """A Redis of this test's own (one test makes it a replica)."""
    proc = RedisProcess().start()
    ztq.connect(proc.url)
    try:
        yield proc
    finally:
        ztq.disconnect_all()
        proc.cleanup()


def test_one_by_one_enqueue_holds_one_connection_and_never_asks_the_pool(
    server: RedisProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = ztq.get_storage().client.connection_pool
    taken: list[object] = []
    real = pool.get_connection

    def counted(*args: object, **kwargs: object) -> object:
        taken.append(args)
        return real(*args, **kwargs)

    t.add.delay(0, 0)  # NOSCRIPT on the held connection, loaded by the pool's path
    before = clients(server.port)  # the pool's connection and the held one
    monkeypatch.setattr(pool, "get_connection", counted)
    outcomes = {t.add.delay(i, i).outcome for i in range(1, 50)}
    assert outcomes == {"added"} and taken == []
    assert clients(server.port) == before


def test_a_threads_connection_closes_when_the_thread_ends(server: RedisProcess) -> None:
    t.add.delay(0, 0)
    before = clients(server.port)
    outcome: list[str] = []
    thread = threading.Thread(target=lambda: outcome.append(t.add.delay(1, 1).outcome))
    thread.start()
    thread.join()
    assert outcome == ["added"]
    wait_for(lambda: clients(server.port) == before, "the thread's connection stayed open")


def test_close_drops_every_threads_held_connection(server: RedisProcess) -> None:
    storage = ztq.get_storage()
    release, sent = threading.Event(), threading.Event()

    def enqueue_then_wait() -> None:
        t.add.delay(2, 2)
        sent.set()
        release.wait(10)

    t.add.delay(1, 1)
    other = threading.Thread(target=enqueue_then_wait)
    other.start()
    try:
        assert sent.wait(10)
        assert clients(server.port) >= 2
        storage.close()
        wait_for(lambda: clients(server.port) == 0, "a held connection outlived close()")
        assert t.add.delay(3, 3).outcome == "added"  # the thread's connection reconnects
    finally:
        release.set()
        other.join()


def test_a_demoted_masters_readonly_drops_the_held_connection(server: RedisProcess) -> None:
    pool = ztq.get_storage().client.connection_pool
    admin = redis.Redis(port=server.port)
    t.add.delay(1, 1)
    held = HELD.connection(pool)

    def held_id() -> int:
        held.send_command("CLIENT", "ID")
        return int(held.read_response())

    first = held_id()
    dead = RedisProcess()  # a free port nobody listens on: the replica never syncs
    admin.replicaof("127.0.0.1", dead.port)
    try:
        with pytest.raises(ConnectionFailed, match="is a replica now"):
            t.add.delay(2, 2)
    finally:
        admin.replicaof("NO", "ONE")
        admin.close()
    assert t.add.delay(2, 2).outcome == "added"
    assert HELD.connection(pool) is held and held_id() != first  # connected afresh


@pytest.mark.slow
def test_a_forked_child_does_not_share_its_parents_connection(server: RedisProcess) -> None:
    """Parent and child enqueue at once: on one shared socket their replies would cross."""
    t.add.delay(0, 0)
    t.add.delay(0, 1)  # the parent's held connection is in use from here

    def own(i: int, j: int) -> bool:  # the reply names this call's task
        return t.add.delay(i, j).id == t.add.template().call((i, j), {}).resolve_id()

    go_read, go_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only if every outcome is its own
        code = 1
        try:
            os.read(go_read, 1)
            code = 0 if all(own(i, -1) for i in range(300)) else 2
        finally:
            os._exit(code)
    os.write(go_write, b"1")
    mine = [own(i, 1) for i in range(300)]
    _, status = os.waitpid(pid, 0)
    assert all(mine) and os.waitstatus_to_exitcode(status) == 0
