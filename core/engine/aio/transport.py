"""The asyncio transport: ``redis.asyncio`` clients and :class:`AsyncStorage`, the async
twin of :class:`~ztq.core.engine.storage.Storage` for what producers and async worker pools
do (enqueue, ping, wait for results and for room).

Same Lua scripts, same key lists (built by a client-less ``Storage``, the one place keys are
made), same error mapping as the blocking transport, so a FastAPI or aiohttp handler never
blocks its event loop. Which app, name and loop a connection serves is decided by
``ztq.core.client.aio``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ReadOnlyError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ztq.core.engine.aio.scripts import acall_many
from ztq.core.engine.connection import SENTINEL_SCHEME, parse_sentinel_url, sentinel_options
from ztq.core.engine.fault_kinds import unreachable
from ztq.core.engine.keys import shard_names
from ztq.core.engine.queue_limits import QueueLimits
from ztq.core.engine.record import TaskRecord
from ztq.core.engine.scripts import (
    PACKED,
    SCRIPTS,
    Op,
    missing_script,
    no_function,
)
from ztq.core.engine.storage import (
    MAX_BLOCK,
    Storage,
    block_ms,
    latest_status,
    read_entries,
    safe_url,
    tail_id,
)
from ztq.core.engine.wire.framing import Unpackable
from ztq.core.engine.wire.memory import SCHEME as MEMORY_SCHEME
from ztq.core.engine.wire.memory import memory_async_client
from ztq.core.errors import ConfigError, ConnectionFailed
from ztq.core.settings.table import REQUEST_WINDOW


def _plain_connections() -> tuple[type, ...]:
    from redis.asyncio import connection as c

    return (c.Connection, c.SSLConnection, c.UnixDomainSocketConnection)


_PLAIN = _plain_connections()  # connection classes that speak RESP on their own socket


def _is_cluster(client: Any) -> bool:
    from redis.asyncio.cluster import RedisCluster

    return isinstance(client, RedisCluster)


def make_async_client(url: str, *, cluster: bool = False) -> Any:
    """A ``redis.asyncio`` client for ``url`` (``redis+cluster://``, or ``cluster=True``,
    for a Cluster; ``redis+sentinel://`` for the master a Sentinel names, as
    :func:`ztq.core.engine.connection.make_client`)."""
    import redis.asyncio as aioredis
    from redis.asyncio.cluster import RedisCluster
    from redis.asyncio.retry import Retry as AsyncRetry
    from redis.asyncio.sentinel import Sentinel
    from redis.backoff import NoBackoff

    if url.startswith(MEMORY_SCHEME):
        return memory_async_client(url)
    common: dict[str, Any] = {"decode_responses": True, "socket_connect_timeout": 2.0,
                              "socket_timeout": MAX_BLOCK + 2}  # fmt: skip
    if url.startswith(SENTINEL_SCHEME):
        spec = parse_sentinel_url(url)
        to_sentinels, to_master = sentinel_options(spec, common, AsyncRetry(NoBackoff(), 0))
        return Sentinel(spec.sentinels, sentinel_kwargs=to_sentinels).master_for(
            spec.service, **to_master
        )
    try:
        if url.startswith("redis+cluster://"):
            return RedisCluster.from_url("redis://" + url[len("redis+cluster://") :], **common)
        if cluster:
            return RedisCluster.from_url(url, **common)
        return aioredis.Redis.from_url(url, **common)
    except ValueError as exc:
        raise ConfigError(f"Redis URL {url!r} is not valid: {exc}") from exc


class AsyncStorage:
    """The async twin of :class:`Storage` for what producers do: the same scripts, the same
    key lists (built by a client-less :class:`Storage`, the one place keys are made) and the
    same shape: the transport (``call``, ``execute``, ...) and, as parts named as the sync
    ones, the calls a coroutine makes (``tasks.record``, ``queues.register_queue``,
    ``waits.wait_history``, ...)."""

    def __init__(
        self, client: Any, *, prefix: str, url: str, request_window: float = REQUEST_WINDOW
    ) -> None:
        self.client = client
        self.url = url
        # builds keys and script args only
        self.ops = Storage(None, prefix=prefix, url=url, request_window=request_window)
        self.ops.is_cluster = _is_cluster(client)
        self.keys = self.ops.keys
        self.tasks = AsyncTasks(self)
        self.leases = AsyncLeases(self)
        self.queues = AsyncQueues(self)
        self.waits = AsyncWaits(self)
        self.coalescer: Any = None  # ztq.core.client.coalesce.AsyncCoalescer, on first use
        self._fcall = True  # until the server refuses functions (see execute_each)

    async def _guarded(self, coro: Any) -> Any:
        """:meth:`Storage.guard` for coroutines: unreachable, or a replica now (READONLY,
        UNBLOCKED after a failover), is :class:`ConnectionFailed`, retried by callers."""
        try:
            return await coro
        except ResponseError as exc:
            if not (isinstance(exc, ReadOnlyError) or str(exc).startswith("UNBLOCKED")):
                raise
            with contextlib.suppress(Exception):  # the next try connects afresh
                await self.client.connection_pool.disconnect(inuse_connections=False)
            raise ConnectionFailed(
                f"Redis at {safe_url(self.url)} is a replica now (a failover?): {exc}"
            ) from exc
        except (RedisConnectionError, RedisTimeoutError) as exc:
            raise ConnectionFailed(unreachable(self.url, exc)) from exc

    async def call(self, name: str, keys: Any, args: Any) -> Any:
        sha = SCRIPTS.sha[name]
        try:
            return await self._guarded(self.client.evalsha(sha, len(keys), *keys, *args))
        except NoScriptError:
            await self._guarded(self.client.script_load(SCRIPTS.source[name]))
            return await self._guarded(self.client.evalsha(sha, len(keys), *keys, *args))

    async def execute(self, ops: Sequence[Op]) -> list[Any]:
        """Several scripts in one round trip (the ops built by ``self.ops``, as for
        :meth:`Storage.execute`)."""
        return await self._guarded(acall_many(self.client, ops))

    async def execute_each(self, ops: Sequence[Op]) -> list[Any]:
        """:meth:`Storage.execute_each` from a coroutine: one round trip, each script's
        error kept as its own reply; NOSCRIPT loads the scripts and sends those again.

        Enqueues on a plain client go as prebuilt commands, functions (FCALL) where the
        server has them, as the blocking side sends them (``scripts.PACKED``): redis-py's
        generic packing of 18 keys per call cost more client time than the rest of it."""
        if self._packable(ops):
            packed = await self._guarded(self._packed_or_none(ops))
            if packed is not None:
                return packed
        replies = list(
            await self._guarded(
                SCRIPTS.pipeline(self.client, ops, None).execute(raise_on_error=False)
            )
        )
        missing = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
        if missing:
            for src in SCRIPTS.source.values():
                await self._guarded(self.client.script_load(src))
            again = SCRIPTS.pipeline(self.client, [ops[i] for i in missing], None)
            got = await self._guarded(again.execute(raise_on_error=False))
            for i, reply in zip(missing, got, strict=True):
                replies[i] = reply
        return replies

    def _packable(self, ops: Sequence[Op]) -> bool:
        pool = getattr(self.client, "connection_pool", None)
        return (
            not self.ops.is_cluster
            and pool is not None
            and pool.connection_class in _PLAIN
            and all(op[0] in PACKED for op in ops)
        )

    async def _packed_or_none(self, ops: Sequence[Op]) -> list[Any] | None:
        """:meth:`_packed_each`, or None where the pipeline is to send them: an argument
        only redis-py frames, or a connection error (redis-py retries the pipeline, as on
        the blocking side: ``Scripts.call_each``; enqueues are safe to send again)."""
        try:
            return await self._packed_each(ops)
        except (RedisConnectionError, RedisTimeoutError, Unpackable):
            return None

    async def _packed_each(self, ops: Sequence[Op]) -> list[Any]:
        """Each op sent packed, FCALL until the server refuses functions, then EVALSHA.
        The calls that did not run (no function: it is loaded, or refused, then the scripts
        are loaded for EVALSHA; NOSCRIPT: the scripts are loaded) are sent again, and
        checked again: at most two rounds."""
        fcall = self._fcall
        replies = await self._send([SCRIPTS.packed.pack(*op, fcall) for op in ops])
        for _ in range(2):
            missing = [i for i, r in enumerate(replies) if _did_not_run(r, fcall)]
            if not missing:
                break
            if not fcall or not await self._load_library():
                self._fcall = fcall = False  # Redis < 7, or an ACL: EVALSHA from now on
                for name in sorted({ops[i][0] for i in missing}):
                    await self.client.script_load(SCRIPTS.source[name])
            again = await self._send([SCRIPTS.packed.pack(*ops[i], fcall) for i in missing])
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        return replies

    async def _send(self, frames: list[bytes]) -> list[Any]:
        """Send prebuilt commands on one connection of the pool and read every reply (an
        error reply as its exception); a connection left mid-way is dropped, and so is one
        to a demoted master (READONLY: the next call connects afresh, to the new master)."""
        pool = self.client.connection_pool
        conn = await pool.get_connection()
        try:
            await conn.send_packed_command(frames)
            replies: list[Any] = []
            for _ in frames:
                try:
                    replies.append(await conn.read_response())
                except ResponseError as exc:
                    replies.append(exc)
            if any(_demoted(r) for r in replies):
                await conn.disconnect()
        except BaseException:
            await conn.disconnect()
            raise
        finally:
            await pool.release(conn)
        return replies

    async def _load_library(self) -> bool:
        try:
            await self.client.function_load(SCRIPTS.library, replace=True)
        except ResponseError:
            return False
        return True

    async def execute_replicated(
        self, ops: Sequence[Op], replicas: int, timeout_ms: int
    ) -> tuple[list[Any], int]:
        """:meth:`Storage.execute_replicated` from a coroutine (not on a Cluster: the
        asyncio cluster client cannot pin a WAIT to the connection that wrote)."""
        if self.ops.is_cluster:
            raise ConfigError(
                "replicas= from asyncio on a Redis Cluster is not supported: enqueue with "
                "delay()/enqueue() (they wait per master), or without replicas"
            )
        *replies, confirmed = await self._guarded(
            acall_many(self.client, ops, wait=(replicas, timeout_ms))
        )
        return replies, int(confirmed)

    async def close(self) -> None:
        await self.client.aclose()


class AsyncTasks:
    """:class:`~ztq.core.engine.parts.tasks.Tasks` from a coroutine: the records."""

    def __init__(self, storage: AsyncStorage) -> None:
        self.storage = storage
        self.keys = storage.keys

    async def record(self, queue: str, task_id: str) -> TaskRecord | None:
        raw = await self.storage._guarded(self.storage.client.hget(self.keys.tasks(queue), task_id))
        return None if raw is None else TaskRecord.from_raw(queue, task_id, raw)

    async def locate(self, task_id: str) -> str | None:
        for queue in sorted(
            await self.storage._guarded(self.storage.client.smembers(self.keys.queues))
        ):
            if await self.storage._guarded(
                self.storage.client.hexists(self.keys.tasks(queue), task_id)
            ):
                return str(queue)
        return None


class AsyncLeases:
    """:class:`~ztq.core.engine.parts.leases.Leases` from a coroutine: a run's progress."""

    def __init__(self, storage: AsyncStorage) -> None:
        self.storage = storage
        self.keys = storage.keys

    async def set_run_info(
        self, queue: str, task_id: str, token: int, worker: str, field: str, value: str
    ) -> bool:
        """:meth:`Leases.set_run_info` from a coroutine."""
        return bool(
            await self.storage.call(
                *self.storage.ops.leases.run_info_op(queue, task_id, token, worker, field, value)
            )
        )


