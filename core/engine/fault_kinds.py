"""What kind of Redis fault an exception is: the one classification every long-lived thread
(a worker's, the console's) uses to decide that an error is Redis's, log it once per kind,
back off and carry on.

``kind(exc)`` looks through ``exc`` and its causes (a :class:`~ztq.core.errors.ZtqError`
raised ``from`` a redis-py error counts as that error) and answers one of :data:`KINDS`, or
``None`` for an error that is not Redis's (a bug, a task's own exception). ``describe(exc)``
is the one line to show for it, with Redis's own error code (``OOM command not allowed
when used memory > 'maxmemory'``), as ``/readyz`` and the logs say it.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Sequence
from typing import Any

from redis import exceptions as rx

from ztq.core.errors import (
    ConnectionFailed,
    RedisFull,
    RedisNotReady,
    RedisReadOnly,
    RedisUnreachable,
    ZtqError,
)
from ztq.core.settings.redis_urls import safe_url

# kind -> what an operator reads in a log line about it
KINDS = {
    "oom": "Redis is full (maxmemory reached, policy noeviction): writes are refused",
    "readonly": "Redis is a read-only replica (a failover?): writes are refused",
    "loading": "Redis is loading its data set into memory",
    "busy": "Redis is busy running a script",
    "masterdown": "Redis (a replica) lost its link to the master",
    "noscript": "Redis lost ztq's scripts (a restart or SCRIPT FLUSH)",
    "timeout": "Redis did not answer in time",
    "connection": "Redis cannot be reached",
    "error": "Redis refused a command",
}
# error codes of a server reply, as Redis sends them (redis-py strips some off its message)
_CODES = {
    rx.OutOfMemoryError: "OOM",
    rx.ReadOnlyError: "READONLY",
    rx.BusyLoadingError: "LOADING",
    rx.NoScriptError: "NOSCRIPT",
}
_BY_CODE = {"OOM": "oom", "READONLY": "readonly", "LOADING": "loading", "BUSY": "busy",
            "MASTERDOWN": "masterdown", "NOSCRIPT": "noscript", "UNBLOCKED": "readonly",
            "CLUSTERDOWN": "connection", "TRYAGAIN": "busy"}  # fmt: skip
log = logging.getLogger("ztq.redis")
_PIPELINE = re.compile(r"^Command # (\d+) \(.*?\) of pipeline caused error: ", re.S)


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in out and len(out) < 8:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def _message(exc: BaseException) -> str:
    """Redis's words, without redis-py's pipeline note and the script's SHA and line."""
    text = str(exc.args[0]) if exc.args else str(exc)
    return _PIPELINE.sub("", text).split(". script: ", 1)[0]


def _code(exc: BaseException) -> str:
    """The error code of a server reply (``OOM``, ``BUSY`` ...), or ''."""
    for cls, code in _CODES.items():
        if isinstance(exc, cls):
            return code
    first = _message(exc).split(" ", 1)[0]
    return first if first.isupper() else ""


def kind(exc: BaseException) -> str | None:
    """One of :data:`KINDS` for an error of Redis (or of reaching it), else ``None``."""
    for err in _chain(exc):
        if isinstance(err, rx.ResponseError):
            return _BY_CODE.get(_code(err), "error")
        if isinstance(err, rx.BusyLoadingError):
            return "loading"
        if isinstance(err, rx.TimeoutError):
            return "timeout"
        if isinstance(err, rx.ConnectionError | ConnectionResetError | BrokenPipeError):
            return "connection"
        if isinstance(err, rx.RedisError):
            return "error"
    if any(isinstance(err, ConnectionFailed) for err in _chain(exc)):
        return "connection"
    return None


def describe(exc: BaseException) -> str:
    """``redis: OOM command not allowed when used memory > 'maxmemory'``: Redis's own words
    for the fault, with its error code; for an error of reaching it, what redis-py said."""
    for err in _chain(exc):
        if isinstance(err, rx.RedisError):
            code, text = _code(err), _message(err).strip()
            if code and not text.startswith(code):
                text = f"{code} {text}"
            return f"redis: {text.rstrip('.')}"
    return f"redis: {exc}"


