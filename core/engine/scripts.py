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
from redis.exceptions import NoPermissionError, NoScriptError, ReadOnlyError, ResponseError
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
    "rate_leave",
    "login",
    "session",
    "token",
    "alerts",
    "broadcast",
    "broadcast_run",
    "listen",
    "channel",
    "trash",
    "restore",
    "redo",
    "batch",
)

Op = tuple[str, Sequence[str], Sequence[Any]]  # (script name, keys, args)

# Scripts whose call may be sent again after a connection error (enqueue: each task by id)
# and that go out as one prebuilt command (see Scripts._packed): a one-by-one enqueue spent
# ~18 µs of client CPU in redis-py's generic command path, as much as in the rest of it.
# On Redis >= 7 they run as functions of one library (FCALL): a script runs _lib.lua's
# definitions again on every call, a function finds them defined when its library loaded
# (a one-by-one enqueue: about a quarter less time in Redis, measured here).
#
# The worker's hot scripts go the same way since their calls became safe to send again (a
# fetch carries a request id, an end is kept as `settled`: docs/design.md, "Lost
# replies"). They take a connection of the pool for the call, as redis-py's path does: a
# held connection per worker thread would add one connection per thread to Redis's count
# (HELD is for producers' threads, where the pool's checkout cost a fifth of an enqueue).
PACKED = frozenset({"enqueue", "fetch", "ack", "fail", "renew"})
HELD_SCRIPTS = frozenset({"enqueue"})
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


def _frame(args: Sequence[Any]) -> bytes:
    """The arguments as RESP bulk strings: each str as is, each int in decimal (anything
    else: :class:`_Unpackable`). They are framed as one str, encoded once when all ASCII
    (ids, JSON payloads as ztq writes them: a batch of 500 tasks frames 3,500 arguments,
    and this halves its cost); else each is encoded, as a bulk string's length counts
    bytes."""
    for value in args:
        if type(value) is not str and type(value) is not int:
            raise _Unpackable
    text = "".join([f"${len(v)}\r\n{v}\r\n" if type(v) is str else
                    f"${len(d := str(v))}\r\n{d}\r\n" for v in args])  # fmt: skip
    if text.isascii():
        return text.encode("ascii")
    return b"".join(_bulk(v) for v in args)


def _read(name: str) -> str:
    return resources.files("ztq.core.engine").joinpath("scripts", f"{name}.lua").read_text("utf-8")


class KeyList(list[str]):
    """A script's KEYS built once and kept (one per queue and script: ``TaskMoves._key_list``):
    the packed path frames it once. Any other key list is framed at each call, so that the
    cache stays as small as the number of queues (a list built per call, cached by its id,
    grew it by one entry per call)."""


