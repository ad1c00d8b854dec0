"""The storage layer: every Redis call of ztq goes through a :class:`Storage`.

One ``Storage`` is one Redis (or Redis Cluster) plus a key prefix: the
:class:`~ztq.core.engine.transport.Transport` (the client, the key names, script calls,
round trips of several operations, failovers) and its parts, one object per concern, each
holding a reference to that transport (``ztq.core.engine.parts``)::

    storage.tasks       enqueue, promote, redo, delete; the task records
    storage.leases      fetch, ack, fail, renew, release, progress, reap (the worker's loop)
    storage.queues      registration, pause, limits; the queue names, flags and lengths
    storage.errors      the errors pages' trash, restore, redo follow-through and counters
    storage.waits       the blocking waits (wake-up tokens, handed tasks, room, history)
    storage.batches     batch records, members' ends, the outbox relay
    storage.key_turns   the keyed tasks' busiest keys and the pause of one key

Each part's class is its typed interface; callers name the part (``storage.leases.ack(...)``),
the facade holds no delegations. The in-memory engine (``memory://NAME``,
``ztq.core.engine.wire.memory``) is this same ``Storage`` over a fake Redis, so it passes the
same contract tests.

Batching round trips: a write that callers send together with others comes as
``x_op(...)``, which returns an :data:`~ztq.core.engine.scripts.Op` (script, keys, args);
:meth:`Transport.execute` (or ``submit``, ``execute_replicated``) sends a list of them in one
round trip and returns their replies in order, which the caller reads with the part's parser
where there is one (``leases.parse_fetch``). Where a caller also runs the write alone, the
part has ``x(...)`` beside it: the same op sent now, its reply read. This is the
``pipeline=`` of STYLE.md in the form the scripts need: an op is a value, so a transaction,
the coalescer and the worker's ack + next fetch build their lists without a pipeline object,
and each reply keeps its own type (a ``pipeline=`` argument would make every write return
either its reply or nothing).
"""

from __future__ import annotations

import json
from typing import Any

from ztq.core.engine.parts.batches import Batches
from ztq.core.engine.parts.errors import Errors
from ztq.core.engine.parts.key_turns import KeyTurns
from ztq.core.engine.parts.leases import (
    DEFAULT_HISTORY_MAXLEN,
    DEFAULT_RESULT_TTL_MS,
    Finished,
    Leased,
    Leases,
    Reaped,
)
from ztq.core.engine.parts.queues import Queues
from ztq.core.engine.parts.tasks import EnqueueArgs, EnqueueEntry, Promoted, Tasks
from ztq.core.engine.parts.waits import Waits
from ztq.core.engine.transport import Transport, safe_url
from ztq.core.engine.waits import MAX_BLOCK, block_ms, latest_status, read_entries, tail_id

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


class Storage(Transport):
    """One Redis and a key prefix: the one door to Redis for the client, the worker, the
    console and the CLI. No other object talks to Redis. It is the transport (``call``,
    ``execute``, ``submit``, ``keys``, ``guard``) with its parts (see the module docstring),
    made here, one of each per storage."""

    def __init__(self, client: Any, **options: Any) -> None:
        """``options``: the transport's (``prefix``, ``url``, ``request_window``)."""
        super().__init__(client, **options)
        self.queues = Queues(self)
        self.tasks = Tasks(self, self.queues)
        self.leases = Leases(self)
        self.errors = Errors(self)
        self.waits = Waits(self)
        self.batches = Batches(self)
        self.key_turns = KeyTurns(self)

    def close(self) -> None:
        """Stop the Cluster wake watchers and close the client's connections."""
        self.waits.close()
        super().close()


def dumps(value: Any) -> str:
    """Compact JSON, the one encoding of everything ztq writes."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=False)
