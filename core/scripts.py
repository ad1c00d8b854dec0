"""Loads the Lua scripts once per process and runs them by SHA, reloading after NOSCRIPT.

redis-py's ``Script`` objects make every pipeline ask ``SCRIPT EXISTS`` first, which costs a
round trip on the hot path (ack + fetch travel in one pipeline). Here a pipeline is sent as
is; if Redis lost its script cache (restart, ``SCRIPT FLUSH``) the whole batch fails with
NOSCRIPT before any script ran, so the scripts are loaded and the batch is sent again.
"""

from __future__ import annotations

import hashlib
import os
import threading
import weakref
from collections.abc import Sequence
from importlib import resources
from typing import Any

import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ReadOnlyError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

NAMES = (
    "enqueue",
    "fetch",
    "ack",
    "fail",
    "renew",
    "progress",
    "reap",
    "promote",
    "requeue",
    "remove",
    "heartbeat",
    "forget",
    "command",
    "release",
    "pause",
    "configure",
    "login",
    "session",
    "token",
    "alerts",
    "broadcast",
    "broadcast_run",
    "listen",
    "channel",
)

Op = tuple[str, Sequence[str], Sequence[Any]]  # (script name, keys, args)

# Scripts whose call may be sent again after a connection error (enqueue: each task by id)
# and that go out as one prebuilt command (see Scripts._packed): a one-by-one enqueue spent
# ~18 µs of client CPU in redis-py's generic command path, as much as in the rest of it.
PACKED = frozenset({"enqueue"})
_CONNECTIONS = (  # connection classes that speak RESP on their own socket (not fakeredis)
    redis.Connection,
    redis.SSLConnection,
    redis.UnixDomainSocketConnection,
    redis.sentinel.SentinelManagedConnection,
    redis.sentinel.SentinelManagedSSLConnection,
)


def _bulk(value: Any) -> bytes:
    """One RESP bulk string (str as UTF-8, int as its digits)."""
    data = value.encode("utf-8") if type(value) is str else str(value).encode()
    return b"$%d\r\n%s\r\n" % (len(data), data)


def _read(name: str) -> str:
    return resources.files("ztq.core").joinpath("scripts", f"{name}.lua").read_text("utf-8")


