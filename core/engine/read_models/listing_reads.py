"""The sorted sets and streams the console's listings merge across queues (errors and
delayed tasks by score, leases by deadline, history and event streams), read one window per
key in one round trip, and the audit stream the console writes its actions to."""

from __future__ import annotations

from collections.abc import Sequence

from ztq.core.engine.transport import Transport

Scored = list[tuple[str, float]]


def score_windows(
    storage: Transport,
    windows: Sequence[tuple[str, int | None, int]],
    count: int,
    *,
    reverse: bool,
) -> list[Scored]:
    """For each (key, from score, skip): up to ``count`` members with their scores from that
    score on (down from it when ``reverse``; from the end when None), after skipping
    ``skip`` of them. One round trip."""
    if not windows:
        return []
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        for key, score, skip in windows:
            if reverse:
                top = "+inf" if score is None else score
                pipe.zrevrangebyscore(key, top, "-inf", start=skip, num=count, withscores=True)
            else:
                low = "-inf" if score is None else score
                pipe.zrangebyscore(key, low, "+inf", start=skip, num=count, withscores=True)
        return list(pipe.execute())


def set_sizes(storage: Transport, keys: Sequence[str]) -> list[int]:
    """ZCARD of each of these sorted sets, one round trip."""
    if not keys:
        return []
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        for key in keys:
            pipe.zcard(key)
        return [int(n) for n in pipe.execute()]


def first_members(storage: Transport, keys: Sequence[str], count: int) -> list[Scored]:
    """The ``count`` lowest-scored members of each sorted set with their scores (leases by
    deadline), one round trip."""
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        for key in keys:
            pipe.zrange(key, 0, count - 1, withscores=True)
        return list(pipe.execute())


def error_ids(storage: Transport, queue: str, offset: int, count: int) -> list[str]:
    """A window of one queue's error set, oldest first."""
    with storage.guard():
        return list(storage.client.zrange(storage.keys.errors(queue), offset, offset + count - 1))


def stream_windows(
    storage: Transport, windows: Sequence[tuple[str, str]], count: int
) -> list[list[tuple[str, dict[str, str]]]]:
    """For each (stream key, top): up to ``count`` entries newest first from ``top`` (``+``
    or an exclusive ``(id``), one round trip."""
    if not windows:
        return []
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        for key, top in windows:
            pipe.xrevrange(key, max=top, min="-", count=count)
        return list(pipe.execute())


def append_audit(storage: Transport, entry: dict[str, str], maxlen: int) -> None:
    """Append one console action to the audit stream, capped at about ``maxlen``."""
    with storage.guard():
        storage.client.xadd(storage.keys.audit, entry, maxlen=maxlen, approximate=True)
