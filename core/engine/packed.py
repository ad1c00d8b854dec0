"""The packed path of script calls: each call as one prebuilt RESP command (``FCALL`` of the
function library, or ``EVALSHA`` where functions are refused) sent on a connection of the
client's pool, its reply read as redis-py reads it; with the reloads it needs (the library
after ``FUNCTION FLUSH`` or on a new server) and the allow-oom twins of a full Redis.

Separate from :mod:`ztq.core.engine.scripts` (which scripts exist, their sources and SHAs,
and which path a call takes: this one, or redis-py's pipeline) because this is the hot
path's wire: a one-by-one enqueue spent ~18 µs of client CPU in redis-py's generic command
path, as much as in the rest of it; the framing itself is ``wire.framing``.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Any, cast

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoPermissionError, NoScriptError, ReadOnlyError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ztq.core.engine.fault_kinds import FULL, refused_for_memory, took
from ztq.core.engine.wire.framing import (
    HELD,
    KeyList,
    Op,
    TailedKeys,
    Unpackable,
    bulk,
    frame,
    retries,
)

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


class PackedCalls:
    """Script calls as prebuilt commands; shared by every client of a process (per pool:
    whether its server takes functions; per kept key list: its framed prefix)."""

    def __init__(
        self,
        sha: Mapping[str, str],
        function: Mapping[str, str],
        oom_source: Mapping[str, str],
        library: str,
    ) -> None:
        self.sha, self.function, self.oom_source, self.library = sha, function, oom_source, library
        # per pool: False once its server refused functions (Redis < 7, an ACL): EVALSHA then
        self._functions: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
        # (command, script, keys list, numkeys) -> (that list, 'FCALL function numkeys
        # keys...' or 'EVALSHA sha numkeys keys...' as RESP); the hot paths pass one key list
        # per queue (Tasks._enqueue_keys), an enqueue followed by its request key (TailedKeys)
        self._prefix: dict[tuple[str, str, int, int], tuple[Sequence[str], bytes]] = {}

    def pack(self, name: str, keys: Sequence[str], args: Sequence[Any], fcall: bool) -> bytes:
        """``FCALL`` (or ``EVALSHA``) as one RESP command: the function, its keys and their
        framing built once per key list, the arguments here (see ``wire.framing.frame``)."""
        command = "FCALL" if fcall else "EVALSHA"
        base: Sequence[str]
        if type(keys) is TailedKeys:  # the tail's keys framed with the arguments, in one go
            tailed = cast(TailedKeys, keys)
            base, tail = tailed.base, tailed.tail
            n = len(base) + len(tail)
            rest = frame([*tail, *args])
        else:
            base, n, rest = keys, len(keys), frame(args)
        cached = self._prefix.get((command, name, id(base), n))
        if cached is None or cached[0] is not base:
            target = self.function[name] if fcall else self.sha[name]
            head = bulk(command) + bulk(target) + bulk(n)
            cached = (base, head + b"".join(bulk(k) for k in base))
            if isinstance(base, KeyList):  # a list built per call is framed per call
                self._prefix[(command, name, id(base), n)] = cached
        return b"*%d\r\n" % (3 + n + len(args)) + cached[1] + rest

    def call(self, client: Any, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """One script call sent packed on a connection of the pool; the reply is read as
        redis-py reads it. A held script (one-by-one enqueue's hot path) as a function,
        while Redis is not full, goes the short way: no list of ops, no scan of the replies
        (3 µs of a 35 µs enqueue); an error reply is handled as :meth:`_packed_many` does:
        sent again that way when the call did not run (no function, refused for memory),
        else raised."""
        if name in HELD_SCRIPTS and FULL.since is None:
            pool = client.connection_pool
            if self._functions.get(pool, True):
                conn = HELD.connection(pool)
                try:
                    conn.connect()
                    conn.send_packed_command([self.pack(name, keys, args, True)])
                    return conn.read_response()
                except ResponseError as exc:
                    if no_function(exc):  # loaded now, sent again below (as _packed_many does)
                        if not self.load_library(conn):
                            self._functions[pool] = False
                    elif not refused_for_memory([(name, keys, args)], [exc]):
                        if isinstance(exc, ReadOnlyError):
                            conn.disconnect()  # a demoted master: the next call connects afresh
                        raise
                except BaseException:
                    conn.disconnect()  # a command may be half sent, its reply unread
                    raise
        return self.many(client, [(name, keys, args)])[0]

    def many(
        self,
        client: Any,
        ops: Sequence[Op],
        raise_errors: bool = True,
        sent: tuple[Any, bool] | None = None,
    ) -> list[Any]:
        """Scripts sent packed, each as soon as it is built (Redis runs the first while the
        next is framed), then every reply read; a script's error is raised after all are
        read, as a pipeline does, and NOSCRIPT before any other (``raise_errors=False``: a
        script's error is its own reply, see ``Scripts.call_each``).

        They go as functions (FCALL) until the server refuses those. The calls that found
        no function (a new Redis, ``FUNCTION FLUSH``, another version's library only) did
        not run: the library is loaded and they are sent again. ``sent``: (the connection,
        FCALL or not) of calls :meth:`send` sent, whose replies are read here."""
        pool = client.connection_pool
        if sent is not None:  # sent by send: its replies are read here
            (conn, fcall), held = sent, False
        else:
            held = all(op[0] in HELD_SCRIPTS for op in ops)
            conn = HELD.connection(pool) if held else pool.get_connection()
            fcall = self._functions.get(pool, True)
        try:
            replies = self._read(conn, len(ops)) if sent else self._send(conn, ops, fcall)
            missing = [i for i, reply in enumerate(replies) if fcall and no_function(reply)]
            if missing:
                if not self.load_library(conn):
                    self._functions[pool] = fcall = False
                again = self._send(conn, [ops[i] for i in missing], fcall)
                for i, reply in zip(missing, again, strict=True):
                    replies[i] = reply
            refused = refused_for_memory(ops, replies)
            if refused:  # a full Redis: their allow-oom twins
                again = self._send(conn, [ops[i] for i in refused], fcall, twin=True)
                FULL.refused(took(refused, replies, again))
            elif FULL.since is not None:
                FULL.room(ops, replies)
            errors = [r for r in replies if isinstance(r, ResponseError)]
            if errors:
                if any(isinstance(e, ReadOnlyError) for e in errors):
                    conn.disconnect()  # a demoted master: the next call connects afresh
                if raise_errors:
                    first = next((e for e in errors if missing_script(e)), errors[0])
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

    def _send(self, conn: Any, ops: Sequence[Op], fcall: bool, twin: bool = False) -> list[Any]:
        """Send ``ops`` (``twin``: their allow-oom twins) on ``conn``, read every reply."""
        try:
            conn.connect()  # at once if connected; a Sentinel's asks for the master first
            for name, keys, args in ops:
                if twin:
                    conn.send_command(*self.twin(name, fcall), len(keys), *keys, *args)
                else:
                    conn.send_packed_command([self.pack(name, keys, args, fcall)])
        except BaseException:
            conn.disconnect()  # a command may be half sent
            raise
        return self._read(conn, len(ops))

    def _read(self, conn: Any, n: int) -> list[Any]:
        """The next ``n`` replies on ``conn``, a script's error as its reply."""
        replies: list[Any] = []
        try:
            for _ in range(n):
                try:
                    replies.append(conn.read_response())
                except ResponseError as exc:
                    replies.append(exc)
        except BaseException:
            conn.disconnect()  # replies left unread
            raise
        return replies

    def twin(self, name: str, fcall: bool) -> tuple[str, str]:
        """``name``'s allow-oom twin: its function, or its script by EVAL (rare: no SHA)."""
        if fcall:
            return "FCALL", f"{self.function[name]}_oom"
        return "EVAL", self.oom_source[name]

    def send(self, client: Any, ops: Sequence[Op]) -> tuple[Any, bool] | None:
        """Send ``ops`` packed on a connection of the pool, their replies left unread: the
        (connection, FCALL or not) for :meth:`many` to read them with, or None when they
        were not sent (an argument this path does not frame, a connection error the client
        retries): the caller then sends them by redis-py's path. The connection is held
        until :meth:`many` reads the replies."""
        pool = client.connection_pool
        fcall = self._functions.get(pool, True)
        try:
            packed = [self.pack(name, keys, args, fcall) for name, keys, args in ops]
        except Unpackable:
            return None
        conn = pool.get_connection()
        try:
            conn.connect()
            conn.send_packed_command(packed)
        except (RedisConnectionError, RedisTimeoutError):
            conn.disconnect()
            pool.release(conn)
            if not retries(client):
                raise
            return None
        except BaseException:
            conn.disconnect()
            pool.release(conn)
            raise
        return conn, fcall

    def load_library(self, conn: Any) -> bool:
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


def no_function(reply: Any) -> bool:
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


def missing_script(exc: ResponseError) -> bool:
    """Redis lost its script cache (restart, SCRIPT FLUSH, a promoted replica)."""
    return isinstance(exc, NoScriptError) or "NOSCRIPT" in str(exc)
