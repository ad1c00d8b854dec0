"""A queue's counts and settings as the console's queue table reads them, the per-minute
and running stats hashes, Redis's clock and memory, and the cron table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ztq.core.engine.transport import Transport
from ztq.core.states import PRIORITIES


@dataclass
class QueueReads:
    """What one queue's row reads, raw: the ready lists (by priority) with the entry at each
    head, the leftover counts, the sizes of its sets, its pause flag, its first and last
    error (member, score), its overflow length, its config and rate-limit hashes and one
    stats hash per minute asked."""

    ready: list[int]
    heads: list[str | None]
    leftovers: list[str | None]
    delayed: int
    running: int
    errors: int
    paused: int
    first_error: list[tuple[str, float]]
    last_error: list[tuple[str, float]]
    overflow: int
    config: dict[str, str]
    rate: dict[str, str]
    minutes: list[dict[str, str]]


def queue_reads(
    storage: Transport, names: Sequence[str], leftover_fields: Sequence[str], span: Sequence[int]
) -> list[QueueReads]:
    """:class:`QueueReads` of each queue, the stats of the minutes of ``span``, all in one
    round trip."""
    k = storage.keys
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        for q in names:
            for p in PRIORITIES:
                pipe.llen(k.ready(q, p))
                pipe.lindex(k.ready(q, p), 0)
            pipe.hmget(k.tasks(q), list(leftover_fields))
            pipe.zcard(k.delayed(q))
            pipe.zcard(k.running(q))
            pipe.zcard(k.errors(q))
            pipe.exists(k.paused(q))
            pipe.zrange(k.errors(q), 0, 0, withscores=True)
            pipe.zrange(k.errors(q), -1, -1, withscores=True)
            pipe.llen(k.overflow(q))
            pipe.hgetall(k.config(q))
            pipe.hgetall(k.rate(q))
            for minute in span:
                pipe.hgetall(k.stats(q, minute))
        replies = iter(pipe.execute())
    out = []
    for _ in names:
        ready, heads = [], []
        for _ in PRIORITIES:
            ready.append(int(next(replies)))
            heads.append(next(replies))
        left = list(next(replies))
        delayed, running, errors, paused = (int(next(replies)) for _ in range(4))
        first, last, overflow = next(replies), next(replies), int(next(replies))
        config, rate = next(replies), next(replies) or {}
        minutes = [next(replies) for _ in span]
        out.append(QueueReads(ready, heads, left, delayed, running, errors, paused, first,
                              last, overflow, config, rate, minutes))  # fmt: skip
    return out


def queue_known(storage: Transport, queue: str) -> bool:
    """The queue is in the set of known queues."""
    with storage.guard():
        return bool(storage.client.sismember(storage.keys.queues, queue))


def redis_time_ms(storage: Transport) -> int:
    """Redis's clock (ms): what a rate limit's tokens are counted on."""
    with storage.guard():
        secs, micros = storage.client.time()
    return int(secs) * 1000 + int(micros) // 1000


def stat_hashes(storage: Transport, keys: Sequence[str]) -> list[dict[str, str]]:
    """Each of these stats hashes (per-minute, five-minute or running totals), whole, in one
    round trip."""
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        for key in keys:
            pipe.hgetall(key)
        return list(pipe.execute())


def total_counts(
    storage: Transport, queues: Sequence[str], fields: Sequence[str]
) -> list[list[str | None]]:
    """These fields of each queue's running totals hash, one round trip."""
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        for q in queues:
            pipe.hmget(storage.keys.totals(q), *fields)
        return list(pipe.execute())


def memory_reads(storage: Transport, queues: Sequence[str]) -> tuple[dict[str, Any], list[Any]]:
    """Redis's ``used_memory`` and ``maxmemory`` (summed over a Cluster's nodes), and per
    queue the five replies ``(done index size, records, MEMORY USAGE of the tasks hash, of
    the done index, [oom_compact, oom_dropped])``, flat. Two round trips."""
    k = storage.keys
    with storage.guard():
        info = storage.client.info("memory")
        if "used_memory" not in info:  # a Cluster: one dict per node
            nodes = [v for v in info.values() if isinstance(v, dict)]
            info = {f: sum(int(n.get(f, 0)) for n in nodes) for f in ("used_memory", "maxmemory")}
        usage = not storage.in_memory  # fakeredis has no MEMORY USAGE: sizes unknown
        pipe = storage.client.pipeline(transaction=False)
        for q in queues:
            pipe.zcard(k.done(q))
            pipe.hlen(k.tasks(q))
            if usage:
                pipe.memory_usage(k.tasks(q))
                pipe.memory_usage(k.done(q))
            pipe.hmget(k.totals(q), "oom_compact", "oom_dropped")
        replies = list(pipe.execute())
    if not usage:
        replies = [x for i in range(0, len(replies), 3)
                   for x in (replies[i], replies[i + 1], None, None, replies[i + 2])]  # fmt: skip
    return dict(info), replies


def cron_entries(storage: Transport) -> tuple[dict[str, str], list[str]]:
    """The cron table workers published (name -> JSON) and the names an operator disabled,
    one round trip."""
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        pipe.hgetall(storage.keys.cron)
        pipe.hkeys(storage.keys.cron_off)
        raw, off = pipe.execute()
    return raw, list(off)
