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

import re

from redis import exceptions as rx

from ztq.core.errors import (
    ConnectionFailed,
    RedisFull,
    RedisNotReady,
    RedisReadOnly,
    RedisUnreachable,
    ZtqError,
)

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
                   "task may or may not be enqueued (the same id sent again keeps one task)"),
    "timeout": (RedisUnreachable, "did not answer in time: check that it runs and the URL; "
                "the task may or may not be enqueued (the same id sent again keeps one task)"),
}  # fmt: skip


def translate(exc: BaseException, where: str = "") -> BaseException:
    """The error a producer raises for ``exc``: a new ZtqError subclass naming the cause and
    the remedy (``where``: the Redis, as a safe URL), with the redis-py exception as its
    ``__cause__``; ``exc`` itself when it is no such fault (a script's own error, a ztq
    error). A new object per call: callers who shared one failed batch each raise theirs."""
    fault = kind(exc)
    if fault not in _PRODUCER:
        return exc
    cls, text = _PRODUCER[fault]
    root = next((e for e in _chain(exc) if isinstance(e, rx.RedisError)), exc)
    err = cls(f"Redis{' at ' + where if where else ''} {text} ({describe(exc)})")
    err.__cause__ = root
    return err
