"""The Lua scripts: their sources (``scripts/*.lua``, with ``_lib.lua``), SHAs and function
library, loaded once per process, and the calls that run them: one, several in one round
trip, each with its own error, or sent now and read later, by the packed path
(:mod:`ztq.core.engine.packed`) where it applies, else by redis-py's pipeline.

redis-py's ``Script`` objects make every pipeline ask ``SCRIPT EXISTS`` first, which costs a
round trip on the hot path (ack + fetch travel in one pipeline). Here a pipeline is sent as
is; if Redis lost its script cache (restart, ``SCRIPT FLUSH``) the whole batch fails with
NOSCRIPT before any script ran, so the scripts are loaded and the batch is sent again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ztq.core.engine.fault_kinds import FULL, OOM_TWINS, refused_for_memory, took
from ztq.core.engine.packed import PACKED, PackedCalls, missing_script, no_function
from ztq.core.engine.wire.framing import Op, Unpackable, plain, retries

__all__ = ["NAMES", "PACKED", "SCRIPTS", "Op", "Scripts", "missing_script", "no_function"]

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
        self.packed = PackedCalls(self.sha, self.function, self.oom_source, self.library)

    def load_all(self, client: Any) -> None:
        for src in self.source.values():
            client.script_load(src)
        self._loaded.add(id(client))

    def call(self, client: Any, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run one script on ``client`` (a Redis or RedisCluster)."""
        if name in PACKED and plain(client):
            try:
                return self.packed.call(client, name, keys, args)
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
        sent = self.packed.send(client, ops)
        if sent is None:
            return lambda: self.call_many(client, ops)

        def replies() -> list[Any]:
            try:
                return self.packed.many(client, ops, sent=sent)
            except (RedisConnectionError, RedisTimeoutError):
                if not retries(client):
                    raise
            except ResponseError as exc:
                if not missing_script(exc):
                    raise
                self.load_all(client)
            return self.call_many(client, ops)  # many gave the connection back

        return replies

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
            pipe.execute_command(*self.packed.twin(name, False), len(keys), *keys, *args)
        return refused, pipe

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
                return self.packed.many(client, ops)
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
                replies = self.packed.many(client, ops, raise_errors=False)
                missing = [i for i, r in enumerate(replies) if isinstance(r, ResponseError)
                           and missing_script(r)]  # fmt: skip
                if missing:  # EVALSHA mode, a flushed script cache: those did not run
                    self.load_all(client)
                    again = self.packed.many(client, [ops[i] for i in missing],
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


SCRIPTS = Scripts()
