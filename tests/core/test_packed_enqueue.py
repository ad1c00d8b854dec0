"""Enqueue goes out as one prebuilt command (core/engine/packed.py, PACKED): a function of ztq's
library (FCALL) on Redis 7, the script by SHA (EVALSHA) where functions are missing (Redis
6.2) or denied (an ACL); the same replies as redis-py's path. A missing library is loaded
and the calls sent again; NOSCRIPT and a dropped connection fall back to redis-py's path."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from redis.exceptions import ConnectionError

import ztq.core as ztq
from tests import sample_tasks as t
from ztq.core.engine.scripts import SCRIPTS
from ztq.worker.embedded import RedisProcess


@pytest.fixture
def no_evalsha(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """redis-py's evalsha on the default connection, counted (the general path)."""
    client = ztq.get_storage().client
    calls: list[str] = []
    real = client.evalsha

    def counted(sha: str, *args: object) -> object:
        calls.append(sha)
        return real(sha, *args)

    monkeypatch.setattr(client, "evalsha", counted)
    return calls


@pytest.fixture
def on_redis_7(redis_url: str) -> Iterator[redis.Redis]:
    admin = redis.Redis.from_url(redis_url)
    admin.function_flush()  # a library another test loaded is not this test's to find
    admin.config_resetstat()
    yield admin
    admin.close()


@pytest.fixture
def on_redis_62(redis_62: RedisProcess) -> Iterator[redis.Redis]:
    admin = redis.Redis(port=redis_62.port)
    admin.flushall()
    admin.script_flush()
    admin.config_resetstat()
    ztq.connect(redis_62.url)
    yield admin
    ztq.disconnect_all()
    admin.close()


