"""Loads the Lua scripts once per process and runs them by SHA, reloading after NOSCRIPT.

redis-py's ``Script`` objects make every pipeline ask ``SCRIPT EXISTS`` first, which costs a
round trip on the hot path (ack + fetch travel in one pipeline). Here a pipeline is sent as
is; if Redis lost its script cache (restart, ``SCRIPT FLUSH``) the whole batch fails with
NOSCRIPT before any script ran, so the scripts are loaded and the batch is sent again.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any, cast

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import (
    NoPermissionError,
    NoScriptError,
    ReadOnlyError,
    ResponseError,
)
from redis.exceptions import TimeoutError as RedisTimeoutError

from ztq.core.engine.fault_kinds import FULL, OOM_TWINS, refused_for_memory, took
from ztq.core.engine.wire.framing import (
    HELD,
    KeyList,
    TailedKeys,
    Unpackable,
    bulk,
    frame,
    plain,
    retries,
)

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
    "forget_queue",
    "command",
    "release",
    "pause",
    "configure",
    "rate_leave",
    "key_pause",
    "key_weight",
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
    "count_errors",
    "follow",
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


def _read(name: str) -> str:
    return resources.files("ztq.core.engine").joinpath("scripts", f"{name}.lua").read_text("utf-8")


class Scripts:
    """The script sources and SHAs; shared by every client of a process."""

    def __init__(self) -> None:
        lib = _read("_lib") + "\n" + _read("_keyed")  # keyed tasks: their own file
        self.source = {name: f"{lib}\nlocal OOM = false\n{_read(name)}" for name in NAMES}
        self.oom_source = {name: f"#!lua flags=allow-oom\n{lib}\nlocal OOM = true\n{_read(name)}"
                           for name in OOM_TWINS}  # fmt: skip
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
            f"local function {name}_main(KEYS, ARGV, OOM)\n{_read(name)}\nend\n"
            f"redis.register_function('{function}', "
            f"function(k, a) return {name}_main(k, a, false) end)\n"
            + (f"redis.register_function{{function_name='{function}_oom', flags={{'allow-oom'}}, "
               f"callback=function(k, a) return {name}_main(k, a, true) end}}\n"
               if name in OOM_TWINS else "")
            for name, function in self.function.items()
        )  # fmt: skip
        # per pool: False once its server refused functions (Redis < 7, an ACL): EVALSHA then
        self._functions: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
        # (command, script, keys list, numkeys) -> (that list, 'FCALL function numkeys
        # keys...' or 'EVALSHA sha numkeys keys...' as RESP); the hot paths pass one key list
        # per queue (Storage._key_list), an enqueue followed by its request key (TailedKeys)
        self._prefix: dict[tuple[str, str, int, int], tuple[Sequence[str], bytes]] = {}

    def load_all(self, client: Any) -> None:
        for src in self.source.values():
            client.script_load(src)
        self._loaded.add(id(client))

    def call(self, client: Any, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run one script on ``client`` (a Redis or RedisCluster)."""
        if name in PACKED and plain(client):
            try:
                return self._packed(client, name, keys, args)
            except (RedisConnectionError, RedisTimeoutError):
                if not retries(client):
                    raise
            except (NoScriptError, Unpackable):
                pass  # the general path below loads the scripts, or retries as redis-py does
        try:
            return client.evalsha(self.sha[name], len(keys), *keys, *args)
        except NoScriptError:
            self.load_all(client)
            return client.evalsha(self.sha[name], len(keys), *keys, *args)

    def _pack(self, name: str, keys: Sequence[str], args: Sequence[Any], fcall: bool) -> bytes:
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

    def _packed(self, client: Any, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
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
                    conn.send_packed_command([self._pack(name, keys, args, True)])
                    return conn.read_response()
                except ResponseError as exc:
                    if _no_function(exc):  # loaded now, sent again below (as _packed_many does)
                        if not self._load_library(conn):
                            self._functions[pool] = False
                    elif not refused_for_memory([(name, keys, args)], [exc]):
                        if isinstance(exc, ReadOnlyError):
                            conn.disconnect()  # a demoted master: the next call connects afresh
                        raise
                except BaseException:
                    conn.disconnect()  # a command may be half sent, its reply unread
                    raise
        return self._packed_many(client, [(name, keys, args)])[0]

    def _packed_many(
        self,
        client: Any,
        ops: Sequence[Op],
        raise_errors: bool = True,
        sent: tuple[Any, bool] | None = None,
    ) -> list[Any]:
        """Scripts sent packed, each as soon as it is built (Redis runs the first while the
        next is framed), then every reply read; a script's error is raised after all are
        read, as a pipeline does, and NOSCRIPT before any other (``raise_errors=False``: a
        script's error is its own reply, see :meth:`call_each`).

        They go as functions (FCALL) until the server refuses those. The calls that found
        no function (a new Redis, ``FUNCTION FLUSH``, another version's library only) did
        not run: the library is loaded and they are sent again. ``sent``: (the connection,
        FCALL or not) of calls :meth:`submit` sent, whose replies are read here."""
        pool = client.connection_pool
        if sent is not None:  # sent by submit: its replies are read here
            (conn, fcall), held = sent, False
        else:
            held = all(op[0] in HELD_SCRIPTS for op in ops)
            conn = HELD.connection(pool) if held else pool.get_connection()
            fcall = self._functions.get(pool, True)
        try:
            replies = self._read(conn, len(ops)) if sent else self._send(conn, ops, fcall)
            missing = [i for i, reply in enumerate(replies) if fcall and _no_function(reply)]
            if missing:
                if not self._load_library(conn):
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
                    conn.send_command(*self._twin(name, fcall), len(keys), *keys, *args)
                else:
                    conn.send_packed_command([self._pack(name, keys, args, fcall)])
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

    def submit(self, client: Any, ops: Sequence[Op]) -> Callable[[], list[Any]]:
        """Send ``ops`` now and return the function that reads their replies (what
        :meth:`call_many` returns, raising as it does), to call once: the caller works
        meanwhile, and Redis runs the scripts while it does (a worker runs one batch while
        the acks of the last one and the fetch of the next travel). The calls hold a
        connection of the pool until their replies are read. Only the packed path splits
        the send from the read; any other (a Cluster, redis-py's pipeline, an argument it
        does not frame) makes the whole call when the replies are asked for. A connection
        that fails either way sends them again, as :meth:`call_many` does (the worker's
        scripts are safe to send again: docs/design.md, "Lost replies")."""
        if not (ops and plain(client) and all(op[0] in PACKED for op in ops)):
            return lambda: self.call_many(client, ops)
        if id(client) not in self._loaded:
            self.load_all(client)
        pool = client.connection_pool
        fcall = self._functions.get(pool, True)
        try:
            packed = [self._pack(name, keys, args, fcall) for name, keys, args in ops]
        except Unpackable:
            return lambda: self.call_many(client, ops)
        conn = pool.get_connection()
        try:
            conn.connect()
            conn.send_packed_command(packed)
        except (RedisConnectionError, RedisTimeoutError):
            conn.disconnect()
            pool.release(conn)
            if not retries(client):
                raise
            return lambda: self.call_many(client, ops)
        except BaseException:
            conn.disconnect()
            pool.release(conn)
            raise

        def replies() -> list[Any]:
            try:
                return self._packed_many(client, ops, sent=(conn, fcall))
            except (RedisConnectionError, RedisTimeoutError):
                if not retries(client):
                    raise
            except ResponseError as exc:
                if not missing_script(exc):
                    raise
                self.load_all(client)
            return self.call_many(client, ops)  # _packed_many gave the connection back

        return replies

    def _twin(self, name: str, fcall: bool) -> tuple[str, str]:
        """``name``'s allow-oom twin: its function, or its script by EVAL (rare: no SHA)."""
        if fcall:
            return "FCALL", f"{self.function[name]}_oom"
        return "EVAL", self.oom_source[name]

    def twins(self, client: Any, ops: Sequence[Op], replies: list[Any]) -> tuple[list[int], Any]:
        """The places of the calls Redis refused for memory (``replies``: errors as replies)
        and a pipeline of their allow-oom twins (``None`` when there are none)."""
        refused = refused_for_memory(ops, replies)
        if not refused:
            if FULL.since is not None:
                FULL.room(ops, replies)
            return refused, None
        pipe = client.pipeline(transaction=False)
        for i in refused:
            name, keys, args = ops[i]
            pipe.execute_command(*self._twin(name, False), len(keys), *keys, *args)
        return refused, pipe

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
        if wait is None and plain(client) and all(op[0] in PACKED for op in ops):
            try:
                return self._packed_many(client, ops)
            except (RedisConnectionError, RedisTimeoutError):
                if not retries(client):
                    raise
            except Unpackable:
                pass  # the pipeline below, as redis-py would retry
            except ResponseError as exc:
                if not missing_script(exc):
                    raise
                self.load_all(client)
        for attempt in (1, 2):
            replies = list(self.pipeline(client, ops, wait).execute(raise_on_error=False))
            refused, twins = self.twins(client, ops, replies)
            if twins is not None:
                FULL.refused(took(refused, replies, twins.execute(raise_on_error=False)))
            try:
                return raise_first(ops, replies)
            except ResponseError as exc:  # NoScriptError is one
                if attempt == 2 or not missing_script(exc):
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
        if plain(client) and all(op[0] in PACKED for op in ops):
            try:
                replies = self._packed_many(client, ops, raise_errors=False)
                missing = [i for i, r in enumerate(replies) if isinstance(r, ResponseError)
                           and missing_script(r)]  # fmt: skip
                if missing:  # EVALSHA mode, a flushed script cache: those did not run
                    self.load_all(client)
                    again = self._packed_many(client, [ops[i] for i in missing],
                                              raise_errors=False)  # fmt: skip
                    for i, reply in zip(missing, again, strict=True):
                        replies[i] = reply
                return replies
            except (RedisConnectionError, RedisTimeoutError):
                if not retries(client):
                    raise
            except Unpackable:
                pass  # the pipeline below (all of them again), as redis-py would retry
        replies = list(self.pipeline(client, ops, None).execute(raise_on_error=False))
        refused, twins = self.twins(client, ops, replies)
        if twins is not None:
            FULL.refused(took(refused, replies, twins.execute(raise_on_error=False)))
        missing = [i for i, r in enumerate(replies) if isinstance(r, ResponseError)
                   and missing_script(r)]  # fmt: skip
        if missing:  # those did not run: load the scripts, send them again
            self.load_all(client)
            again = self.pipeline(client, [ops[i] for i in missing], None)
            for i, reply in zip(missing, again.execute(raise_on_error=False), strict=True):
                replies[i] = reply
        return replies

    def pipeline(self, client: Any, ops: Sequence[Op], wait: tuple[int, int] | None) -> Any:
        """A pipeline (no MULTI) of the scripts of ``ops``, then ``WAIT`` if asked."""
        pipe = client.pipeline(transaction=False)
        for name, keys, args in ops:
            pipe.execute_command("EVALSHA", self.sha[name], len(keys), *keys, *args)
        if wait is not None:
            pipe.execute_command("WAIT", *wait)
        return pipe


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


def raise_first(ops: Sequence[Op], replies: list[Any]) -> list[Any]:
    """``replies`` of a pipeline, or its first error raised as redis-py raises it (with the
    note ``fault_kinds.applied_before`` reads)."""
    for at, reply in enumerate(replies):
        if isinstance(reply, ResponseError):
            name = ops[at][0] if at < len(ops) else "WAIT"
            reply.args = (f"Command # {at + 1} ({name}) of pipeline caused error: "
                          f"{reply.args[0] if reply.args else ''}", *reply.args[1:])  # fmt: skip
            raise reply
    return replies


def missing_script(exc: ResponseError) -> bool:
    """Redis lost its script cache (restart, SCRIPT FLUSH, a promoted replica)."""
    return isinstance(exc, NoScriptError) or "NOSCRIPT" in str(exc)


SCRIPTS = Scripts()
