"""What an executor and a channel reader may ask of the worker that runs them: the host.

Executors (``threads``, ``async_pool``) and the worker's broadcast and subscription readers
(``ztq.worker.channels``) are started by :class:`ztq.worker.worker.Worker` and need a few of
its parts: its id, app, config, storage, the stop and pause flags, its fault book, and three
questions about its queues. They are typed against :class:`ExecutorHost`, not against
``Worker``, so that no module below the worker imports it, not even for its types (issue 37:
that made a 9-module type-level cycle around ``Worker``; tests/test_architecture.py counts
``TYPE_CHECKING`` imports now). ``Worker`` satisfies the protocol as it is: at run time the
host is the worker object, and middleware hooks still see it as ``Run.worker``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ztq.core.client.app import App
    from ztq.core.engine.storage import Storage
    from ztq.worker.config import WorkerConfig
    from ztq.worker.resilience.faults import Faults


class ServerRefusals(Protocol):
    """The worker's watch on its Redis's identity (``ztq.worker.resilience.identity``)."""

    def gone(self, keys: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
        """Of these (queue, task id), whose write Redis refused because its data went."""
        ...


class TimeoutPoke(Protocol):
    """The worker's timeout watchdog (``ztq.worker.executors.timeouts``)."""

    def poke(self) -> None: ...


class ExecutorHost(Protocol):
    """The parts of a worker its executors and channel readers use; nothing else."""

    @property
    def id(self) -> str: ...
    @property
    def app(self) -> App: ...
    @property
    def cfg(self) -> WorkerConfig: ...
    @property
    def storage(self) -> Storage: ...
    @property
    def stopping(self) -> threading.Event: ...
    @property
    def paused(self) -> threading.Event: ...
    @property
    def wakeup(self) -> threading.Event:
        """Set when an executor ends, so that a --burst worker's main loop sees it at once."""
        ...

    @property
    def faults(self) -> Faults: ...
    @property
    def watch(self) -> ServerRefusals: ...
    @property
    def timeouts(self) -> TimeoutPoke: ...

    def physical(self, queues: Sequence[str], turn: int = 0) -> list[str]:
        """The shards to fetch ``queues`` from (see ``Worker.physical``)."""
        ...

    def served_queues(self) -> list[str]:
        """The queues the live executors watch."""
        ...

    def queues_drained(self) -> bool:
        """Burst mode: nothing left to run in the worker's queues."""
        ...
