"""One-by-one enqueue sends EVALSHA as one prebuilt command (core/scripts.py, PACKED): the
same replies as redis-py's path; NOSCRIPT and a dropped connection fall back to it."""

from __future__ import annotations

import pytest
import redis
from redis.exceptions import ConnectionError

import ztq.core as ztq
from tests import sample_tasks as t
from ztq.core.scripts import SCRIPTS


@pytest.fixture
def no_evalsha(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> list[str]:
    """redis-py's evalsha, counted: the packed path never calls it."""
    client = ztq.get_storage().client
    calls: list[str] = []
    real = client.evalsha

    def counted(sha: str, *args: object) -> object:
        calls.append(sha)
        return real(sha, *args)

    SCRIPTS.load_all(client)  # the fixture's Redis starts with an empty script cache
    monkeypatch.setattr(client, "evalsha", counted)
    return calls


def test_enqueue_goes_out_packed_with_the_usual_outcomes(no_evalsha: list[str]) -> None:
    first = t.add.delay(1, 2)
    again = t.add.delay(1, 2)
    moved = t.add.enqueue((1, 2), first=True)
    assert (first.outcome, again.outcome, moved.outcome) == ("added", "exists", "moved")
    assert first.id == again.id and ztq.ping(first) == "queued"
    assert t.add.enqueue((5, 5), unique=False).outcome == "added"
    assert no_evalsha == []


def test_a_flushed_script_cache_and_a_dropped_connection_fall_back(
    no_evalsha: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    t.add.delay(1, 1)
    client = ztq.get_storage().client
    client.script_flush()
    assert t.add.delay(2, 2).outcome == "added"  # NOSCRIPT: loaded again by the usual path
    assert no_evalsha == [SCRIPTS.sha["enqueue"]] * 2
    real = redis.Connection.send_packed_command
    failures = [ConnectionError("dropped")]

    def drop_once(conn: redis.Connection, command: object, check_health: bool = True) -> None:
        if failures:
            raise failures.pop()
        real(conn, command, check_health)

    monkeypatch.setattr(redis.Connection, "send_packed_command", drop_once)
    assert t.add.delay(3, 3).outcome == "added"  # sent again by redis-py's path
    assert t.add.delay(3, 3).outcome == "exists"
    assert len(no_evalsha) == 3 and not failures  # one fallback, then packed again


def test_a_transaction_goes_out_packed_and_survives_a_flushed_script_cache(
    no_evalsha: list[str],
) -> None:
    client = ztq.get_storage().client
    for flush in (False, True):
        if flush:
            client.script_flush()  # every chunk fails with NOSCRIPT: loaded, sent again
        with ztq.transaction() as handles:
            for i in range(1200):  # three chunks of at most 500
                t.add.delay(i, int(flush))
        assert [h.outcome for h in handles] == ["added"] * 1200
        assert len({h.id for h in handles}) == 1200
    assert client.llen(ztq.get_storage().keys.ready("default", "normal")) == 2400
