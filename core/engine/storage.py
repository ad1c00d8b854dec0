"""The storage layer: every Redis call of ztq goes through a :class:`Storage`.

One ``Storage`` is one Redis (or Redis Cluster) plus a key prefix. Each state move of a task
is one Lua script (``scripts/*.lua``); write methods come in two forms, ``x(...)`` that runs
now and ``x_op(...)`` that returns an operation for :meth:`Storage.execute`, so callers batch
several moves into one round trip (transactions, a worker's ack + next fetch).
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ztq.core.engine import queue_limits
from ztq.core.engine.keys import Keys, check_physical, shard_names, split_shard
from ztq.core.engine.queue_limits import KEEP, Keep, QueueLimits
from ztq.core.engine.record import TaskRecord
from ztq.core.engine.scripts import HELD, SCRIPTS, Op
from ztq.core.engine.waits import MultiWait
from ztq.core.errors import ConnectionFailed, InvalidOption
from ztq.core.states import Priority

DEFAULT_RESULT_TTL_MS = 3_600_000
DEFAULT_HISTORY_MAXLEN = 10_000
MAX_BLOCK = 8.0  # seconds: blocking reads stay below the client's socket timeout (10 s)
_PASSWORD_PARAM = re.compile(r"((?:^|[&;])(?:sentinel_)?password=)[^&;]*")


def safe_url(url: str) -> str:
    """The URL with its passwords masked, for messages and logs: the one before ``@`` and
    the ``password`` / ``sentinel_password`` parameters. Works on the host list of a
    ``redis+sentinel://`` URL (``h1:26379,h2:26379``), whose port ``urlsplit`` cannot read."""
    parts = urlsplit(url)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    if at and ":" in userinfo:
        parts = parts._replace(netloc=f"{userinfo.partition(':')[0]}:***@{hosts}")
    if "password=" in parts.query:
        parts = parts._replace(query=_PASSWORD_PARAM.sub(r"\1***", parts.query))
    return urlunsplit(parts)


@dataclass(frozen=True)
class Leased:
    """A task handed to a worker: run it, then ack or fail it presenting ``token``.

    ``token`` is unique to this lease and larger than any earlier one of the queue, so a
    write that presents it after the lease was lost is refused. ``failures`` counts the
    failed runs before this one in the series (what a task's ``retries`` limits; lost
    leases are counted apart, against ``max_lost``).
    """

    id: str
    queue: str
    token: int
    payload: str
    failures: int = 0


class EnqueueEntry(NamedTuple):
    """One task for :meth:`Storage.enqueue_op`."""

    id: str
    payload: str
    priority: Priority | str = Priority.NORMAL
    delay_ms: int = 0
    first: bool = False
    cron_name: str = ""
    cron_tick_ms: int = 0


# An EnqueueEntry's fields as a plain tuple, in its order (enqueue_op reads either)
EnqueueArgs = tuple[str, str, Priority | str, int, bool, str, int]


class Reaped(NamedTuple):
    items: list[tuple[str, str, str]]  # (id, worker that lost it, 'ready' or 'error')
    next_deadline: int | None  # the earliest lease deadline left (Redis clock, ms)
    now: int

    @property
    def wait(self) -> float | None:
        """Seconds until the next lease may expire, or None when nothing runs."""
        if self.next_deadline is None:
            return None
        return max(0.0, (self.next_deadline - self.now) / 1000)


class Promoted(NamedTuple):
    moved: int
    next_due: int | None  # epoch ms on Redis's clock, None when nothing is delayed
    now: int  # Redis's clock when it answered (ms)

    @property
    def wait(self) -> float | None:
        """Seconds until the next delayed task is due, or None."""
        return None if self.next_due is None else max(0.0, (self.next_due - self.now) / 1000)


@dataclass(frozen=True)
class Finished:
    """One successful run to acknowledge."""

    id: str
    token: int
    task: str
    result: str = ""  # JSON text, '' when the result is not kept
    ttl_ms: int | None = None  # how long the finished record is kept; None: the ack's default


