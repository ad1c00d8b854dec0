"""The acks and failures an executor has yet to write, and which of them are on their way.

A run that ends queues its ack or failure in a :class:`Batch`; the executor writes the batch
with its next fetch, in one round trip. What is on its way is listed op by op (:data:`Sent`),
so that when Redis refuses one op of the round trip (full, read-only) the ones it ran before
are known to be done and are not sent again (``BaseExecutor.unsent``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ztq.core.engine.scripts import Op
from ztq.core.engine.storage import Finished


@dataclass
class Batch:
    """Acks and failures of runs that ended, written with the next fetch."""

    acks: dict[str, list[Finished]] = field(default_factory=dict)  # queue -> successes
    fails: list[Op] = field(default_factory=list)
    fail_keys: list[tuple[str, str]] = field(default_factory=list)  # (queue, id) of each fail
    settled: list[tuple[str, str]] = field(default_factory=list)  # (queue, id) of both

    def add(self, other: Batch) -> None:
        """Append ``other``'s acks and failures after this batch's (their order kept)."""
        for queue, items in other.acks.items():
            self.acks.setdefault(queue, []).extend(items)
        self.fails += other.fails
        self.fail_keys += other.fail_keys
        self.settled += other.settled


# one op of a batch on its way: ("ack", queue, its runs) or ("fail", queue, (op, id))
Sent = tuple[str, str, Any]
