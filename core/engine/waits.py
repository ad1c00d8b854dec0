"""Waiting on the wake lists of several queues at once on a Redis Cluster.

A BLPOP cannot span hash slots, and every queue has its own slot (``{queue}``), so a thread
serving several queues used to watch the first queue's list only and notice the others at
its next ``idle_wait`` timeout. Here each list gets a *watcher*: a daemon thread with its
own connection that blocks on that one list while its owner waits, and wakes the owner
the moment a token arrives — no polling, one blocked connection per list.

Each watcher blocks on a connection of its own (to the master of its key's slot), so that
closing the storage cuts a blocked BLPOP at once instead of letting it take a token meant
for someone else. A token is a hint meant for *one* idle executor. Watchers block only as
long as their owner waits (the owner's deadline is their BLPOP timeout); one that takes a
token after its owner stopped waiting (another list woke it first) pushes the token back,
so the hint still reaches someone else. Watchers end when their owner thread has ended or
the storage is closed.

Beside them, what every blocking read shares: its bound (:data:`MAX_BLOCK`) and the helpers
that read the history stream's replies, for the sync part (``parts.waits``) and the asyncio
twin (:mod:`ztq.core.engine.aio.transport`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from typing import Any

import redis
from redis.exceptions import RedisError, ResponseError

MAX_BLOCK = 8.0  # seconds: blocking reads stay below the client's socket timeout (10 s)
IDLE_CHECK = 5.0  # seconds between two looks at the owner while it does not wait


class MultiWait:
    """Lets one thread wait for a token on any of ``keys`` (each in its own slot)."""

    def __init__(self, client: Any, keys: Sequence[str], owner: threading.Thread) -> None:
        self.client, self.keys, self.owner = client, list(keys), owner
        self.armed = threading.Event()  # the owner is waiting
        self.fired = threading.Event()  # a token arrived for it
        self.closed = False
        self.deadline = 0.0  # monotonic time the owner's current wait ends
        self._lock = threading.Lock()
        self._conns: dict[str, Any] = {}  # key -> its watcher's own redis.Redis
        self.threads = [
            threading.Thread(target=self._watch, args=(key,), name=f"ztq-wake-{key}", daemon=True)
            for key in self.keys
        ]
        for t in self.threads:
            t.start()

    def wait(self, timeout: float) -> bool:
        """Block until a token arrives on one of the lists or ``timeout`` passes."""
        with self._lock:
            self.fired.clear()
            self.deadline = time.monotonic() + timeout
            self.armed.set()
        try:
            return self.fired.wait(timeout)
        finally:
            with self._lock:
                self.armed.clear()

    def _deliver(self, key: str) -> None:
        """A token was taken from ``key``: wake the owner, or give the token back."""
        with self._lock:
            if self.armed.is_set() and not self.fired.is_set() and not self.closed:
                self.fired.set()
                return
        # someone else may be waiting for it; a hint lost only delays a task to a timeout
        with contextlib.suppress(RedisError, OSError):
            self.client.lpush(key, "1")

    def close(self) -> None:
        """Stop watching: the owner's wait returns, blocked BLPOPs are cut."""
        self.closed = True
        self.fired.set()
        self.armed.set()  # let idle watchers see it
        with self._lock:
            conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            with contextlib.suppress(Exception):
                conn.connection_pool.disconnect(inuse_connections=True)

    def _conn(self, key: str) -> Any:
        """The watcher's own connection to the master that holds ``key`` now."""
        with self._lock:
            conn = self._conns.get(key)
            if conn is None:
                if not hasattr(self.client, "get_node_from_key"):  # not a Cluster: its pool
                    return self.client
                node_client = self.client.get_redis_connection(self.client.get_node_from_key(key))
                kwargs = dict(node_client.connection_pool.connection_kwargs)
                conn = self._conns[key] = redis.Redis(connection_pool=redis.ConnectionPool(
                    connection_class=node_client.connection_pool.connection_class,
                    max_connections=2, **kwargs))  # fmt: skip
            return conn

    def _forget(self, key: str) -> None:
        """The slot moved (MOVED, failover): find its master again next time."""
        with self._lock:
            conn = self._conns.pop(key, None)
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.connection_pool.disconnect(inuse_connections=True)
        with contextlib.suppress(Exception):
            self.client.nodes_manager.initialize()

    def _watch(self, key: str) -> None:
        while self.owner.is_alive() and not self.closed:
            if not self.armed.wait(IDLE_CHECK):
                continue
            left = self.deadline - time.monotonic()
            if left <= 0.001 or self.closed:
                time.sleep(0.001)  # the owner's wait ended: wait for it to disarm
                continue
            try:
                got = self._conn(key).blpop([key], timeout=left)
            except (RedisError, OSError, ValueError) as exc:
                if self.closed:
                    return
                if isinstance(exc, ResponseError) and str(exc).startswith(("MOVED", "ASK")):
                    self._forget(key)
                    continue
                time.sleep(min(1.0, max(0.0, self.deadline - time.monotonic())))
                continue  # Redis away: the owner's own timeout covers it
            if got is not None:
                self._deliver(key)


# -- replies of the history stream, shared with the asyncio twin (ztq.core.engine.aio) -----
def block_ms(timeout: float) -> int:
    """A blocking read's timeout in ms, kept below the client's socket timeout."""
    return int(min(max(timeout, 0.001), MAX_BLOCK) * 1000)


def tail_id(reply: Sequence[Any]) -> str:
    return str(reply[0][0]) if reply else "0-0"


def latest_status(entries: Sequence[Any], task_id: str) -> str | None:
    return next((str(f.get("status")) for _, f in entries if f.get("id") == task_id), None)


def read_entries(reply: Any) -> list[tuple[str, dict[str, str]]]:
    return [(str(i), dict(f)) for _, entries in reply or [] for i, f in entries]
