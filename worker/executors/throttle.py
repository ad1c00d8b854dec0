"""An executor held back by a queue's rate limit (docs/queue-controls.md, "Rate limits").

A throttled fetch names the one executor registered to take the next token and how long
until it comes (``fetch.lua``); every other idle executor sleeps on the wake lists as usual.
The registered one sleeps until the instant, no polling, and can still be woken.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ztq.core.engine.storage import Storage

# seconds before the next token when a thread sleeping until it stops blocking on the wake
# lists (a BLPOP times out on Redis's clock tick, up to 100 ms late) and waits for the
# instant on its own clock
TOKEN_MARGIN = 0.2


class Tokens:
    """What an executor's fetches said of rate-limit tokens: the soonest instant it is
    registered for, and the queues whose next token it awaits (each fetch round starts
    afresh: :meth:`clear`)."""

    def __init__(self) -> None:
        self.wait: float | None = None
        self.queues: list[str] = []

    def clear(self) -> None:
        self.wait, self.queues = None, []

    def note(self, storage: Storage, queue: str, reply: Any) -> None:
        waits = next_token_wait(storage, reply, None)
        if waits is not None:  # registered for this queue's next token
            self.queues.append(queue)
            self.wait = waits if self.wait is None else min(self.wait, waits)

    def pop(self) -> float | None:
        """Seconds to the soonest token this executor awaits, once."""
        wait, self.wait = self.wait, None
        return wait

    def leave(self, storage: Storage, worker: str, thread: str) -> None:
        """The executor took other work: it will not be there at its tokens' instants, so
        it leaves the registrations to the idle executors it wakes (rate_leave.lua)."""
        for queue in self.queues:
            storage.queues.rate_leave(queue, worker, thread)
        self.clear()


def next_token_wait(storage: Storage, reply: Any, before: float | None) -> float | None:
    """The seconds until the next token when this fetch ``reply`` registered the caller for
    it (the sooner of that and ``before``), else ``before``."""
    throttled = storage.leases.fetch_throttled(reply)
    if throttled is None or math.isinf(throttled):
        return before
    return throttled if before is None else min(before, throttled)


def wait_for_token(
    storage: Storage,
    queues: Sequence[str],
    seconds: float,
    retired: threading.Event,
    exiting: Callable[[], bool],
) -> None:
    """Sleep ``seconds``, until the rate limit's next token: blocked on the wake lists of
    ``queues``, so that a stop, a pause, new work of another queue or a lifted limit still
    wake the thread, until just before the instant, which it then waits for on its own
    clock (``retired`` cuts that short)."""
    deadline = time.monotonic() + seconds
    while not exiting():  # a blocking read is capped (blocking.MAX_BLOCK): read again
        left = deadline - time.monotonic() - TOKEN_MARGIN
        if left <= 0:
            break
        if storage.waits.wait(queues, left):
            return  # woken: fetch again now
    left = deadline - time.monotonic()
    if left > 0 and not exiting():
        retired.wait(left)
