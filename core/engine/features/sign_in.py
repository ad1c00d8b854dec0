"""The console's sign-in records in Redis (docs/security.md): login counters, sessions and
API tokens, as read by ``ztq.core.auth``.

Every change of them is a script (``login``, ``session``, ``token``); what is here reads
them: raw hashes, which ``ztq.core.auth`` turns into records.
"""

from __future__ import annotations

from collections.abc import Callable

from ztq.core.engine.transport import Transport


def login_totals(storage: Transport) -> dict[str, str]:
    """The login counters' hash (``failures``, ``locks``, ``unlocks`` since they began)."""
    with storage.guard():
        return dict(storage.client.hgetall(storage.keys.login_stats))


def live_sessions(storage: Transport) -> list[tuple[str, dict[str, str]]]:
    """(handle, record) of every session in the index with a live score; a record that
    ended meanwhile comes back empty."""
    return _indexed(storage, storage.keys.sessions, storage.keys.session, "(0")


def count_live_sessions(storage: Transport, now_ms: int) -> int:
    """How many sessions the index holds that expire after ``now_ms``."""
    with storage.guard():
        return int(storage.client.zcount(storage.keys.sessions, now_ms, "+inf"))


def token_record(storage: Transport, token_id: str) -> dict[str, str]:
    """The hash of token ``token_id`` (empty: unknown or gone)."""
    with storage.guard():
        return dict(storage.client.hgetall(storage.keys.token(token_id)))


def live_tokens(storage: Transport, now_ms: int) -> list[tuple[str, dict[str, str]]]:
    """(id, record) of every token that expires after ``now_ms``, soonest first."""
    return _indexed(storage, storage.keys.tokens, storage.keys.token, now_ms)


def count_live_tokens(storage: Transport, now_ms: int) -> int:
    """How many tokens expire after ``now_ms``."""
    with storage.guard():
        return int(storage.client.zcount(storage.keys.tokens, now_ms, "+inf"))


def _indexed(
    storage: Transport, index: str, record: Callable[[str], str], low: int | str
) -> list[tuple[str, dict[str, str]]]:
    """(member, its record hash) of the index's members scored from ``low`` up, in score
    order: two round trips (the index, then every record in one pipeline)."""
    with storage.guard():
        members = storage.client.zrangebyscore(index, low, "+inf")
        pipe = storage.client.pipeline(transaction=False)
        for member in members:
            pipe.hgetall(record(member))
        return list(zip(members, pipe.execute(), strict=True))
