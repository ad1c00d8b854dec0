"""Running one task payload and classifying what happened, the same in a thread or a child;
and importing the task modules, which the worker and each process slot's child do first.

Nothing here talks to Redis except through the task's own reports (``worker.context``).
"""

from __future__ import annotations

import asyncio
import contextvars
import ctypes
import inspect
import json
import threading
import traceback as tb
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ztq.core.client.apps import import_module
from ztq.core.engine.record import decode_payload
from ztq.core.errors import (
    ConfigError,
    PayloadError,
    Retry,
    SerializationError,
    UnknownTask,
    UnsupportedTask,
    WrongArguments,
)
from ztq.core.middleware.base import Outcome

if TYPE_CHECKING:
    from ztq.core.client.app import App

TRACEBACK_LIMIT = 20_000


class SoftTimeout(Exception):  # noqa: N818 - reads as what happened
    """Raised inside a task that ran past its ``timeout`` (where the runtime allows it)."""


class Killed(BaseException):  # noqa: N818
    """Raised inside a task an operator killed from the console (thread mode)."""


def _failure(task: str, exc: BaseException, *, permanent: bool = False, kind: str = "") -> Outcome:
    text = "".join(tb.format_exception(type(exc), exc, exc.__traceback__))
    return Outcome(
        ok=False,
        task=task,
        error_type=kind or type(exc).__name__,
        message=str(exc)[:2000],
        traceback=text[-TRACEBACK_LIMIT:],
        permanent=permanent,
        exception=exc,
    )


def encode_result(value: Any) -> str:
    """The result as JSON, or '' for ``None`` (nothing to send or store: most tasks).
    Raises ``TypeError`` / ``ValueError`` for a value JSON cannot encode (ztq never pickles,
    and a repr in place of the value would be a wrong result)."""
    if value is None:
        return ""
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def not_run(value: Any) -> bool:
    """True for a value that stands for work not done (a coroutine, a generator): closed, so
    Python does not warn that a coroutine was never awaited."""
    if inspect.iscoroutine(value) or inspect.isgenerator(value):
        value.close()
        return True
    return inspect.isasyncgen(value) or inspect.isawaitable(value)


def import_modules(modules: tuple[str, ...]) -> None:
    """Import the task modules (from the current directory too, as rq and celery do)."""
    for module in modules:
        try:
            import_module(module)
        except Exception as exc:  # any error of the module's own code: one line, exit 2
            raise ConfigError(f"cannot import task module {module!r}: {import_error(exc)}") from exc


def import_error(exc: BaseException) -> str:
    """An import's error as ``file:line: Type: message`` (issue 39: a SyntaxError or an
    exception raised at import was a raw traceback); a module that is not found keeps
    Python's own words, which name it."""
    if isinstance(exc, SyntaxError):
        return f"{exc.filename}:{exc.lineno}: {type(exc).__name__}: {exc.msg}"
    frames = [f for f in tb.extract_tb(exc.__traceback__) if not f.filename.startswith("<")]
    if isinstance(exc, ModuleNotFoundError) or not frames:
        return str(exc)
    return f"{frames[-1].filename}:{frames[-1].lineno}: {type(exc).__name__}: {exc}"


def prepare(
    payload_text: str, app: App
) -> tuple[Any, list[Any], dict[str, Any], dict[str, Any]] | Outcome:
    """Decode and check a payload against ``app``'s registry: (function, args, kwargs, opts),
    or the failure Outcome."""
    try:
        payload = decode_payload(payload_text)
    except PayloadError as exc:
        return _failure("?", exc, permanent=True)
    name = payload["task"]
    try:
        tf = app.lookup(name)
    except UnknownTask as exc:
        return _failure(name, exc, permanent=True)
    args, kwargs = payload.get("args", []), payload.get("kwargs", {})
    try:
        tf.check_arguments(tuple(args), kwargs)  # the producer's check (ztq.core.client)
    except WrongArguments as exc:
        return _failure(name, exc, permanent=True)
    return tf, args, kwargs, dict(payload.get("opts") or {})


def run_payload(payload_text: str, app: App) -> Outcome:
    """Run a payload to an Outcome; never raises except for ``SystemExit``-like signals."""
    prepared = prepare(payload_text, app)
    if isinstance(prepared, Outcome):
        return prepared
    tf, args, kwargs, _opts = prepared
    return call(tf, args, kwargs)


