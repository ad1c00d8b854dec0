"""Every exception ztq raises, under one root so callers can catch ``ZtqError``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


class ZtqError(Exception):
    """Root of every error raised by ztq."""


class ConfigError(ZtqError):
    """A setting, option or config file is wrong; the message names what and where."""


class InvalidName(ZtqError, ValueError):
    """A queue name, task name or task id contains characters that would break keys."""


class SerializationError(ZtqError, TypeError):
    """Task arguments cannot be encoded as JSON (ztq never pickles)."""


class UnknownTask(ZtqError, LookupError):
    """A payload names a task that is not registered in this process."""


class PayloadError(ZtqError, ValueError):
    """A task record in Redis is not valid JSON or lacks a required field; or a payload
    over ``max_payload`` bytes, refused before it is written."""


class ConnectionFailed(ZtqError, ConnectionError):
    """Redis could not be reached after bounded retries; the message names the URL."""


class NotFound(ZtqError, LookupError):
    """The task, worker or queue asked for does not exist."""


class StaleLease(ZtqError):
    """An ack or failure came from a worker whose lease expired and was handed on."""


class Retry(ZtqError):  # noqa: N818 - raised by tasks, reads as a verb
    """Raised inside a task to run it again later.

    ``delay`` is in seconds; ``None`` lets the worker use the task's backoff.
    """

    def __init__(self, delay: float | None = None, message: str = "") -> None:
        super().__init__(message or f"retry in {delay}s")
        self.delay = delay


class UnsupportedTask(ZtqError, TypeError):
    """A function ztq cannot run as a task: calling it would not run its body (``async def``,
    generator functions), so a worker could never tell that it had done its work."""


class TaskFailed(ZtqError):
    """The task ended in its error list; carries the remote exception's type, message and
    traceback (as text: ztq never pickles)."""

    def __init__(self, task_id: str, error_type: str, message: str, traceback: str) -> None:
        super().__init__(f"task {task_id} failed: {error_type}: {message}" if message
                         else f"task {task_id} failed: {error_type}")  # fmt: skip
        self.task_id, self.error_type, self.message = task_id, error_type, message
        self.traceback = traceback


class TaskExpired(ZtqError):
    """The task was not started before its expiry (``expires=``): it never ran and never
    will (docs/queue-controls.md, "Expiry"). ``expired_at`` is the expiry (epoch ms, on
    Redis's clock) when the record still holds it."""

    def __init__(self, task_id: str, expired_at: int | None = None) -> None:
        super().__init__(f"task {task_id} expired before it started: it did not run")
        self.task_id, self.expired_at = task_id, expired_at


class ResultTimeout(ZtqError, TimeoutError):
    """The task had not finished when the wait for its result ran out."""


class InvalidOption(ZtqError, ValueError):
    """An enqueue or task option has a value of the wrong type or out of range."""


class UnknownOption(InvalidOption, TypeError):
    """An option name that the call does not take (``enqueue(..., frist=True)``,
    ``@task(retires=3)``); the message suggests the nearest known name. A ``TypeError`` as
    well: that is what Python raised for an unexpected keyword before ztq checked it."""


class WrongArguments(ZtqError, TypeError):
    """A task's arguments do not fit its function's signature (a missing or an extra
    argument, an unknown keyword): refused at the enqueue when the function is known, and by
    the worker (which fails the task without retries) when it was not."""


def unknown_name(kind: str, name: str, known: Iterable[str], where: str = "") -> str:
    """The message for an unknown option or setting: ``unknown option 'frist' for enqueue;
    did you mean 'first'? (known: ...)``. The suggestion is the nearest known name
    (``difflib``), left out when none is close; ``known`` is listed sorted."""
    import difflib  # only on this error path

    names = sorted(known)
    close = difflib.get_close_matches(name, names, n=1) if isinstance(name, str) else []
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return (
        f"unknown {kind} {name!r}{' for ' + where if where else ''}{hint} "
        f"(known: {', '.join(names)})"
    )


class NotReplicated(ZtqError):
    """An enqueue asked to wait for replicas (``replicas=N``) and fewer confirmed in time.

    The tasks *are* enqueued on the master; only their copies are not known to be on
    ``replicas`` replicas yet, so a failover right now could lose them. Enqueueing the
    same calls again is safe (the same ids: Redis keeps one task), so a caller may retry.
    """

    def __init__(self, handles: Sequence[object], confirmed: int, wanted: int) -> None:
        super().__init__(
            f"{len(handles)} task(s) enqueued, but only {confirmed} of {wanted} replica(s) "
            "confirmed them in time: a failover now could lose them (enqueueing again is safe)"
        )
        self.handles, self.confirmed, self.wanted = list(handles), confirmed, wanted


class ChannelFull(ZtqError):
    """A channel holds as many messages as its cap allows: its slowest subscriber has not
    acknowledged them yet (or a subscriber stopped reading: unsubscribe it)."""


class TransferFailed(ZtqError):
    """A file sent through a channel did not arrive whole: its size or SHA-256 differ from
    what the sender announced, or a part of it was never received."""


class QueueFull(ZtqError):
    """A queue holds ``max_pending`` tasks waiting to run and its policy is ``raise`` (or
    ``block`` and no room came in time): the task was not enqueued, nothing was written.
    ``refused`` lists the ids left out of a batch (the rest were enqueued); ``handles``
    the tasks of the batch that were."""

    def __init__(
        self,
        queue: str,
        limit: int | None,
        message: str,
        refused: list[str] | None = None,
        handles: list[object] | None = None,
    ) -> None:
        super().__init__(message)
        self.queue, self.limit = queue, limit
        self.refused, self.handles = refused or [], handles or []


# -- Redis refusing a producer's write (issue 28): ztq.core.engine.fault_kinds.translate ------
class RedisFull(ZtqError):
    """Redis reached ``maxmemory`` and refuses writes (``OOM``, policy ``noeviction``): the
    enqueue wrote nothing. Free memory (drain or purge queues, shorten result and history
    retention) or raise ``maxmemory``; the redis-py error is the ``__cause__``."""


class RedisReadOnly(ConnectionFailed):
    """The Redis written to is a read-only replica (``READONLY``): a failover demoted it, or
    the URL names a replica. Nothing was written; point the URL at the master (or a
    Sentinel). A :class:`ConnectionFailed`, so code that retries those retries this."""


class RedisUnreachable(ConnectionFailed):
    """Redis could not be reached (refused, reset, timed out): the enqueue may not have
    been written (an id sent again is kept once). Check that Redis runs and the URL."""


class RedisNotReady(ConnectionFailed):
    """Redis answers but cannot take writes yet (``LOADING`` its data after a restart,
    ``BUSY`` with a long script, ``MASTERDOWN``, ``TRYAGAIN``): nothing was written; retry
    shortly."""