class AsyncQueues:
    """:class:`~ztq.core.engine.parts.queues.Queues` from a coroutine: registration, limits."""

    def __init__(self, storage: AsyncStorage) -> None:
        self.storage = storage
        self.keys = storage.keys
        self._known: set[str] = set()  # the queues this process registered

    async def register_queue(self, queue: str, shards: int = 1) -> None:
        """Record the queue (all its shards when it has more than one) in the global set."""
        names = [n for n in shard_names(queue, shards) if n not in self._known]
        if names:
            await self.storage._guarded(self.storage.client.sadd(self.keys.queues, *names))
            self._known.update(names)

    async def queue_limits(self, queue: str) -> QueueLimits:
        return QueueLimits.from_hash(
            await self.storage._guarded(self.storage.client.hgetall(self.keys.config(queue)))
        )


class AsyncWaits:
    """:class:`~ztq.core.engine.parts.waits.Waits` from a coroutine, blocking only it."""

    def __init__(self, storage: AsyncStorage) -> None:
        self.storage = storage
        self.keys = storage.keys

    async def wait(self, queues: Sequence[str], timeout: float) -> bool:
        """:meth:`Waits.wait` for ready tasks, blocking only the awaiting coroutine."""
        keys = self.storage.ops.waits.wait_keys(queues)
        keys = keys[:1] if self.storage.ops.is_cluster else keys  # an async pool serves one queue
        timeout = min(max(timeout, 0.001), MAX_BLOCK)
        return (
            await self.storage._guarded(self.storage.client.blpop(keys, timeout=timeout))
            is not None
        )

    async def wait_room(self, queue: str, timeout: float) -> None:
        """:meth:`Waits.wait_room`: until a fetch makes room in a full queue, or timeout."""
        timeout = min(max(timeout, 0.01), MAX_BLOCK)
        await self.storage._guarded(
            self.storage.client.blpop([self.keys.room(queue)], timeout=timeout)
        )

    async def history_tail(self, queue: str) -> str:
        key = self.keys.history(queue)
        return tail_id(
            await self.storage._guarded(self.storage.client.xrevrange(key, "+", "-", count=1))
        )

    async def wait_history(self, queue: str, after: str, timeout: float) -> list[Any]:
        key = self.keys.history(queue)
        read = self.storage.client.xread({key: after}, count=500, block=block_ms(timeout))
        return read_entries(await self.storage._guarded(read))

    async def finished_lately(self, queue: str, task_id: str, look: int = 1000) -> str | None:
        key = self.keys.history(queue)
        entries = await self.storage._guarded(
            self.storage.client.xrevrange(key, "+", "-", count=look)
        )
        return latest_status(entries, task_id)


def _did_not_run(reply: Any, fcall: bool) -> bool:
    """The packed call did not run: no function (FCALL), or no script (EVALSHA)."""
    if fcall:
        return no_function(reply)
    return isinstance(reply, ResponseError) and missing_script(reply)


def _demoted(reply: Any) -> bool:
    """A reply of a master demoted to a replica (a failover): READONLY, UNBLOCKED."""
    return isinstance(reply, ReadOnlyError) or (
        isinstance(reply, ResponseError) and str(reply).startswith("UNBLOCKED")
    )