def applied_before(exc: BaseException) -> int | None:
    """How many commands of a pipeline (sent without MULTI) Redis ran before the first
    one it refused, from redis-py's note on the error (``Command # 3 (...) of pipeline``);
    ``None`` when the error says nothing of it (a lost connection: nothing is known).
    Redis answered every command of such a pipeline: those before the first refused one
    were applied (their replies are lost with the error)."""
    for err in _chain(exc):
        if isinstance(err, rx.ResponseError) and err.args:
            found = _PIPELINE.match(str(err.args[0]))
            if found:
                return int(found.group(1)) - 1
    return None


# -- what a producer raises for them (issue 28; the boundary is ztq.core.client.enqueue) -------
_NOT_READY = (
    RedisNotReady,
    "cannot take writes yet (loading its data, busy with a script, or "
    "its master is down): retry shortly; nothing was enqueued",
)
_PRODUCER: dict[str, tuple[type[ZtqError], str]] = {
    "oom": (RedisFull, "is full (maxmemory reached): free memory or raise maxmemory; "
            "nothing was enqueued"),
    "readonly": (RedisReadOnly, "is a replica now, read-only (a failover, or the URL names "
                 "a replica): point the URL at the master or a Sentinel; nothing was enqueued"),
    "loading": _NOT_READY,
    "busy": _NOT_READY,
    "masterdown": _NOT_READY,
    "connection": (RedisUnreachable, "cannot be reached: check that it runs and the URL; the "
                   "task may or may not be enqueued (enqueued again: one task while it "
                   "waits; one that ran meanwhile runs again)"),
    "timeout": (RedisUnreachable, "did not answer in time: check that it runs and the URL; "
                "the task may or may not be enqueued (enqueued again: one task while it "
                "waits; one that ran meanwhile runs again)"),
}  # fmt: skip


_AUTH_MISSING = (
    "requires a password (NOAUTH): give it in the URL, redis://:PASSWORD@host:port/db, or "
    "redis://USER:PASSWORD@host:port/db for an ACL user (--redis, ZTQ_REDIS_URL, or redis = "
    "in [server])"
)
_AUTH_WRONG = (
    "refused the user or password of the URL (WRONGPASS): check the password "
    "(redis://:PASSWORD@host...) and, for an ACL user, its name (redis://USER:PASSWORD@host...)"
)


def auth_help(exc: BaseException) -> str | None:
    """What to set when Redis refused the connection's credentials (issue 39: redis-py's
    raw "HELLO must be called with the client already authenticated ..."), else None."""
    for err in _chain(exc):
        text = _message(err)
        if not isinstance(err, rx.AuthenticationError | rx.ResponseError):
            continue
        if "HELLO must be called" in text or text.startswith(("NOAUTH", "Authentication requ")):
            return _AUTH_MISSING
        if "username-password pair" in text or text.startswith("WRONGPASS"):
            return _AUTH_WRONG
    return None


def unreachable(url: str, exc: BaseException) -> str:
    """The line of a :class:`ConnectionFailed` for ``exc`` at ``url`` (password masked)."""
    helped = auth_help(exc)
    if helped is not None:
        return f"Redis at {safe_url(url)} {helped}"
    return f"cannot reach Redis at {safe_url(url)}: {exc}"


def translate(exc: BaseException, where: str = "") -> BaseException:
    """The error a producer raises for ``exc``: a new ZtqError subclass naming the cause and
    the remedy (``where``: the Redis, as a safe URL), with the redis-py exception as its
    ``__cause__``; ``exc`` itself when it is no such fault (a script's own error, a ztq
    error). A new object per call: callers who shared one failed batch each raise theirs."""
    fault = kind(exc)
    if fault not in _PRODUCER:
        return exc
    cls, text = _PRODUCER[fault]
    text = auth_help(exc) or text
    root = next((e for e in _chain(exc) if isinstance(e, rx.RedisError)), exc)
    err = cls(f"Redis{' at ' + where if where else ''} {text} ({describe(exc)})")
    err.__cause__ = root
    return err


