"""Loads the Lua scripts once per process and runs them by SHA, reloading after NOSCRIPT.

redis-py's ``Script`` objects make every pipeline ask ``SCRIPT EXISTS`` first, which costs a
round trip on the hot path (ack + fetch travel in one pipeline). Here a pipeline is sent as
is; if Redis lost its script cache (restart, ``SCRIPT FLUSH``) the whole batch fails with
NOSCRIPT before any script ran, so the scripts are loaded and the batch is sent again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from importlib import resources
from typing import Any

from redis.exceptions import NoScriptError, ResponseError

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

    def load_all(self, client: Any) -> None:
        for src in self.source.values():
            client.script_load(src)
        self._loaded.add(id(client))

    def call(self, client: Any, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run one script on ``client`` (a Redis or RedisCluster)."""
        try:
            return client.evalsha(self.sha[name], len(keys), *keys, *args)
        except NoScriptError:
            self.load_all(client)
            return client.evalsha(self.sha[name], len(keys), *keys, *args)

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


def _missing_script(exc: ResponseError) -> bool:
    """Redis lost its script cache (restart, SCRIPT FLUSH, a promoted replica)."""
    return isinstance(exc, NoScriptError) or "NOSCRIPT" in str(exc)


SCRIPTS = Scripts()
