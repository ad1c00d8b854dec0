"""The storage layer: every Redis call of ztq goes through a :class:`Storage`.

One ``Storage`` is one Redis (or Redis Cluster) plus a key prefix. Each state move of a task
is one Lua script (``scripts/*.lua``); write methods come in two forms, ``x(...)`` that runs
now and ``x_op(...)`` that returns an operation for :meth:`Storage.execute`, so callers batch
several moves into one round trip (transactions, a worker's ack + next fetch).

The class is assembled from one mixin per responsibility, each in its own module:
``transport`` (the client, script calls, pipelines, failovers), ``task_moves`` (the state
moves), ``queue_admin`` (registration, pause, limits), ``reads`` (listings, records,
lengths) and ``blocking`` (the blocking waits). The names callers import stay here.
"""

from __future__ import annotations

import json
from typing import Any

from ztq.core.engine.batching.store import BatchStore
from ztq.core.engine.blocking import (
    MAX_BLOCK,
    BlockingWaits,
    block_ms,
    latest_status,
    read_entries,
    tail_id,
)
from ztq.core.engine.features.key_turns import KeyTurns
from ztq.core.engine.queue_admin import QueueAdmin
from ztq.core.engine.reads import Reads
from ztq.core.engine.task_moves import (
    DEFAULT_HISTORY_MAXLEN,
    DEFAULT_RESULT_TTL_MS,
    EnqueueArgs,
    EnqueueEntry,
    Finished,
    Leased,
    Promoted,
    Reaped,
    TaskMoves,
)
from ztq.core.engine.transport import Transport, safe_url

__all__ = [
    "DEFAULT_HISTORY_MAXLEN",
    "DEFAULT_RESULT_TTL_MS",
    "MAX_BLOCK",
    "EnqueueArgs",
    "EnqueueEntry",
    "Finished",
    "Leased",
    "Promoted",
    "Reaped",
    "Storage",
    "block_ms",
    "dumps",
    "latest_status",
    "read_entries",
    "safe_url",
    "tail_id",
]


class Storage(TaskMoves, BatchStore, BlockingWaits, QueueAdmin, KeyTurns, Reads, Transport):
    """One Redis and a key prefix: the one door to Redis for the client, the worker, the
    console and the CLI. No other object talks to Redis; the mixins only split its methods
    by responsibility (see the module docstring), and all of them share the state that
    :class:`~ztq.core.engine.transport.Transport` sets up."""


def dumps(value: Any) -> str:
    """Compact JSON, the one encoding of everything ztq writes."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=False)
