"""Task records and the ready lists, as the console's listings read them: records by id,
a scan of a queue's records, the lists' lengths and windows, and the leftover marks that
say which list entries are no longer live (``popped`` in ``_lib.lua``)."""

from __future__ import annotations

from collections.abc import Sequence

from ztq.core.engine.transport import Transport
from ztq.core.states import PRIORITIES


def records_by_queue(storage: Transport, by_queue: dict[str, list[str]]) -> list[list[str | None]]:
    """The raw records of these ids, per queue in the dict's order (one HMGET per queue, all
    in one round trip; None for an id without a record)."""
    if not by_queue:
        return []
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        for q, ids in by_queue.items():
            pipe.hmget(storage.keys.tasks(q), ids)
        return list(pipe.execute())


def scan_records(storage: Transport, queue: str, cursor: int) -> tuple[int, dict[str, str]]:
    """One HSCAN batch (about 100 fields) of a queue's tasks hash: the next cursor (0 when
    the scan is over) and the fields read (leftover marks ``#...`` included)."""
    with storage.guard():
        nxt, batch = storage.client.hscan(storage.keys.tasks(queue), cursor, count=100)
    return int(nxt), batch


def list_lengths(
    storage: Transport, keys: Sequence[str], queue: str, leftover_fields: Sequence[str]
) -> tuple[list[int], list[str | None]]:
    """The length of each of these lists and the leftover counts (``leftover_fields`` of
    the queue's tasks hash), in one round trip."""
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        for key in keys:
            pipe.llen(key)
        pipe.hmget(storage.keys.tasks(queue), list(leftover_fields))
        *lengths, left = pipe.execute()
    return [int(n) for n in lengths], list(left)


def key_list_lengths(storage: Transport, queue: str, key: str) -> tuple[list[int], int]:
    """The lengths of one key's ready lists (high, normal, low: ``_keyed.lua``) and the tasks
    the key has waiting (its count in ``k:wait``; entries beyond it are leftovers), in one
    round trip."""
    k = storage.keys
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        for level in PRIORITIES:
            pipe.llen(k.key_ready(queue, level, key))
        pipe.zscore(k.key_wait(queue), key)
        *lengths, waiting = pipe.execute()
    return [int(n) for n in lengths], int(float(waiting or 0))


def list_windows(storage: Transport, ranges: Sequence[tuple[str, int, int]]) -> list[list[str]]:
    """The entries of each (list, start, stop) range (LRANGE, inclusive), one round trip."""
    if not ranges:
        return []
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        for key, start, stop in ranges:
            pipe.lrange(key, start, stop)
        return list(pipe.execute())


def records_and_marks(
    storage: Transport, queue: str, ids: Sequence[str], marks: Sequence[str]
) -> tuple[list[str | None], list[str | None]]:
    """The records of ``ids`` and the values of the leftover ``marks`` (fields of the same
    tasks hash), one round trip."""
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        pipe.hmget(storage.keys.tasks(queue), list(ids))
        pipe.hmget(storage.keys.tasks(queue), list(marks))
        raws, flags = pipe.execute()
    return list(raws), list(flags)
