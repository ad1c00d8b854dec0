"""Channels in Redis (docs/channels.md): the channel index, the room a full channel's
publishers wait on, reading a subscriber's consumer group, and the console's statistics.

Every state change of a channel (publish, ack, subscribe, unsubscribe) is ``channel.lua``;
what is here reads, waits, or removes a whole channel. Entries are read without decoding
(a file's chunks are bytes): ``ztq.core.messaging.channels`` turns them into messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.client import NEVER_DECODE
from redis.exceptions import ResponseError

from ztq.core.engine.transport import Transport
from ztq.core.engine.waits import MAX_BLOCK
from ztq.core.errors import NotFound

# one stream entry as read without decoding: its id and its fields (None once trimmed)
RawEntry = tuple[bytes, "dict[bytes, bytes] | None"]


def channel_keys(storage: Transport, name: str) -> list[str]:
    """The keys of ``channel.lua``: messages (stream), meta (hash), room (list)."""
    k = storage.keys
    return [k.messages(name), k.channel_meta(name), k.channel_room(name)]


def register_channel(storage: Transport, name: str) -> None:
    """Add ``name`` to the channel index (the console's list); idempotent."""
    with storage.guard():
        storage.client.sadd(storage.keys.channels, name)


def wait_for_room(storage: Transport, name: str, timeout: float) -> None:
    """Block up to ``timeout`` seconds for the token an ack that trims pushes (a lost token
    only costs this bounded wait)."""
    with storage.guard():
        storage.client.blpop([storage.keys.channel_room(name)], timeout)


def delete_channel(storage: Transport, name: str) -> None:
    """Remove a channel's keys (messages, subscribers) and its name from the index."""
    with storage.guard():
        storage.client.delete(*channel_keys(storage, name))
        storage.client.srem(storage.keys.channels, name)


def read_group(
    storage: Transport,
    name: str,
    subscriber: str,
    consumer: str,
    after: str,
    count: int,
    block: float | None,
) -> list[RawEntry]:
    """Up to ``count`` entries of the subscriber's group after ``after`` (``>``: new ones),
    waiting up to ``block`` seconds (None: not at all). :class:`NotFound` when the
    subscriber does not exist."""
    args: list[Any] = ["XREADGROUP", "GROUP", subscriber, consumer, "COUNT", int(count)]
    if block is not None:
        args += ["BLOCK", int(min(max(block, 0.001), MAX_BLOCK) * 1000)]
    args += ["STREAMS", storage.keys.messages(name), after]
    try:
        with storage.guard():
            reply = storage.client.execute_command(*args, **{NEVER_DECODE: []})
    except ResponseError as exc:
        if str(exc).startswith("NOGROUP"):
            raise NotFound(
                f"channel {name!r} has no subscriber {subscriber!r} (unsubscribed?)"
            ) from None
        raise
    return [(i, f) for _, entries in reply or [] for i, f in entries]


def claim_idle(
    storage: Transport, name: str, subscriber: str, consumer: str, idle_ms: int, count: int
) -> list[RawEntry]:
    """Take over entries of the subscriber's group pending elsewhere for ``idle_ms``."""
    key = storage.keys.messages(name)
    with storage.guard():
        reply = storage.client.execute_command(
            "XAUTOCLAIM", key, subscriber, consumer, int(idle_ms), "0-0",
            "COUNT", int(count), **{NEVER_DECODE: []},
        )  # fmt: skip
    entries = reply[1] if reply else []
    return [(e[0], _pairs(e[1])) for e in entries if e]


def _pairs(flat: Any) -> dict[bytes, bytes] | None:
    if flat is None or isinstance(flat, dict):
        return flat
    return dict(zip(flat[::2], flat[1::2], strict=True))


def channel_names(storage: Transport) -> list[str]:
    """The channel index, sorted."""
    with storage.guard():
        return sorted(storage.client.smembers(storage.keys.channels))


def channel_stats(
    storage: Transport, names: Sequence[str]
) -> list[tuple[int, dict[str, str], int, list[dict[str, Any]]]]:
    """Per channel: (entries held, its meta hash, bytes its keys use, its consumer groups
    as ``XINFO GROUPS`` gives them), in two round trips (pipelines) for them all."""
    k = storage.keys
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        for name in names:
            pipe.exists(k.messages(name))
            pipe.xlen(k.messages(name))
            pipe.hgetall(k.channel_meta(name))
            if not storage.in_memory:  # fakeredis has no MEMORY USAGE: counted as 0
                pipe.memory_usage(k.messages(name), samples=0)
                pipe.memory_usage(k.channel_meta(name), samples=0)
        replies = list(pipe.execute())
        if storage.in_memory:
            replies = [x for i in range(0, len(replies), 3)
                       for x in (*replies[i : i + 3], 0, 0)]  # fmt: skip
        groups_pipe = storage.client.pipeline(transaction=False)
        live = [n for i, n in enumerate(names) if replies[i * 5]]
        for name in live:
            groups_pipe.xinfo_groups(k.messages(name))
        groups = dict(zip(live, groups_pipe.execute(), strict=True))
    out = []
    for i, name in enumerate(names):
        _, held, meta, mem_stream, mem_meta = replies[i * 5 : i * 5 + 5]
        memory = int(mem_stream or 0) + int(mem_meta or 0)
        out.append((int(held), meta, memory, list(groups.get(name, []))))
    return out
