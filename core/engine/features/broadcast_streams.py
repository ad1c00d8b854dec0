"""Broadcasts in Redis (docs/channels.md): reading a broadcast's record with the listeners'
presence and Redis's clock, the newest broadcasts of queues, and the blocking reads of the
``broadcasts`` and ``broadcast-runs`` streams.

Sending a broadcast, joining the listeners and writing a run are scripts (``broadcast``,
``listen``, ``broadcast_run``); ``ztq.core.messaging.broadcast`` turns what is read here
into runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ztq.core.engine.transport import Transport
from ztq.core.engine.waits import block_ms, tail_id

# (listeners' presence deadlines in ms, the newest broadcast id when each joined)
Presence = tuple[dict[str, float], dict[str, str]]


def with_time(storage: Transport, pipe: Any) -> list[Any]:
    """The pipeline's replies, then Redis's clock (ms) read with them: in the same round
    trip on one Redis, in one more on a Cluster (whose pipelines cannot send TIME)."""
    if storage.is_cluster:
        replies = pipe.execute()
        sec, usec = storage.client.time()
    else:
        pipe.time()
        *replies, (sec, usec) = pipe.execute()
    return [*replies, int(sec) * 1000 + int(usec) // 1000]


def last_run_id(storage: Transport, queue: str) -> str:
    """The id of the newest entry of the queue's ``broadcast-runs`` stream (``0-0``: none)."""
    key = storage.keys.broadcast_runs(queue)
    with storage.guard():
        return tail_id(storage.client.xrevrange(key, "+", "-", count=1))


def wait_for_runs(storage: Transport, queue: str, after: str, wait: float) -> None:
    """Block up to ``wait`` seconds for a run's start or end after entry ``after``."""
    key = storage.keys.broadcast_runs(queue)
    with storage.guard():
        storage.client.xread({key: after}, count=100, block=block_ms(wait))


def broadcast_head(storage: Transport, queue: str, broadcast_id: str) -> list[str | None]:
    """The ``task``, ``sent`` and ``targets`` fields of a broadcast's record (None: gone)."""
    with storage.guard():
        return list(
            storage.client.hmget(
                storage.keys.broadcast(queue, broadcast_id), ["task", "sent", "targets"]
            )
        )


def broadcast_state(
    storage: Transport, queue: str, broadcast_id: str
) -> tuple[dict[str, str], dict[str, float], dict[str, str], int]:
    """(the broadcast's record, the listeners' presence, when each joined, Redis's clock in
    ms), in one round trip."""
    k = storage.keys
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        pipe.hgetall(k.broadcast(queue, broadcast_id))
        pipe.zrange(k.listeners(queue), 0, -1, withscores=True)
        pipe.hgetall(k.listeners_joined(queue))
        rec, listeners, joined, now = with_time(storage, pipe)
    return rec, dict(listeners), joined, now


def recent_records(
    storage: Transport, queues: Sequence[str], per_queue: int
) -> tuple[list[tuple[str, dict[str, str], dict[str, str]]], dict[str, Presence], int]:
    """The last ``per_queue`` broadcasts of each queue as (queue, stream fields, record),
    the presence of each queue's listeners, and Redis's clock (ms): two round trips."""
    k = storage.keys
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        for q in queues:
            pipe.xrevrange(k.broadcasts(q), "+", "-", count=per_queue)
        entries = pipe.execute()
        found = [(q, dict(f)) for q, got in zip(queues, entries, strict=True) for _, f in got]
        sent_to = sorted({q for q, _ in found})
        pipe = storage.client.pipeline(transaction=False)
        for q, f in found:
            pipe.hgetall(k.broadcast(q, f.get("id", "")))
        for q in sent_to:
            pipe.zrange(k.listeners(q), 0, -1, withscores=True)
            pipe.hgetall(k.listeners_joined(q))
        *replies, now = with_time(storage, pipe)
    records = replies[: len(found)]
    rest = replies[len(found) :]
    where = {q: (dict(rest[2 * i]), rest[2 * i + 1]) for i, q in enumerate(sent_to)}
    sent = [(q, f, rec) for (q, f), rec in zip(found, records, strict=True)]
    return sent, where, now


def read_broadcasts(
    storage: Transport, positions: dict[str, str], count: int, block: float | None
) -> list[tuple[str, str, dict[str, str]]]:
    """(queue, entry id, fields) of the broadcasts after each queue's position, in order
    per queue; waits up to ``block`` seconds for one. The queues must share a slot on a
    Cluster (one queue per call there)."""
    k = storage.keys
    streams = {k.broadcasts(q): pos for q, pos in positions.items()}
    by_key = {k.broadcasts(q): q for q in positions}
    with storage.guard():
        reply = storage.client.xread(
            streams, count=count, block=None if block is None else block_ms(block)
        )
    return [(by_key[str(key)], str(i), dict(f)) for key, entries in reply or [] for i, f in entries]
