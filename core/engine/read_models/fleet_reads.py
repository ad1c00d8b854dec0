"""Workers as the console counts and pages them, read from what the worker/console contract
(``ztq.core.engine.workers``) keeps: the ``workers:state`` bands, the one-line summaries,
the totals hash, the ``seen`` and ``workers:names`` sets, the heartbeats and the command
lists. Each function is the one or two round trips of one question."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ztq.core.engine.transport import Transport
from ztq.core.engine.workers import BAND, STATUSES


def heartbeats_and_seen(storage: Transport) -> tuple[dict[str, str], list[tuple[str, float]]]:
    """Every heartbeat (id -> JSON) and every worker's last report (ms), one round trip."""
    k = storage.keys
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        pipe.hgetall(k.workers)
        pipe.zrange(k.seen, 0, -1, withscores=True)
        beats, seen = pipe.execute()
    return beats, list(seen)


def unsummarized(
    storage: Transport,
) -> tuple[list[tuple[str, float]], list[tuple[str, float]], list[str | None]]:
    """Every worker with its last report (ms); of them, those without a name in
    ``workers:names`` (an older ztq's: no summary), and their heartbeats. Two round trips
    at most (the heartbeats only when there are such workers)."""
    k = storage.keys
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        pipe.zrange(k.seen, 0, -1, withscores=True)
        pipe.zrange(k.worker_names, 0, -1)
        seen, named = pipe.execute()
        known = set(named)
        old = [(wid, score) for wid, score in seen if wid not in known]
        beats = storage.client.hmget(k.workers, [wid for wid, _ in old]) if old else []
    return list(seen), old, list(beats)


@dataclass
class FleetReads:
    """The counts of :func:`fleet_reads`: per live status band (all but stopped), the lost
    count, the lost ids read and the live count; the stopped count, the totals hash, the
    sizes of ``seen`` and ``workers:names``, and the summaries of the lost ids."""

    bands: list[tuple[int, list[str], int]]
    stopped: int
    totals: dict[str, str]
    n_seen: int
    n_named: int
    lost_summaries: list[str | None]


def fleet_reads(storage: Transport, cut: float, lost_read: int) -> FleetReads:
    """The worker counts from ``workers:state``: a worker of a live band reported before
    ``cut`` (ms) is lost (at most ``lost_read`` of them per band are named, and their
    summaries read). Two round trips."""
    k = storage.keys
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        for band in range(len(STATUSES) - 1):
            lo, split = band * BAND, band * BAND + cut
            pipe.zcount(k.worker_states, lo, f"({split}")
            pipe.zrangebyscore(k.worker_states, lo, f"({split}", start=0, num=lost_read)
            pipe.zcount(k.worker_states, split, f"({lo + BAND}")
        pipe.zcount(k.worker_states, BAND * 4, f"({BAND * 5}")
        pipe.hgetall(k.worker_totals)
        pipe.zcard(k.seen)
        pipe.zcard(k.worker_names)
        *flat, stopped, totals, n_seen, n_named = pipe.execute()
        lost_ids = [wid for i in range(1, len(flat), 3) for wid in flat[i]]
        lost = storage.client.hmget(k.worker_summaries, lost_ids) if lost_ids else []
    bands = [(flat[i], list(flat[i + 1]), flat[i + 2]) for i in range(0, len(flat), 3)]
    return FleetReads(bands, stopped, totals, n_seen, n_named, list(lost))


def serving_reads(
    storage: Transport, cut: float, per_status: int
) -> tuple[list[list[str]], int, int, list[str], list[str | None]]:
    """The ``per_status`` live workers of each live status that reported last (after
    ``cut``, ms), the sizes of ``seen`` and ``workers:names``, and the summaries of those
    workers (their ids sorted). Two round trips."""
    k = storage.keys
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        for band in range(len(STATUSES) - 1):  # the live ones of every status but stopped
            top, live = f"({(band + 1) * BAND}", band * BAND + cut
            pipe.zrevrangebyscore(k.worker_states, top, live, start=0, num=per_status)
        pipe.zcard(k.seen)
        pipe.zcard(k.worker_names)
        *bands, n_seen, n_named = pipe.execute()
        ids = sorted({wid for band in bands for wid in band})
        summaries = storage.client.hmget(k.worker_summaries, ids) if ids else []
    return [list(b) for b in bands], n_seen, n_named, ids, list(summaries)


def worker_counts(storage: Transport) -> tuple[int, int]:
    """The sizes of ``seen`` (every worker) and ``workers:names`` (those with a summary)."""
    k = storage.keys
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        pipe.zcard(k.seen)
        pipe.zcard(k.worker_names)
        n_seen, n_named = pipe.execute()
    return int(n_seen), int(n_named)


def worker_names(storage: Transport, rank: int, count: int) -> list[str]:
    """``count`` worker ids in name order from ``rank``."""
    with storage.guard():
        return list(storage.client.zrange(storage.keys.worker_names, rank, rank + count - 1))


def worker_states(storage: Transport, ids: Sequence[str]) -> list[float | None]:
    """The ``workers:state`` score of each of these workers (band x BAND + reported ms)."""
    with storage.guard():
        return list(storage.client.zmscore(storage.keys.worker_states, list(ids)))


def command_lists(storage: Transport, ids: Sequence[str], count: int) -> list[list[str]]:
    """The first ``count`` entries of each worker's command list, not taken, one round
    trip."""
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        for wid in ids:
            pipe.lrange(storage.keys.worker_cmd(wid), 0, count - 1)
        return list(pipe.execute())