class Scripts:
    """The script sources and SHAs; shared by every client of a process."""

    def __init__(self) -> None:
        lib = _read("_lib")
        self.source = {name: lib + "\n" + _read(name) for name in NAMES}
        self._loaded: set[int] = set()  # clients known to have the scripts (until NOSCRIPT)
        self.sha = {
            name: hashlib.sha1(src.encode("utf-8")).hexdigest() for name, src in self.source.items()
        }
        # (script, keys list) -> (that list, 'EVALSHA sha numkeys keys...' as RESP); the hot
        # paths pass one key list per queue (Storage._key_list)
        self._prefix: dict[tuple[str, int], tuple[Sequence[str], bytes]] = {}

    def load_all(self, client: Any) -> None:
        for src in self.source.values():
            client.script_load(src)
        self._loaded.add(id(client))

    def call(self, client: Any, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run one script on ``client`` (a Redis or RedisCluster)."""
        if name in PACKED and _plain(client):
            try:
                return self._packed(client, name, keys, args)
            except (NoScriptError, RedisConnectionError, RedisTimeoutError, _Unpackable):
                pass  # the general path below loads the scripts, or retries as redis-py does
        try:
            return client.evalsha(self.sha[name], len(keys), *keys, *args)
        except NoScriptError:
            self.load_all(client)
            return client.evalsha(self.sha[name], len(keys), *keys, *args)

    def _pack(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> bytes:
        """``EVALSHA`` as one RESP command: the script, its keys and their framing built
        once per key list, the arguments (str or int, else :class:`_Unpackable`) here."""
        cached = self._prefix.get((name, id(keys)))
        if cached is None or cached[0] is not keys:
            head = _bulk("EVALSHA") + _bulk(self.sha[name]) + _bulk(len(keys))
            cached = (keys, head + b"".join(_bulk(k) for k in keys))
            self._prefix[(name, id(keys))] = cached
        parts = [b"*%d\r\n" % (3 + len(keys) + len(args)), cached[1]]
        add = parts.append
        for value in args:  # _bulk, inlined: a batch of 500 tasks frames 3,500 of them
            kind = type(value)
            if kind is str:
                data = value.encode("utf-8")
            elif kind is int:
                data = b"%d" % value
            else:
                raise _Unpackable
            add(b"$%d\r\n%s\r\n" % (len(data), data))
        return b"".join(parts)

    def _packed(self, client: Any, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """One script call sent packed on a connection of the pool; the reply is read as
        redis-py reads it."""
        return self._packed_many(client, [(name, keys, args)])[0]

    def _packed_many(self, client: Any, ops: Sequence[Op]) -> list[Any]:
        """Scripts sent packed, each as soon as it is built (Redis runs the first while the
        next is framed), then every reply read; a script's error is raised after all are
        read, as a pipeline does, and NOSCRIPT before any other."""
        conn = HELD.connection(client.connection_pool)
        try:
            for name, keys, args in ops:
                conn.send_packed_command([self._pack(name, keys, args)])
            replies: list[Any] = []
            for _ in ops:
                try:
                    replies.append(conn.read_response())
                except ResponseError as exc:
                    replies.append(exc)
        except BaseException:
            conn.disconnect()  # a command may be half sent, replies unread
            raise
        errors = [r for r in replies if isinstance(r, ResponseError)]
        if errors:
            if any(isinstance(e, ReadOnlyError) for e in errors):
                conn.disconnect()  # a demoted master: the next call connects afresh
            raise next((e for e in errors if _missing_script(e)), errors[0])
        return replies

    def call_many(
        self, client: Any, ops: Sequence[Op], *, wait: tuple[int, int] | None = None
    ) -> list[Any]:
        """Run several scripts in one round trip (a pipeline without MULTI).

        ``wait=(replicas, timeout_ms)`` ends the pipeline with ``WAIT``, on the connection
        that sent the scripts (WAIT counts that connection's writes), and appends its reply:
        how many replicas have them. Not for a Cluster client (see Storage.execute).
        """
        if not ops:
            return []
        if id(client) not in self._loaded:  # a first big batch would fail whole on NOSCRIPT
            self.load_all(client)
        if wait is None and _plain(client) and all(op[0] in PACKED for op in ops):
            try:
                return self._packed_many(client, ops)
            except (RedisConnectionError, RedisTimeoutError, _Unpackable):
                pass  # the pipeline below, as redis-py would retry
            except ResponseError as exc:
                if not _missing_script(exc):
                    raise
                self.load_all(client)
        for attempt in (1, 2):
            pipe = self._pipeline(client, ops, wait)
            try:
                return list(pipe.execute())
            except ResponseError as exc:  # NoScriptError is one
                if attempt == 2 or not _missing_script(exc):
                    raise
                self.load_all(client)
        raise AssertionError("unreachable")

    def _pipeline(self, client: Any, ops: Sequence[Op], wait: tuple[int, int] | None) -> Any:
        """A pipeline (no MULTI) of the scripts of ``ops``, then ``WAIT`` if asked."""
        pipe = client.pipeline(transaction=False)
        for name, keys, args in ops:
            pipe.execute_command("EVALSHA", self.sha[name], len(keys), *keys, *args)
        if wait is not None:
            pipe.execute_command("WAIT", *wait)
        return pipe

    async def acall_many(
        self, client: Any, ops: Sequence[Op], *, wait: tuple[int, int] | None = None
    ) -> list[Any]:
        """:meth:`call_many` on a ``redis.asyncio`` client (the async worker pool's path)."""
        if not ops:
            return []
        for attempt in (1, 2):
            pipe = self._pipeline(client, ops, wait)
            try:
                return list(await pipe.execute())
            except ResponseError as exc:
                if attempt == 2 or not _missing_script(exc):
                    raise
                for src in self.source.values():
                    await client.script_load(src)
        raise AssertionError("unreachable")


class _Unpackable(Exception):
    """An argument the packed path does not frame (redis-py's own path does)."""


class HeldConnections:
    """One connection of each pool per thread, held for the thread's life: the packed path's.

    Taking a connection from a redis-py pool and giving it back costs more client time than
    framing an enqueue (the pool's lock, fork checks, metrics, and a poll of the socket to
    make sure nothing is left to read): measured here, that was a fifth of a one-by-one
    enqueue. A held connection needs none of it: only its own thread uses it, and a call on
    it that did not read every reply (an error, an interrupt) drops it, so it never holds a
    stale reply. A thread's connections close when the thread ends or its pool is collected,
    all of a pool's on :meth:`drop` (``Storage.close``); a forked child starts with none.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._local = threading.local()
        # every thread's held connections, by pool (for drop); weak: a thread's go with it
        self._all: weakref.WeakKeyDictionary[Any, weakref.WeakSet[Any]] = (
            weakref.WeakKeyDictionary()
        )

    def connection(self, pool: Any) -> Any:
        """The calling thread's connection of ``pool`` (connected on its first command)."""
        mine = getattr(self._local, "conns", None)
        if mine is None:
            mine = self._local.conns = weakref.WeakKeyDictionary()
        conn = mine.get(pool)
        if conn is None:
            conn = mine[pool] = pool.connection_class(**pool.connection_kwargs)
            with self._lock:
                self._all.setdefault(pool, weakref.WeakSet()).add(conn)
        return conn

    def drop(self, pool: Any) -> None:
        """Close every thread's held connection of ``pool`` (a thread using one reconnects)."""
        with self._lock:
            conns = list(self._all.get(pool, ()))
        for conn in conns:
            conn.disconnect()


HELD = HeldConnections()


def _plain(client: Any) -> bool:
    """A ``redis.Redis`` on a pool of plain RESP connections, no single shared connection."""
    pool = getattr(client, "connection_pool", None)
    return (
        isinstance(client, redis.Redis)
        and client.connection is None
        and pool is not None
        and pool.connection_class in _CONNECTIONS
    )


def _missing_script(exc: ResponseError) -> bool:
    """Redis lost its script cache (restart, SCRIPT FLUSH, a promoted replica)."""
    return isinstance(exc, NoScriptError) or "NOSCRIPT" in str(exc)


SCRIPTS = Scripts()