def calls_of(admin: redis.Redis, command: str) -> int:
    return int(admin.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def libraries(admin: redis.Redis) -> list[str]:
    """The names of the function libraries loaded (FUNCTION LIST: name, value pairs)."""
    return [dict(zip(lib[::2], lib[1::2], strict=True))[b"library_name"].decode()
            for lib in admin.function_list()]  # fmt: skip


def outcomes_of_the_usual_calls() -> tuple[str, ...]:
    first = t.add.delay(1, 2)
    again = t.add.delay(1, 2)
    moved = t.add.enqueue((1, 2), first=True)
    other = t.add.enqueue((5, 5), unique=False)
    assert first.id == again.id and ztq.ping(first) == "queued"
    return first.outcome, again.outcome, moved.outcome, other.outcome


USUAL = ("added", "exists", "moved", "added")


def test_on_redis_7_enqueue_runs_as_a_function(
    on_redis_7: redis.Redis, no_evalsha: list[str]
) -> None:
    admin = on_redis_7
    assert outcomes_of_the_usual_calls() == USUAL
    assert libraries(admin) == [SCRIPTS.library_name]  # loaded by the first call
    assert calls_of(admin, "fcall") == 5  # the first found no function: sent again
    assert calls_of(admin, "evalsha") == 0 and no_evalsha == []


@pytest.mark.slow
def test_a_flushed_library_is_loaded_again_and_the_calls_sent_again(
    on_redis_7: redis.Redis, no_evalsha: list[str]
) -> None:
    admin = on_redis_7
    t.add.delay(1, 1)
    admin.function_flush()
    admin.script_flush()  # no effect on functions
    assert t.add.delay(2, 2).outcome == "added"
    assert libraries(admin) == [SCRIPTS.library_name]
    with ztq.transaction() as handles:
        for i in range(1200):  # three calls of at most 500 tasks, all finding no function
            t.add.delay(i, 3)
            if i == 0:
                admin.function_flush()
    assert [h.outcome for h in handles] == ["added"] * 1200
    assert admin.llen(ztq.get_storage().keys.ready("default", "normal")) == 1202
    assert calls_of(admin, "evalsha") == 0 and no_evalsha == []


def test_another_versions_library_does_not_stand_in_for_ours(on_redis_7: redis.Redis) -> None:
    admin = on_redis_7
    old = "ztq_0000000000000000"
    admin.function_load(
        f"#!lua name={old}\nredis.register_function('{old}_enqueue', function() return 1 end)"
    )
    assert t.add.delay(1, 1).outcome == "added"
    assert sorted(libraries(admin)) == sorted([old, SCRIPTS.library_name])


def test_a_user_denied_functions_enqueues_by_sha(redis_url: str) -> None:
    admin = redis.Redis.from_url(redis_url)
    admin.function_flush()
    admin.acl_setuser("scripts-only", enabled=True, passwords=["+pw"], keys=["~*"],
                      channels=["*"], commands=["+@all", "-fcall", "-function"])  # fmt: skip
    try:
        ztq.connect(redis_url.replace("redis://", "redis://scripts-only:pw@"))
        assert outcomes_of_the_usual_calls() == USUAL
        assert calls_of(admin, "evalsha") >= 4 and libraries(admin) == []
    finally:
        ztq.disconnect_all()
        admin.acl_deluser("scripts-only")
        admin.close()


@pytest.mark.slow
def test_on_redis_62_enqueue_runs_the_script_by_sha(
    on_redis_62: redis.Redis, no_evalsha: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = on_redis_62
    loads: list[bool] = []
    real = SCRIPTS.packed.load_library

    def counted(conn: object) -> bool:
        loads.append(real(conn))
        return loads[-1]

    monkeypatch.setattr(SCRIPTS.packed, "load_library", counted)
    assert outcomes_of_the_usual_calls() == USUAL
    # the first call: no FCALL, NOSCRIPT packed, then the general path (NOSCRIPT, loaded)
    assert no_evalsha == [SCRIPTS.sha["enqueue"]] * 2
    assert calls_of(admin, "evalsha") == 6 and calls_of(admin, "fcall") == 0
    assert loads == [False]  # FUNCTION LOAD tried once (unknown command), not on every call
    admin.script_flush()
    assert t.add.delay(2, 2).outcome == "added"
    assert no_evalsha == [SCRIPTS.sha["enqueue"]] * 4
    with ztq.transaction() as handles:
        for i in range(1200):
            t.add.delay(i, 3)
    assert [h.outcome for h in handles] == ["added"] * 1200


def test_a_dropped_connection_falls_back_to_redis_pys_path(
    on_redis_7: redis.Redis, no_evalsha: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    t.add.delay(1, 1)
    real = redis.Connection.send_packed_command
    failures = [ConnectionError("dropped")]

    def drop_once(conn: redis.Connection, command: object, check_health: bool = True) -> None:
        if failures:
            raise failures.pop()
        real(conn, command, check_health)

    monkeypatch.setattr(redis.Connection, "send_packed_command", drop_once)
    assert t.add.delay(3, 3).outcome == "added"  # sent again by redis-py's path
    assert t.add.delay(3, 3).outcome == "exists"
    assert no_evalsha == [SCRIPTS.sha["enqueue"]] and not failures  # then packed again


@pytest.mark.slow
def test_the_worker_scripts_run_as_functions_and_frame_nothing_kept(
    on_redis_7: redis.Redis, no_evalsha: list[str]
) -> None:
    """fetch, ack, fail and renew go as FCALL too; their key lists are built per call (the
    stats keys change each minute), so the packed path keeps no framing of them: the cache
    of framed key lists stays one entry per queue however many calls are made (it grew by
    one per call, the memory of a worker with it)."""
    from ztq.core.engine.storage import Finished

    storage = ztq.get_storage()
    t.add.delay(1, 2)
    t.add.delay(2, 2)
    kept = len(SCRIPTS.packed._prefix)
    for _ in range(300):
        storage.leases.fetch("empty", "w", "t", 1000, 1)
    [a, b] = storage.leases.fetch("default", "w", "t", 30_000, 2)
    assert storage.leases.renew("default", "w", 30_000, [(a.id, a.token), (b.id, b.token)]) == []
    assert storage.leases.ack("default", "w", [Finished(a.id, a.token, "x")]) == []
    assert storage.leases.fail("default", "w", b.id, b.token, "x", "E: e", "") == "error"
    assert len(SCRIPTS.packed._prefix) <= kept + 1
    assert calls_of(on_redis_7, "evalsha") == 0 and no_evalsha == []
    assert calls_of(on_redis_7, "fcall") >= 305
