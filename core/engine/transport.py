"""The transport under :class:`~ztq.core.engine.storage.Storage`: the redis-py client, its
key names, script calls, round trips of several operations, connection errors and failovers.

Separate from what the parts of ``Storage`` do with Redis (``ztq.core.engine.parts``: tasks,
leases, queues, ...) because every one of them goes through it, each holding a reference to
the one transport of its storage: how a call reaches Redis and what happens when it cannot
is decided here once, and nowhere else.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ztq.core.engine.fault_kinds import unreachable
from ztq.core.engine.keys import Keys
from ztq.core.engine.scripts import SCRIPTS, Op
from ztq.core.engine.wire.framing import HELD, TailedKeys
from ztq.core.errors import ConnectionFailed
from ztq.core.settings.redis_urls import safe_url
from ztq.core.settings.table import REQUEST_WINDOW


class RequestIds:
    """Request ids of enqueue calls: a random prefix per process (made anew in a forked
    child) and a counter, so that making one costs no system call; unique across the
    producers of one Redis within any request window."""

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self.prefix = os.urandom(6).hex()
        self.count = itertools.count()  # next() is atomic: threads never share an id


REQUEST_IDS = RequestIds()


class Transport:
    """The client and the calls through it: what every part of a ``Storage`` goes through."""

    def __init__(
        self,
        client: Any,
        *,
        prefix: str = "ztq",
        url: str = "",
        request_window: float = REQUEST_WINDOW,
    ) -> None:
        self.client = client
        self.keys = Keys(prefix)
        self.url = url
        # ms an enqueue's answer is kept for the same request sent again (request_window)
        self.request_window_ms = max(1, int(request_window * 1000))
        self.is_cluster = isinstance(client, redis.RedisCluster)
        # fakeredis (a memory:// URL, or a client passed in): no MEMORY USAGE, no CLIENT
        self.in_memory = type(client).__module__.startswith("fakeredis")
        # the combiner of concurrent one-by-one enqueues on this connection, made on first
        # use by ztq.core.client.coalesce (the engine only keeps its slot)
        self.coalescer: Any = None

    def __repr__(self) -> str:
        return f"<Storage {safe_url(self.url)} prefix={self.keys.prefix!r}>"

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Turn redis-py connection errors into :class:`ConnectionFailed` naming the URL.

        A server that became a replica (its master was demoted: a failover) counts as one
        too, so callers retry with backoff: ``READONLY`` on a write, ``UNBLOCKED`` on a
        blocked ``BLPOP``. The pool's connections are dropped first, so the next try
        connects afresh: a ``redis+sentinel://`` client asks the sentinels for the new
        master, a DNS name or a virtual IP may point to it by now."""
        try:
            yield
        except redis.exceptions.ResponseError as exc:
            demoted = isinstance(exc, redis.exceptions.ReadOnlyError) or str(exc).startswith(
                "UNBLOCKED"
            )
            if not demoted:
                raise
            # best effort (a Cluster has no one pool); only idle connections: one another
            # thread is using (a BLPOP) gets its own error and comes here itself
            with contextlib.suppress(Exception):
                self.client.connection_pool.disconnect(inuse_connections=False)
            raise ConnectionFailed(
                f"Redis at {safe_url(self.url)} is a replica now (a failover?): {exc}"
            ) from exc
        except (RedisConnectionError, RedisTimeoutError) as exc:
            raise ConnectionFailed(unreachable(self.url, exc)) from exc

    @staticmethod
    def request_id() -> str:
        """A new request id (an enqueue's: docs/design.md, "Lost replies")."""
        return f"{REQUEST_IDS.prefix}{next(REQUEST_IDS.count):x}"

    def merge_enqueues(self, ops: Sequence[Op]) -> tuple[list[Op], list[list[tuple[int, int]]]]:
        """Coalesced one-by-one enqueues (``ztq.core.client.coalesce``) as one script call per
        queue: what a script call costs Redis beside its tasks (its run, the queue's config,
        the waiter) is paid once per queue and round trip, and so is the kept answer (one
        request id for the merged call: sent again after a lost reply, it is answered as
        the first time). Other ops (a once-guard, another script) go as they are.

        Here, beside how calls are sent, as the other half of what a resent call needs (the
        request ids); the ops are ``Tasks.enqueue_op``'s: 9 arguments a task, then the
        request window. Returns the ops to send and, for each, the (position in ``ops``,
        tasks) it answers in order; tasks is -1 for an op sent as it was (its whole reply is
        its caller's)."""
        sent: list[Op] = []
        parts: list[list[tuple[int, int]]] = []
        merged: dict[int, int] = {}  # id of the queue's key list -> its op in ``sent``
        grouped: dict[int, list[Sequence[Any]]] = {}  # op in ``sent`` -> the ops' args
        for pos, (name, keys, args) in enumerate(ops):
            if name != "enqueue" or type(keys) is not TailedKeys or len(keys.tail) != 1:
                sent.append((name, keys, args))
                parts.append([(pos, -1)])
                continue
            at = merged.setdefault(id(keys.base), len(sent))
            if at == len(sent):
                sent.append((name, keys, args))
                parts.append([])
                grouped[at] = []
            grouped[at].append(args)
            parts[at].append((pos, (len(args) - 1) // 9))
        for at, each in grouped.items():
            if len(each) > 1:  # a new call: a request id of its own
                base = sent[at][1].base  # type: ignore[attr-defined]
                keys = TailedKeys(base, [self.keys.request(base.queue, self.request_id())])
                args = [x for a in each for x in a[:-1]]
                args.append(self.request_window_ms)
                sent[at] = ("enqueue", keys, args)
        return sent, parts

    def call(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """One script call; its faults as :meth:`guard` turns them (entered only on an error:
        a generator context manager per call cost a one-by-one enqueue 1 µs)."""
        try:
            return SCRIPTS.call(self.client, name, keys, args)
        except (ResponseError, RedisConnectionError, RedisTimeoutError) as exc:
            with self.guard():
                raise exc

    def execute(self, ops: Sequence[Op]) -> list[Any]:
        """Run several operations in one round trip; results in the same order."""
        with self.guard():
            return SCRIPTS.call_many(self.client, ops)

    def submit(self, ops: Sequence[Op]) -> Callable[[], list[Any]]:
        """:meth:`execute` in two halves: the operations are sent now, and the returned
        function (to call once) reads their results, raising as :meth:`execute` does. A
        worker thread runs a batch between the two, while Redis runs the acks of the last
        batch and the fetch of the next (``Scripts.submit``)."""
        with self.guard():
            finish = SCRIPTS.submit(self.client, ops)

        def results() -> list[Any]:
            with self.guard():
                return finish()

        return results

    def execute_each(self, ops: Sequence[Op]) -> list[Any]:
        """:meth:`execute`, each script's error kept as its own reply (an exception object)
        instead of raised: the coalesced enqueues of several callers share the round trip,
        and each gets its own reply. An unreachable Redis fails them all
        (:class:`ConnectionFailed`)."""
        with self.guard():
            return SCRIPTS.call_each(self.client, ops)

    def execute_replicated(
        self, ops: Sequence[Op], replicas: int, timeout_ms: int
    ) -> tuple[list[Any], int]:
        """:meth:`execute`, then ``WAIT`` until ``replicas`` replicas have the writes or
        ``timeout_ms`` passes; returns the results and how many replicas confirmed (on a
        Cluster: the fewest of the masters written to). One round trip per master."""
        with self.guard():
            if not self.is_cluster:
                *replies, confirmed = SCRIPTS.call_many(
                    self.client, ops, wait=(replicas, timeout_ms)
                )
                return replies, int(confirmed)
            return self._execute_replicated_cluster(ops, replicas, timeout_ms)

    def _execute_replicated_cluster(
        self, ops: Sequence[Op], replicas: int, timeout_ms: int
    ) -> tuple[list[Any], int]:
        """Per master, its scripts and a WAIT on one plain connection to it (a cluster
        pipeline cannot send WAIT, which names no key). A slot that moved meanwhile (MOVED)
        makes the client reload the slot map and try once more; the scripts are safe to
        run again (enqueueing an id twice keeps one task)."""
        for attempt in (1, 2):
            by_node: dict[str, list[int]] = {}
            nodes: dict[str, Any] = {}
            for n, (_, keys, _) in enumerate(ops):
                node = self.client.get_node_from_key(keys[0])
                by_node.setdefault(node.name, []).append(n)
                nodes[node.name] = node
            replies: list[Any] = [None] * len(ops)
            confirmed = replicas
            try:
                for name, positions in by_node.items():
                    conn = self.client.get_redis_connection(nodes[name])
                    *got, acks = SCRIPTS.call_many(
                        conn, [ops[p] for p in positions], wait=(replicas, timeout_ms)
                    )
                    for p, reply in zip(positions, got, strict=True):
                        replies[p] = reply
                    confirmed = min(confirmed, int(acks))
            except ResponseError as exc:
                if attempt == 2 or not str(exc).startswith(("MOVED", "ASK")):
                    raise
                self.client.nodes_manager.initialize()
                continue
            return replies, confirmed
        raise AssertionError("unreachable")

    def reserve_connections(self, n: int) -> None:
        """Let the client hold ``n`` connections at once (a worker: one per thread, plus its
        own threads). redis-py caps a pool at 100 and then raises "Too many connections":
        a 200-thread worker lost acks to it, and their tasks ran twice."""
        pools = [self.client.connection_pool] if hasattr(self.client, "connection_pool") else []
        if self.is_cluster:
            nodes = [node.redis_connection for node in self.client.get_nodes()]
            pools = [conn.connection_pool for conn in nodes if conn is not None]
        for pool in pools:
            if getattr(pool, "max_connections", n) < n:
                pool.max_connections = n

    def ping_server(self) -> bool:
        with self.guard():
            return bool(self.client.ping())

    def close(self) -> None:
        """Close the client's connections."""
        if self.client is not None:
            pool = getattr(self.client, "connection_pool", None)
            if pool is not None:
                HELD.drop(pool)
            self.client.close()
