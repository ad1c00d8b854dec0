"""The acks and failures an executor has yet to write, and which of them are on their way.

A run that ends queues its ack or failure in a :class:`Batch`; the executor writes the batch
with its next fetch, in one round trip. What is on its way is listed op by op (:data:`Sent`),
so that when Redis refuses one op of the round trip (full, read-only) the ones it ran before
are known to be done and are not sent again (``BaseExecutor.unsent``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from ztq.core.client.batch import relay
from ztq.core.engine.parts.leases import BATCH_FLAG
from ztq.core.engine.scripts import Op
from ztq.core.engine.storage import Finished, Storage
from ztq.worker.resilience.faults import Faults

log = logging.getLogger(__name__)


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


def ends_to_relay(sent: list[Sent], replies: list[Any]) -> tuple[list[Any], list[str]]:
    """The replies of a round trip's acks and failures without ack's batch flag, and the
    queues where they ended a batch member (an ack that says so, a failure into the error
    list), whose outboxes the executor relays right away (docs/batches.md)."""
    queues: list[str] = []
    clean: list[Any] = []
    for (what, queue, _), reply in zip(sent, replies, strict=False):
        if what == "ack" and isinstance(reply, list) and BATCH_FLAG in reply:
            reply = [x for x in reply if x != BATCH_FLAG]
            queues.append(queue)
        elif what == "fail" and reply == "error":
            queues.append(queue)
        clean.append(reply)
    return clean, sorted(set(queues))


RELAY = "relaying batch ends"  # the relay's name in the worker's faults (logs, /readyz)


def relay_ends(storage: Storage, app: Any, queues: list[str], faults: Faults) -> None:
    """Relay those outboxes; a failure is logged, not raised (the sweep relays them later).

    A Redis fault goes through the worker's one-line-per-fault-kind rule (``faults``): during
    an outage every executor's relay fails, and a WARNING with its chained tracebacks for
    each of them buried the one line that said Redis was gone (issue 35). An error that is
    not Redis's (a bug) is logged with its traceback, each time."""
    try:
        relay(storage, queues, app)
    except Exception as exc:  # the worker's sweep picks the entries up again
        if faults.failed(RELAY, exc) is None:
            log.warning("relay of batch ends in %s failed; the sweep retries", queues,
                        exc_info=True)  # fmt: skip
    else:
        faults.ok(RELAY)