class Storage:
    """One Redis and a key prefix; the only object that talks to Redis."""

    def __init__(self, client: Any, *, prefix: str = "ztq", url: str = "") -> None:
        self.client = client
        self.keys = Keys(prefix)
        self.url = url
        self.is_cluster = isinstance(client, redis.RedisCluster)
        self._known_queues: set[str] = set()
        self._key_lists: dict[tuple[str, str], list[str]] = {}  # hot paths: once per queue
        self._multi_waits: dict[tuple[int, tuple[str, ...]], MultiWait] = {}  # Cluster only
        self._multi_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<Storage {safe_url(self.url)} prefix={self.keys.prefix!r}>"

    def _key_list(self, script: str, queue: str) -> list[str]:
        """KEYS of the hot-path scripts (enqueue, fetch), built once per queue."""
        keys = self._key_lists.get((script, queue))
        if keys is None:
            k = self.keys
            if script == "enqueue":
                keys = [
                    k.tasks(queue),
                    *k.ready_all(queue),
                    k.delayed(queue),
                    k.errors(queue),
                    k.done(queue),
                    k.wake(queue),
                    k.cronlast(queue),
                    k.schedule(queue),
                    k.config(queue),
                    k.overflow(queue),
                    k.totals(queue),
                    k.paused(queue),
                    k.running(queue),
                    k.fence(queue),
                    k.waiter(queue),
                    k.hand(queue),
                ]
            else:
                keys = [
                    k.tasks(queue),
                    *k.ready_all(queue),
                    k.running(queue),
                    k.paused(queue),
                    k.wake(queue),
                    k.fence(queue),
                    k.config(queue),
                    k.overflow(queue),
                    k.room(queue),
                    k.waiter(queue),
                    k.hand(queue),
                ]
            self._key_lists[(script, queue)] = keys
        return keys

    # -- plumbing ----------------------------------------------------------------------------
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
            with contextlib.suppress(Exception):  # best effort; a Cluster has no one pool
                self.client.connection_pool.disconnect()
            raise ConnectionFailed(
                f"Redis at {safe_url(self.url)} is a replica now (a failover?): {exc}"
            ) from exc
        except (RedisConnectionError, RedisTimeoutError) as exc:
            raise ConnectionFailed(f"cannot reach Redis at {safe_url(self.url)}: {exc}") from exc

    def call(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        with self.guard():
            return SCRIPTS.call(self.client, name, keys, args)

    def execute(self, ops: Sequence[Op]) -> list[Any]:
        """Run several operations in one round trip; results in the same order."""
        with self.guard():
            return SCRIPTS.call_many(self.client, ops)

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

    # -- queues ------------------------------------------------------------------------------
    def register_queue(self, queue: str) -> None:
        """Record the queue name in the global set (once per process and queue)."""
        if queue not in self._known_queues:
            with self.guard():
                self.client.sadd(self.keys.queues, queue)
            self._known_queues.add(queue)

    def register_shards(self, queue: str, shards: int) -> None:
        """Record every shard of a sharded queue at once, so that workers fetch from all of
        them and the console counts them before a task landed in each."""
        names = [n for n in shard_names(queue, shards) if n not in self._known_queues]
        if names:
            with self.guard():
                self.client.sadd(self.keys.queues, *names)
            self._known_queues.update(names)

    def queues(self) -> list[str]:
        """The known queues, each shard of a sharded queue by its own name (``mail~2``)."""
        with self.guard():
            return sorted(self.client.smembers(self.keys.queues))

    def shards_of(self, queue: str, known: Sequence[str] | None = None) -> list[str]:
        """``queue`` and its known shards (``queue~1``, ...) in shard order; ``known``: the
        names of :meth:`queues`, when already read."""
        names = self.queues() if known is None else known
        found = {split_shard(n)[1]: n for n in names if split_shard(n)[0] == queue}
        found[0] = queue
        return [found[i] for i in sorted(found)]

    def forget_queue(self, queue: str) -> None:
        with self.guard():
            self.client.srem(self.keys.queues, queue)
        self._known_queues.discard(queue)

    def pause(self, queue: str) -> None:
        """Workers stop taking tasks of this queue, every shard of it (running ones finish);
        a shard's name (``mail~2``) pauses that shard alone."""
        check_physical(queue)
        for q in self.shards_of(queue):
            self.call("pause", [self.keys.paused(q), self.keys.wake(q)], ["1"])

    def resume(self, queue: str) -> None:
        """Workers take tasks of this queue (every shard) again, woken at once."""
        check_physical(queue)
        for q in self.shards_of(queue):
            self.call("pause", [self.keys.paused(q), self.keys.wake(q)], ["0"])

    def configure(
        self,
        queue: str,
        *,
        max_running: int | None | Keep = KEEP,
        max_pending: int | None | Keep = KEEP,
        when_full: str | Keep = KEEP,
        block_timeout: float | Keep = KEEP,
    ) -> int:
        """Set (None clears) the queue's limits, enforced by the scripts for every producer
        and worker: tasks running at once (``max_running``), tasks waiting in the ready lists
        (``max_pending``) and what an enqueue does when that is reached (``when_full``:
        raise, block up to ``block_timeout`` s, or buffer). Settings not given are kept. A
        sharded queue has no queue-wide count in one slot, so it is refused. Returns how
        many buffered tasks a raised or lifted ``max_pending`` moved in."""
        check_physical(queue)
        argv = queue_limits.fields(max_running=max_running, max_pending=max_pending,
                                   when_full=when_full, block_timeout=block_timeout)  # fmt: skip
        if len(self.shards_of(queue)) > 1:
            raise InvalidOption(
                f"queue {queue} is sharded: queue limits are counted in one slot, so a "
                "sharded queue cannot have one (see docs/scaling.md)"
            )
        k = self.keys
        keys = [k.config(queue), k.wake(queue), *k.ready_all(queue), k.tasks(queue),
                k.overflow(queue), k.room(queue)]  # fmt: skip
        return int(self.call("configure", keys, argv))

    def queue_config(self, queue: str) -> dict[str, Any]:
        """The queue-wide settings in force (``{"max_running": 1}``; {} when none)."""
        return self.queue_limits(queue).as_dict()

    def queue_limits(self, queue: str) -> QueueLimits:
        with self.guard():
            return QueueLimits.from_hash(self.client.hgetall(self.keys.config(queue)))

    def wait_room(self, queue: str, timeout: float) -> None:
        """Block until a fetch makes room in a full queue (a token, a hint) or ``timeout``."""
        with self.guard():
            self.client.blpop([self.keys.room(queue)], timeout=max(timeout, 0.01))

    def is_paused(self, queue: str) -> bool:
        with self.guard():
            return bool(self.client.exists(self.keys.paused(queue)))

    def pending_count(self, queue: str) -> int:
        """Ready (all levels) plus delayed tasks of a queue, in one round trip (the ready
        lists' leftovers, counted in the tasks hash, are not tasks: see _lib.lua)."""
        k = self.keys
        with self.guard():
            pipe = self.client.pipeline(transaction=False)
            for key in k.ready_all(queue):
                pipe.llen(key)
            pipe.zcard(k.delayed(queue))
            pipe.hmget(k.tasks(queue), [f"#{p.value}" for p in Priority])
            *counts, left = pipe.execute()
            return sum(int(n) for n in counts) - sum(int(n or 0) for n in left)

    # -- enqueue -----------------------------------------------------------------------------
    def enqueue_op(self, queue: str, entries: Sequence[EnqueueArgs]) -> Op:
        """One script call that enqueues ``entries`` (all of ``queue``) in order.

        The reply is ``[id, outcome, id, outcome, ...]``; see ``scripts/enqueue.lua``.
        """
        keys = self._key_list("enqueue", queue)
        args: list[Any] = []
        for tid, payload, prio, delay_ms, first, cron_name, cron_tick_ms in entries:
            level = prio.value if isinstance(prio, Priority) else prio
            args += [tid, payload, level, max(0, int(delay_ms)), int(first), cron_name,
                     int(cron_tick_ms)]  # fmt: skip
        return ("enqueue", keys, args)

    # -- worker side -------------------------------------------------------------------------
    def fetch_op(
        self, queue: str, worker: str, thread: str, lease_ms: int, limit: int, wait_ms: int = 0
    ) -> Op:
        """The fetch script call; ``wait_ms`` > 0 registers the caller as the queue's waiting
        executor when it takes nothing (see :meth:`handed`)."""
        keys = self._key_list("fetch", queue)
        return ("fetch", keys, [worker, thread, int(lease_ms), int(limit), int(wait_ms)])

    @staticmethod
    def parse_fetch(queue: str, reply: Sequence[Any]) -> list[Leased]:
        return [
            Leased(str(reply[i]), queue, int(reply[i + 1]), str(reply[i + 3]), int(reply[i + 2]))
            for i in range(1, len(reply), 4)
        ]

    @staticmethod
    def fetch_registered(reply: Sequence[Any]) -> bool:
        """Did this fetch make the caller the queue's waiter (it took nothing)?"""
        return bool(reply) and int(reply[0]) == 1

    def fetch(
        self, queue: str, worker: str, thread: str, lease_ms: int, limit: int = 1
    ) -> list[Leased]:
        name, keys, args = self.fetch_op(queue, worker, thread, lease_ms, limit)
        return self.parse_fetch(queue, self.call(name, keys, args))

    def wait_handed(
        self, queue: str, worker: str, thread: str, timeout: float
    ) -> Leased | None | bool:
        """Block, as the queue's registered waiter, until an enqueue hands it a task (its
        lease, returned) or a wake-up token arrives (True) or ``timeout`` passes (False).
        An entry for another executor (which a registration never allows: it needs an empty
        hand list) would be dropped here; its task comes back when its lease runs out."""
        timeout = min(max(timeout, 0.001), MAX_BLOCK)
        k = self.keys
        with self.guard():
            got = self.client.blpop([k.hand(queue), k.wake(queue)], timeout=timeout)
        if got is None:
            return False
        key, value = got
        if str(key) != k.hand(queue):
            return True
        owner, name, token, failures, task_id, payload = str(value).split("\t", 5)
        if (owner, name) != (worker, thread):
            return True  # not ours: fetch again (the reaper recovers it)
        return Leased(task_id, queue, int(token), payload, int(failures))

    def _finish_keys(self, queue: str, now: float | None) -> list[str]:
        """KEYS of ack.lua and fail.lua (one layout for both)."""
        k = self.keys
        at = time.time() if now is None else now
        minute = int(at // 60)
        return [
            k.tasks(queue),
            k.running(queue),
            k.done(queue),
            k.errors(queue),
            k.delayed(queue),
            k.history(queue),
            k.stats(queue, minute),
            *k.ready_all(queue),
            k.wake(queue),
            k.schedule(queue),
            k.stats5(queue, int(at // 300)),
            k.totals(queue),
            k.config(queue),
        ]

    def ack_op(
        self,
        queue: str,
        worker: str,
        items: Iterable[Finished],
        *,
        result_ttl_ms: int = DEFAULT_RESULT_TTL_MS,
        history_maxlen: int = DEFAULT_HISTORY_MAXLEN,
        now: float | None = None,
    ) -> Op:
        keys = self._finish_keys(queue, now)
        args: list[Any] = [worker, int(result_ttl_ms), int(history_maxlen)]
        for it in items:
            args += [it.id, it.token, it.task, it.result]
        return ("ack", keys, args)

    def ack(self, queue: str, worker: str, items: Iterable[Finished], **kw: Any) -> list[str]:
        """Acknowledge finished runs; returns the ids whose ack was refused (stale lease)."""
        name, keys, args = self.ack_op(queue, worker, items, **kw)
        return [str(x) for x in self.call(name, keys, args)]

    def fail_op(
        self,
        queue: str,
        worker: str,
        task_id: str,
        token: int,
        task: str,
        error: str,
        traceback: str,
        *,
        retry_delay_ms: int = -1,
        history_maxlen: int = DEFAULT_HISTORY_MAXLEN,
        now: float | None = None,
    ) -> Op:
        keys = self._finish_keys(queue, now)
        args = [worker, task_id, token, task, error, traceback, int(retry_delay_ms), history_maxlen]
        return ("fail", keys, args)

    def fail(
        self,
        queue: str,
        worker: str,
        task_id: str,
        token: int,
        task: str,
        error: str,
        traceback: str,
        **kw: Any,
    ) -> str:
        """Record a failed run: returns 'error', 'retry', 'rerun' or 'refused'."""
        name, keys, args = self.fail_op(queue, worker, task_id, token, task, error, traceback, **kw)
        return str(self.call(name, keys, args))

    def renew(
        self, queue: str, worker: str, lease_ms: int, held: Iterable[tuple[str, int]]
    ) -> list[str]:
        """Extend leases; returns the ids this worker does not hold any more."""
        args: list[Any] = [worker, int(lease_ms)]
        for task_id, token in held:
            args += [task_id, token]
        if len(args) == 2:
            return []
        reply = self.call("renew", [self.keys.tasks(queue), self.keys.running(queue)], args)
        return [str(x) for x in reply]

    def release(self, queue: str, worker: str, held: Sequence[tuple[str, int]]) -> int:
        """Put leased tasks back at the head of ready (in their order); returns how many."""
        if not held:
            return 0
        k = self.keys
        keys = [k.tasks(queue), k.running(queue), *k.ready_all(queue), k.wake(queue)]
        args: list[Any] = [worker]
        for task_id, token in held:
            args += [task_id, token]
        return int(self.call("release", keys, args))

    def set_run_info(
        self, queue: str, task_id: str, token: int, worker: str, field: str, value: str
    ) -> bool:
        """Store progress / comment / pid of a running task; False (nothing stored) when
        this run (``token``, ``worker``) does not hold the task's lease any more."""
        return bool(self.call(*self.run_info_op(queue, task_id, token, worker, field, value)))

    def run_info_op(
        self, queue: str, task_id: str, token: int, worker: str, field: str, value: str
    ) -> Op:
        if field not in ("progress", "comment", "pid"):
            raise ValueError(f"unknown run info field {field!r}")
        return ("progress", [self.keys.tasks(queue)], [task_id, token, worker, field, value])

    def reap(self, queue: str, max_lost: int, limit: int = 100) -> Reaped:
        """Return expired leases to ready (or errors); say when the next lease expires."""
        k = self.keys
        keys = [
            k.tasks(queue),
            k.running(queue),
            k.errors(queue),
            *k.ready_all(queue),
            k.wake(queue),
            k.config(queue),
            k.hand(queue),
        ]
        flat, nxt, now = self.call("reap", keys, [int(max_lost), int(limit)])
        items = [(str(flat[i]), str(flat[i + 1]), str(flat[i + 2])) for i in range(0, len(flat), 3)]
        return Reaped(items, None if int(nxt) < 0 else int(nxt), int(now))

    def promote(self, queue: str, limit: int = 1000) -> Promoted:
        """Move due delayed tasks to ready; say when the next one is due (Redis clock, ms)."""
        k = self.keys
        keys = [k.tasks(queue), k.delayed(queue), *k.ready_all(queue), k.wake(queue)]
        moved, nxt, now = self.call("promote", keys, [int(limit)])
        return Promoted(int(moved), None if int(nxt) < 0 else int(nxt), int(now))

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
        if self.is_cluster and len(keys) > 1:
            return self._multi_wait(keys).wait(timeout)
        with self.guard():
            return self.client.blpop(keys, timeout=timeout) is not None

    def close(self) -> None:
        """Stop the Cluster wake watchers and close the client's connections."""
        with self._multi_lock:
            waits, self._multi_waits = list(self._multi_waits.values()), {}
        for w in waits:
            w.close()
        if self.client is not None:
            pool = getattr(self.client, "connection_pool", None)
            if pool is not None:
                HELD.drop(pool)
            self.client.close()

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
            made = self._multi_waits[key] = MultiWait(self.client, keys, me)
            return made

    def nudge(self, queues: Sequence[str]) -> None:
        """A wake-up token on each of ``queues``: executors blocked on them look at their
        flags now (a stopping worker's) instead of at the end of their wait; another
        worker's idle executor may wake for nothing, as for any token."""
        if not queues:
            return
        with self.guard():
            pipe = self.client.pipeline(transaction=False)
            for key in self.wait_keys(queues):
                pipe.lpush(key, "1")
            pipe.execute()

    def wait_keys(self, queues: Sequence[str], schedule: bool = False) -> list[str]:
        """The lists :meth:`wait` blocks on, one per queue."""
        name = self.keys.schedule if schedule else self.keys.wake
        return [name(q) for q in queues]

    # -- operator moves ----------------------------------------------------------------------
    def requeue(self, queue: str, state: str, ids: Sequence[str] = (), *, oldest: int = 0) -> int:
        """Move tasks from errors (``state='error'``) or delayed back to ready."""
        k = self.keys
        source = k.errors(queue) if state == "error" else k.delayed(queue)
        keys = [k.tasks(queue), source, *k.ready_all(queue), k.wake(queue)]
        mode = "oldest" if oldest else "ids"
        if mode == "ids" and not ids:
            return 0
        return int(self.call("requeue", keys, [state, mode, max(oldest, 1), *ids]))

    def remove(
        self,
        queue: str,
        ids: Sequence[str] = (),
        *,
        purge: str = "",
        limit: int = 1000,
        cancel: bool = False,
    ) -> tuple[int, int]:
        """Delete tasks by id (with ``cancel``: only those still queued or delayed), or purge
        a batch of 'ready', 'delayed' or 'errors'.

        Returns (records deleted, entries taken); a purge loops until taken is 0.
        """
        k = self.keys
        keys = [
            k.tasks(queue),
            *k.ready_all(queue),
            k.delayed(queue),
            k.errors(queue),
            k.done(queue),
            k.config(queue),
            k.overflow(queue),
            k.room(queue),
            k.wake(queue),
        ]
        if purge:
            if purge not in ("ready", "delayed", "errors"):
                raise ValueError(f"cannot purge {purge!r}")
            args: list[Any] = [purge, int(limit)]
        else:
            if not ids:
                return 0, 0
            args = ["cancel" if cancel else "ids", 0, *ids]
        deleted, taken = self.call("remove", keys, args)
        return int(deleted), int(taken)

    # -- waiting for results -----------------------------------------------------------------
    def history_tail(self, queue: str) -> str:
        """The id of the queue's newest history entry ('0-0' when there is none): where a
        waiter starts reading, taken before it looks at the record (no lost wake-up)."""
        with self.guard():
            return tail_id(self.client.xrevrange(self.keys.history(queue), "+", "-", count=1))

    def finished_lately(self, queue: str, task_id: str, look: int = 1000) -> str | None:
        """The status of ``task_id``'s latest run among the queue's last ``look`` finished
        runs ('done', 'failed', 'retry'), or None: for a task whose record is gone."""
        with self.guard():
            entries = self.client.xrevrange(self.keys.history(queue), "+", "-", count=look)
        return latest_status(entries, task_id)

    def wait_history(
        self, queue: str, after: str, timeout: float
    ) -> list[tuple[str, dict[str, str]]]:
        """Block until runs of ``queue`` finish after entry ``after`` (or ``timeout`` passes);
        returns those entries. Every ack and failure writes one, so waiting costs the
        workers nothing."""
        with self.guard():
            reply = self.client.xread(
                {self.keys.history(queue): after}, count=500, block=block_ms(timeout)
            )
        return read_entries(reply)

    # -- reading -----------------------------------------------------------------------------
    def record(self, queue: str, task_id: str) -> TaskRecord | None:
        with self.guard():
            raw = self.client.hget(self.keys.tasks(queue), task_id)
        return None if raw is None else TaskRecord.from_raw(queue, task_id, raw)

    def records(self, queue: str, ids: Sequence[str]) -> list[TaskRecord | None]:
        if not ids:
            return []
        with self.guard():
            raws = self.client.hmget(self.keys.tasks(queue), list(ids))
        return [
            None if raw is None else TaskRecord.from_raw(queue, i, raw)
            for i, raw in zip(ids, raws, strict=True)
        ]

    def locate(self, task_id: str, queues: Sequence[str] | None = None) -> str | None:
        """The queue (or shard) holding a record with this id: one round trip over
        ``queues``, by default every known queue."""
        queues = self.queues() if queues is None else list(queues)
        if not queues:
            return None
        with self.guard():
            pipe = self.client.pipeline(transaction=False)
            for q in queues:
                pipe.hexists(self.keys.tasks(q), task_id)
            found = pipe.execute()
        for q, hit in zip(queues, found, strict=True):
            if hit:
                return q
        return None


# -- replies of the history stream, shared with the asyncio twin (ztq.core.client.aio) -------------
def block_ms(timeout: float) -> int:
    """A blocking read's timeout in ms, kept below the client's socket timeout."""
    return int(min(max(timeout, 0.001), MAX_BLOCK) * 1000)


def tail_id(reply: Sequence[Any]) -> str:
    return str(reply[0][0]) if reply else "0-0"


def latest_status(entries: Sequence[Any], task_id: str) -> str | None:
    return next((str(f.get("status")) for _, f in entries if f.get("id") == task_id), None)


def read_entries(reply: Any) -> list[tuple[str, dict[str, str]]]:
    return [(str(i), dict(f)) for _, entries in reply or [] for i, f in entries]


def dumps(value: Any) -> str:
    """Compact JSON, the one encoding of everything ztq writes."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=False)