class Scripts:
    """The script sources and SHAs; shared by every client of a process."""

    def __init__(self) -> None:
        lib = _read("_lib")
        self.source = {name: lib + "\n" + _read(name) for name in NAMES}
        self._loaded: set[int] = set()  # clients known to have the scripts (until NOSCRIPT)
        self.sha = {
            name: hashlib.sha1(src.encode("utf-8")).hexdigest() for name, src in self.source.items()
        }
        # The packed scripts as one function library. Its name carries a hash of its source,
        # so that processes running different versions of ztq on one Redis each find their
        # own functions (a library stays in Redis, which persists and replicates it).
        tag = hashlib.sha1("".join(self.source[n] for n in sorted(PACKED)).encode()).hexdigest()
        self.library_name = f"ztq_{tag[:16]}"
        self.function = {name: f"{self.library_name}_{name}" for name in sorted(PACKED)}
        self.library = f"#!lua name={self.library_name}\n{lib}\n" + "".join(
            f"local function {name}_main(KEYS, ARGV)\n{_read(name)}\nend\n"
            f"redis.register_function('{function}', {name}_main)\n"
            for name, function in self.function.items()
        )
        # per pool: False once its server refused functions (Redis < 7, an ACL): EVALSHA then
        self._functions: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
        # (command, script, keys list) -> (that list, 'FCALL function numkeys keys...' or
        # 'EVALSHA sha numkeys keys...' as RESP); the hot paths pass one key list per queue
        # (Storage._key_list)
        self._prefix: dict[tuple[str, str, int], tuple[Sequence[str], bytes]] = {}

    def load_all(self, client: Any) -> None:
        for src in self.source.values():
            client.script_load(src)
        self._loaded.add(id(client))

    def call(self, client: Any, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run one script on ``client`` (a Redis or RedisCluster)."""
        if name in PACKED and _plain(client):
            try:
                return self._packed(client, name, keys, args)
            except (RedisConnectionError, RedisTimeoutError):
                if not _retries(client):
                    raise
            except (NoScriptError, _Unpackable):
                pass  # the general path below loads the scripts, or retries as redis-py does
        try:
            return client.evalsha(self.sha[name], len(keys), *keys, *args)
        except NoScriptError:
            self.load_all(client)
            return client.evalsha(self.sha[name], len(keys), *keys, *args)

    def _pack(self, name: str, keys: Sequence[str], args: Sequence[Any], fcall: bool) -> bytes:
        """``FCALL`` (or ``EVALSHA``) as one RESP command: the function, its keys and their
        framing built once per key list, the arguments here (see :func:`_frame`)."""
        command = "FCALL" if fcall else "EVALSHA"
        cached = self._prefix.get((command, name, id(keys)))
        if cached is None or cached[0] is not keys:
            target = self.function[name] if fcall else self.sha[name]
            head = _bulk(command) + _bulk(target) + _bulk(len(keys))
            cached = (keys, head + b"".join(_bulk(k) for k in keys))
            if isinstance(keys, KeyList):  # a list built per call is framed per call
                self._prefix[(command, name, id(keys))] = cached
        return b"*%d\r\n" % (3 + len(keys) + len(args)) + cached[1] + _frame(args)

    def _packed(self, client: Any, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """One script call sent packed on a connection of the pool; the reply is read as
        redis-py reads it."""
        return self._packed_many(client, [(name, keys, args)])[0]

    def _packed_many(self, client: Any, ops: Sequence[Op], raise_errors: bool = True) -> list[Any]:
        """Scripts sent packed, each as soon as it is built (Redis runs the first while the
        next is framed), then every reply read; a script's error is raised after all are
        read, as a pipeline does, and NOSCRIPT before any other (``raise_errors=False``: a
        script's error is its own reply, see :meth:`call_each`).

        They go as functions (FCALL) until the server refuses those. The calls that found
        no function (a new Redis, ``FUNCTION FLUSH``, another version's library only) did
        not run: the library is loaded and they are sent again."""
        pool = client.connection_pool
        held = all(op[0] in HELD_SCRIPTS for op in ops)
        conn = HELD.connection(pool) if held else pool.get_connection()
        try:
            fcall = self._functions.get(pool, True)
            replies = self._send(conn, ops, fcall)
            missing = [i for i, reply in enumerate(replies) if fcall and _no_function(reply)]
            if missing:
                if not self._load_library(conn):
                    self._functions[pool] = fcall = False
                again = self._send(conn, [ops[i] for i in missing], fcall)
                for i, reply in zip(missing, again, strict=True):
                    replies[i] = reply
            errors = [r for r in replies if isinstance(r, ResponseError)]
            if errors:
                if any(isinstance(e, ReadOnlyError) for e in errors):
                    conn.disconnect()  # a demoted master: the next call connects afresh
                if raise_errors:
                    first = next((e for e in errors if _missing_script(e)), errors[0])
                    if len(ops) > 1:  # as a pipeline's: fault_kinds.applied_before reads it
                        at = next(i for i, r in enumerate(replies) if r is first)
                        first.args = (f"Command # {at + 1} ({ops[at][0]}) of pipeline caused "
                                      f"error: {first.args[0] if first.args else ''}",
                                      *first.args[1:])  # fmt: skip
                    raise first
            return replies
        finally:
            if not held:
                pool.release(conn)

    def _send(self, conn: Any, ops: Sequence[Op], fcall: bool) -> list[Any]:
        """Send ``ops`` on ``conn`` and read every reply (a script's error as a reply)."""
        try:
            conn.connect()  # at once if connected; a Sentinel's asks for the master first
            for name, keys, args in ops:
                conn.send_packed_command([self._pack(name, keys, args, fcall)])
            replies: list[Any] = []
            for _ in ops:
                try:
                    replies.append(conn.read_response())
                except ResponseError as exc:
                    replies.append(exc)
        except BaseException:
            conn.disconnect()  # a command may be half sent, replies unread
            raise
        return replies

    def _load_library(self, conn: Any) -> bool:
        """Load the function library on ``conn``'s server; False if it refuses (no
        functions before Redis 7, or an ACL that denies them: EVALSHA then)."""
        try:
            conn.connect()
            conn.send_command("FUNCTION", "LOAD", "REPLACE", self.library)
            conn.read_response()
        except ResponseError:
            return False
        except BaseException:
            conn.disconnect()
            raise
        return True

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
            except (RedisConnectionError, RedisTimeoutError):
                if not _retries(client):
                    raise
            except _Unpackable:
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

    def call_each(self, client: Any, ops: Sequence[Op]) -> list[Any]:
        """:meth:`call_many` where a script's error is that script's reply (the exception
        object), not raised: the others' replies stand (a coalesced batch of enqueues, each
        of another caller). NOSCRIPT is handled here; a connection error is raised."""
        if not ops:
            return []
        if id(client) not in self._loaded:
            self.load_all(client)
        if _plain(client) and all(op[0] in PACKED for op in ops):
            try:
                replies = self._packed_many(client, ops, raise_errors=False)
                missing = [i for i, r in enumerate(replies) if isinstance(r, ResponseError)
                           and _missing_script(r)]  # fmt: skip
                if missing:  # EVALSHA mode, a flushed script cache: those did not run
                    self.load_all(client)
                    again = self._packed_many(client, [ops[i] for i in missing],
                                              raise_errors=False)  # fmt: skip
                    for i, reply in zip(missing, again, strict=True):
                        replies[i] = reply
                return replies
            except (RedisConnectionError, RedisTimeoutError):
                if not _retries(client):
                    raise
            except _Unpackable:
                pass  # the pipeline below (all of them again), as redis-py would retry
        replies = list(self._pipeline(client, ops, None).execute(raise_on_error=False))
        missing = [i for i, r in enumerate(replies) if isinstance(r, ResponseError)
                   and _missing_script(r)]  # fmt: skip
        if missing:  # those did not run: load the scripts, send them again
            self.load_all(client)
            again = self._pipeline(client, [ops[i] for i in missing], None)
            for i, reply in zip(missing, again.execute(raise_on_error=False), strict=True):
                replies[i] = reply
        return replies

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


def _retries(client: Any) -> bool:
    """The client retries a command after a connection error: a packed call that met one
    is sent again by redis-py's path (which retries further), as redis-py would; a client
    made not to retry sees the error."""
    retry = client.get_retry()
    return retry is None or retry.get_retries() > 0


def _plain(client: Any) -> bool:
    """A ``redis.Redis`` on a pool of plain RESP connections, no single shared connection."""
    pool = getattr(client, "connection_pool", None)
    return (
        isinstance(client, redis.Redis)
        and client.connection is None
        and pool is not None
        and pool.connection_class in _CONNECTIONS
    )


def _no_function(reply: Any) -> bool:
    """FCALL did not run: the function is not loaded, or the server has no functions
    (Redis < 7: unknown command) or denies them (an ACL: NOPERM)."""
    if not isinstance(reply, ResponseError):
        return False
    text = str(reply)
    return (
        text.startswith("Function not found")
        or "unknown command" in text
        or isinstance(reply, NoPermissionError)
    )


def _missing_script(exc: ResponseError) -> bool:
    """Redis lost its script cache (restart, SCRIPT FLUSH, a promoted replica)."""
    return isinstance(exc, NoScriptError) or "NOSCRIPT" in str(exc)


SCRIPTS = Scripts()