# A full Redis (docs/design.md, "A full Redis"): a call of these that Redis refused for
# memory (OOM: it ran nothing) is sent again as its twin flagged ``allow-oom``, whose Lua
# sees OOM = true and frees at least what it writes (_lib.lua, keep_compact). Twins need
# Redis 7 (function flags, the EVAL shebang); on an older Redis the refusal stands.
OOM_TWINS = frozenset({"fetch", "ack", "fail", "renew"})


def refused_for_memory(ops: Sequence[tuple[str, Any, Any]], replies: Sequence[Any]) -> list[int]:
    """The calls of ``ops`` that Redis refused for memory and that have an allow-oom twin
    (a refused call ran nothing: sending its twin is not sending it twice)."""
    return [i for i, (op, reply) in enumerate(zip(ops, replies, strict=False))
            if isinstance(reply, rx.ResponseError) and op[0] in OOM_TWINS
            and _code(reply) == "OOM"]  # fmt: skip


def took(refused: list[int], replies: list[Any], again: Sequence[Any]) -> int:
    """Put the twins' replies in place of the refusals they answer (a twin's error leaves
    the refusal: on a Redis before 7 a twin does not compile); how many went through."""
    n = 0
    for i, reply in zip(refused, again, strict=True):
        if not isinstance(reply, rx.ResponseError):
            replies[i], n = reply, n + 1
    return n


class FullEpisode:
    """A process's writes meeting a full Redis (docs/design.md, "A full Redis"): told in
    one WARNING when its first fetch, ack, fail or renew is refused for memory and goes
    through as its allow-oom twin, and one INFO when those calls go through plainly again
    and none was refused for :attr:`quiet` seconds, instead of a line per task: a draining
    Redis hovers at maxmemory (each ack frees, each plain write takes), and an episode
    ended at the first plain call told it again every second (measured: 14 times in 4 s).
    What yielded is counted in Redis (``oom_compact``, ``oom_dropped`` in each queue's
    totals: ``ztq info``, metrics)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.since: float | None = None  # monotonic; None: not in an episode
        self.last = 0.0  # monotonic: the last refusal
        self.calls = 0  # calls that went through as twins in this episode
        self.quiet = 30.0  # seconds without a refusal that end an episode

    def refused(self, took: int) -> None:
        """Calls refused for memory were sent as twins; ``took`` of them went through."""
        with self.lock:
            first, self.calls = self.since is None, self.calls + took
            self.last = time.monotonic()
            if first:
                self.since = self.last
        if first:
            log.warning("Redis reached maxmemory: the worker's fetch, ack, fail and renew go "
                        "on as allow-oom calls; finished records and history yield first "
                        "(compact records, no history entries, early drops: oom_compact and "
                        "oom_dropped in `ztq info`)")  # fmt: skip

    def room(self, ops: Sequence[tuple[str, Any, Any]], replies: Sequence[Any]) -> None:
        """A pipeline went through without a refusal for memory: if it held a call that
        has a twin and went through, and none was refused for :attr:`quiet` s, the episode
        ended."""
        if time.monotonic() - self.last < self.quiet:
            return
        if not any(op[0] in ("fetch", "ack", "fail") and not isinstance(r, rx.ResponseError)
                   for op, r in zip(ops, replies, strict=False)):  # fmt: skip
            return
        with self.lock:
            since, calls, self.since, self.calls = self.since, self.calls, None, 0
        if since is not None:
            log.info("Redis takes writes under maxmemory again, after %.1f s (%d calls went "
                     "through as allow-oom calls)", time.monotonic() - since, calls)  # fmt: skip


FULL = FullEpisode()
