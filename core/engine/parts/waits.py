"""Waits: the blocking calls of :class:`~ztq.core.engine.storage.Storage`
(``storage.waits``): an idle executor waiting for a wake-up token or a handed task, a
producer waiting for room in a full queue, a caller waiting for a task's run to finish (the
history stream).

A part of its own because every call here holds a connection for up to
:data:`~ztq.core.engine.waits.MAX_BLOCK` seconds, which the rest of the storage never does:
the bound on a blocking read, the Cluster watchers (:class:`~ztq.core.engine.waits.MultiWait`,
owned here and closed with the storage) and what a lost token costs are decided here.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from ztq.core.engine.parts.leases import Leased
from ztq.core.engine.transport import Transport
from ztq.core.engine.waits import (
    MAX_BLOCK,
    MultiWait,
    block_ms,
    latest_status,
    read_entries,
    tail_id,
)


class Waits:
    """Waits for wake-up tokens, handed tasks, room in a queue and finished runs."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.keys = transport.keys
        self._multi_waits: dict[tuple[int, tuple[str, ...]], MultiWait] = {}  # Cluster only
        self._multi_lock = threading.Lock()

    def close(self) -> None:
        """Stop the Cluster wake watchers (``Storage.close``)."""
        with self._multi_lock:
            waits, self._multi_waits = list(self._multi_waits.values()), {}
        for w in waits:
            w.close()

    def wait(self, queues: Sequence[str], timeout: float, *, schedule: bool = False) -> bool:
        """Block until a wake-up token arrives for one of ``queues`` or ``timeout`` passes.

        Executors wait for ready tasks (``wake``: enqueue, redo, promote push one);
        schedulers for delayed ones (``schedule=True``: a delayed enqueue or a retry). A
        token is a hint; losing one only delays a task until the next timeout. Redis fires
        a BLPOP timeout only on its own clock tick (up to 100 ms late with the default
        ``hz 10``), so callers that need a precise instant wait for it on the client. On a
        Cluster, where one BLPOP cannot span slots, several queues are watched by one
        blocked connection each (:class:`ztq.core.engine.waits.MultiWait`).
        """
        timeout = min(max(timeout, 0.001), MAX_BLOCK)
        keys = self.wait_keys(queues, schedule)
        if self.transport.is_cluster and len(keys) > 1:
            return self._multi_wait(keys).wait(timeout)
        with self.transport.guard():
            return self.transport.client.blpop(keys, timeout=timeout) is not None

    def _multi_wait(self, keys: list[str]) -> MultiWait:
        """The calling thread's watchers of ``keys`` (made on its first wait; each blocks on
        a connection of its own, outside the client's pools)."""
        me = threading.current_thread()
        key = (me.ident or 0, tuple(keys))
        with self._multi_lock:
            found = self._multi_waits.get(key)
            if found is not None and found.owner is me:
                return found
            for k, w in list(self._multi_waits.items()):
                if not w.owner.is_alive():
                    del self._multi_waits[k]
            made = self._multi_waits[key] = MultiWait(self.transport.client, keys, me)
            return made

    def nudge(self, queues: Sequence[str], *, schedule: bool = False) -> None:
        """A wake-up token on each of ``queues`` (a queue named twice gets two: one per
        blocked reader to wake): executors (``schedule``: schedulers) blocked on them look
        at their flags now (a stopping worker's) instead of at the end of their wait;
        another worker's may wake for nothing, as for any token."""
        if not queues:
            return
        with self.transport.guard():
            pipe = self.transport.client.pipeline(transaction=False)
            for key in self.wait_keys(queues, schedule):
                pipe.lpush(key, "1")
            pipe.execute()

    def wait_keys(self, queues: Sequence[str], schedule: bool = False) -> list[str]:
        """The lists :meth:`wait` blocks on, one per queue."""
        name = self.keys.schedule if schedule else self.keys.wake
        return [name(q) for q in queues]

    def wait_handed(
        self, queue: str, worker: str, thread: str, timeout: float
    ) -> Leased | None | bool:
        """Block, as the queue's registered waiter, until an enqueue hands it a task (its
        lease, returned) or a wake-up token arrives (True) or ``timeout`` passes (False).
        An entry for another executor (which a registration never allows: it needs an empty
        hand list) would be dropped here; its task comes back when its lease runs out."""
        timeout = min(max(timeout, 0.001), MAX_BLOCK)
        k = self.keys
        with self.transport.guard():
            got = self.transport.client.blpop([k.hand(queue), k.wake(queue)], timeout=timeout)
        if got is None:
            return False
        key, value = got
        if str(key) != k.hand(queue):
            return True
        owner, name, token, failures, task_id, payload = str(value).split("\t", 5)
        if (owner, name) != (worker, thread):
            return True  # not ours: fetch again (the reaper recovers it)
        return Leased(task_id, queue, int(token), payload, int(failures))

    def wait_room(self, queue: str, timeout: float) -> None:
        """Block until a fetch makes room in a full queue (a token, a hint) or ``timeout``."""
        with self.transport.guard():
            self.transport.client.blpop([self.keys.room(queue)], timeout=max(timeout, 0.01))

    def history_tail(self, queue: str) -> str:
        """The id of the queue's newest history entry ('0-0' when there is none): where a
        waiter starts reading, taken before it looks at the record (no lost wake-up)."""
        with self.transport.guard():
            return tail_id(
                self.transport.client.xrevrange(self.keys.history(queue), "+", "-", count=1)
            )

    def finished_lately(self, queue: str, task_id: str, look: int = 1000) -> str | None:
        """The status of ``task_id``'s latest run among the queue's last ``look`` finished
        runs ('done', 'failed', 'retry'), or None: for a task whose record is gone."""
        with self.transport.guard():
            entries = self.transport.client.xrevrange(
                self.keys.history(queue), "+", "-", count=look
            )
        return latest_status(entries, task_id)

    def wait_history(
        self, queue: str, after: str, timeout: float
    ) -> list[tuple[str, dict[str, str]]]:
        """Block until runs of ``queue`` finish after entry ``after`` (or ``timeout`` passes);
        returns those entries. Every ack and failure writes one, so waiting costs the
        workers nothing."""
        with self.transport.guard():
            reply = self.transport.client.xread(
                {self.keys.history(queue): after}, count=500, block=block_ms(timeout)
            )
        return read_entries(reply)