class Interruptible:
    """Marks the stretch where a thread runs task code, so that an interrupt (soft timeout,
    kill) raised into the thread from outside lands in the task and nowhere else."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = False
        self.run: object = None  # what is running now (the executor's Running)

    def interrupt(
        self, thread: threading.Thread, exc: type[BaseException], run: object = None
    ) -> bool:
        """Raise ``exc`` in ``thread`` if it is inside task code, and (when ``run`` is given)
        still running that very run: a check made just before the task ended must not hit
        the next task of the batch."""
        with self.lock:
            if not self.active or thread.ident is None or (run is not None and run is not self.run):
                return False
            done = ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(thread.ident), ctypes.py_object(exc)
            )
            return bool(done == 1)

    def enter(self, run: object = None) -> None:
        with self.lock:
            self.active, self.run = True, run

    def leave(self) -> None:
        with self.lock:
            self.active, self.run = False, None


def wrong_pool(tf: Any, pool: str) -> bool:
    """A pool of this kind cannot run this task: an ``async def`` under threads, a plain
    function under an async pool (process slots and drains run both)."""
    return (pool == "thread" and tf.is_async) or (pool == "async" and not tf.is_async)


def pool_mismatch(tf: Any, pool: str, queue: str) -> Outcome | None:
    """The failure of a task its pool cannot run: an ``async def`` under a thread pool, a
    plain function under an async pool. Permanent: the task waits in the error list, whole,
    until its queue is served by the right pool and an operator redoes it."""
    if not wrong_pool(tf, pool):
        return None
    if tf.is_async:
        why = (
            f"task {tf.name!r} is an async def and queue {queue!r} is served by a thread pool; "
            f"serve it with an async pool (--queue {queue}:100:async, or '{queue} = 100 async' "
            "in [queues]), then redo it"
        )
    else:
        why = (
            f"task {tf.name!r} is a plain function and queue {queue!r} is served by an async "
            f"pool, whose event loop it would block; make it an async def, or serve {queue!r} "
            "with threads, then redo it"
        )
    return _failure(tf.name, UnsupportedTask(why), permanent=True)


def run_blocking(coro: Any) -> Any:
    """Run a coroutine to its end from blocking code (a process slot, ``Worker.drain``, eager
    mode): on a fresh event loop here, or in a helper thread when this thread runs a loop
    already (a test written with asyncio). The task context (``current_run``) goes along."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    ctx = contextvars.copy_context()
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = ctx.run(asyncio.run, coro)
        except BaseException as exc:  # handed to the caller's thread as is
            box["error"] = exc

    helper = threading.Thread(target=target, name="ztq-run-coroutine")
    helper.start()
    helper.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def call(
    tf: Any,
    args: list[Any],
    kwargs: dict[str, Any],
    guard: Interruptible | None = None,
    run: object = None,
) -> Outcome:
    """Call a checked task function and classify the result. An ``async def`` runs to its
    end on a private event loop (process slots, drain and eager mode; thread pools refuse
    them first, see :func:`pool_mismatch`).

    An interrupt that arrives just after the function returned is still caught here (the
    outer ``try``), so it never escapes into the executor's own code.
    """
    try:
        if guard is not None:
            guard.enter(run)
        try:
            value = tf.fn(*args, **kwargs)
            if tf.is_async:
                value = run_blocking(value)
        finally:
            if guard is not None:
                guard.leave()
    except Retry as exc:
        return _retry(tf.name, exc)
    except (Exception, Killed) as exc:
        return _failure(tf.name, exc)
    try:
        return _returned(tf.name, value)
    except (SoftTimeout, Killed) as exc:  # pragma: no cover - a late interrupt
        return _failure(tf.name, exc)


async def acall(
    tf: Any,
    args: list[Any],
    kwargs: dict[str, Any],
    interrupted: Callable[[], BaseException | None],
) -> Outcome:
    """Await an ``async def`` task and classify the result, as :func:`call` does. A
    cancellation the pool asked for (``interrupted()`` says why: :class:`SoftTimeout`,
    :class:`Killed`) is the run's failure; any other cancellation goes on up."""
    early = interrupted()
    if early is not None:  # killed before its first step: its code never starts
        return _failure(tf.name, early)
    try:
        value = await tf.fn(*args, **kwargs)
    except Retry as exc:
        return _retry(tf.name, exc)
    except asyncio.CancelledError as exc:
        why = interrupted()
        if why is not None:
            why.__cause__ = exc
            return _failure(tf.name, why)
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # the pool itself is being cancelled (shutdown): not this run's failure
        return _failure(tf.name, exc)  # the task's code let an inner cancellation out
    except Exception as exc:
        return _failure(tf.name, exc)
    return _returned(tf.name, value)


def _retry(task: str, exc: Retry) -> Outcome:
    out = _failure(task, exc)
    out.retry_delay = exc.delay if exc.delay is not None else -1.0
    return out


def _returned(task: str, value: Any) -> Outcome:
    """The outcome of a run that returned ``value``."""
    if not_run(value):
        # registration refuses such functions; this catches one that slipped through (a
        # plain function returning a coroutine): it did not do its work, so it is no success
        return _failure(
            task,
            UnsupportedTask(
                f"task {task!r} returned {type(value).__name__} instead of running its "
                "work (an async or generator body); nothing was run"
            ),
            permanent=True,
        )
    try:
        return Outcome(ok=True, task=task, result=encode_result(value))
    except (TypeError, ValueError) as exc:  # it ran, but what it returned cannot be kept
        error = SerializationError(
            f"task {task!r} returned {type(value).__name__}, which JSON cannot encode "
            f"(ztq never pickles): {exc}; return JSON types (dict, list, str, numbers, None)"
        )
        return _failure(task, error, permanent=True)  # the same code returns the same type
