"""Registered tasks: :class:`TaskFunction`, and the :class:`Registry` each app keeps of them.

``@app.task`` (or ``@task`` on the default app, :mod:`ztq.core.client.app`) turns its
keywords into the task's :class:`~ztq.core.client.options.TaskOptions`, builds a
``TaskFunction`` with them and adds it to the app's registry; workers look payloads' task
names up in the registry of the app they serve.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, overload

from ztq.core.client.apps import origin
from ztq.core.client.binding import (
    ArgumentCheck,
    argument_check,
    check_callbacks,
    partial_check,
    with_key,
)
from ztq.core.client.calls import CallTemplate, TaskCall, check_task_name
from ztq.core.client.enqueue import asend, send
from ztq.core.client.handle import TaskHandle
from ztq.core.client.options import OPTION_NAMES, KeyOf, TaskOptions, check_option_names
from ztq.core.engine.keys import shard_for
from ztq.core.engine.queue_limits import Rate
from ztq.core.errors import ConfigError, InvalidOption, UnknownTask, UnsupportedTask
from ztq.core.messaging.broadcast import BroadcastHandle, send_broadcast
from ztq.core.states import Priority

if TYPE_CHECKING:
    from ztq.core.client.app import App

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class Option(Generic[T]):
    """A task's default option, read from its :class:`TaskOptions` (``fn.queue``); setting
    one gives the task new options, checked (and a new template for ``delay``)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, tf: None, owner: type) -> Option[T]: ...
    @overload
    def __get__(self, tf: TaskFunction[Any, Any], owner: type) -> T: ...
    def __get__(self, tf: TaskFunction[Any, Any] | None, owner: type) -> Any:
        return self if tf is None else getattr(tf.options, self.name)

    def __set__(self, tf: TaskFunction[Any, Any], value: T) -> None:
        # the field is named at run time: TaskOptions checks the value (T is its type)
        changes: dict[str, Any] = {self.name: value}
        tf.options = replace(tf.options, **changes)


class TaskFunction(Generic[P, R]):
    """A registered task. Calling it runs the function inline; ``delay``/``enqueue`` send it
    with its :attr:`options` (``@task(...)``'s), changed by the ones a call names."""

    queue = Option[str]()
    connection = Option[str]()
    priority = Option[Priority]()
    retries = Option[int]()
    timeout = Option[float | None]()
    unique = Option[bool]()
    result_ttl = Option[float | None]()
    shards = Option[int | None]()
    expires = Option[float | None]()
    key_concurrency = Option[int | None]()
    key_rate = Option[str | None]()

    def __init__(
        self,
        fn: Callable[P, R],
        *,
        app: App,
        options: TaskOptions,
        name: str | None = None,
        key: str | KeyOf | None = None,
        rate_limit: Rate | None = None,
        batch_size: int | None = None,
        on_batch: Callable[[], Any] | None = None,
    ) -> None:
        """Check a function (one whose call runs its body: ``check_runnable``) and what the
        task adds to its options: its name (default: ``module.qualname``), its key
        (client/binding.py), its own rate limit and its batch hook."""
        self.name = check_task_name(
            name or f"{fn.__module__}.{fn.__qualname__}".replace(".<locals>", "")
        )
        check_runnable(fn, self.name)
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise InvalidOption(f"batch_size must be an int >= 1, not {batch_size!r}")
        if on_batch is not None and not callable(on_batch):
            raise InvalidOption("on_batch must be callable")
        self.fn, self.app, self.options = fn, app, options
        self.key = key  # the argument (or callable) each call's key comes from
        self.rate_limit = rate_limit  # starts per s/m/h across the fleet (fetch.lua)
        self.batch_size, self.on_batch = batch_size, on_batch
        # an async def runs on an async pool's event loop; a plain def in a thread or process
        self.is_async = is_coroutine_function(fn)
        self._template: tuple[TaskOptions, App, str, CallTemplate] | None = None
        self._changed: tuple[TaskOptions, dict[str, Any]] | None = None
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    @functools.cached_property
    def signature(self) -> inspect.Signature:
        """The function's signature, computed once: :attr:`check_arguments` binds with it."""
        return inspect.signature(self.fn)

    @functools.cached_property
    def check_arguments(self) -> ArgumentCheck:
        """``check_arguments(args, kwargs)``: raise :class:`WrongArguments` unless the call
        binds to the function's signature as ``inspect.Signature.bind`` binds it. The one
        check of both sides: ``delay``/``enqueue`` run it before anything is sent, the worker
        before the run (for calls made without the function, ``TaskCall(name, ...)``)."""
        try:
            sig = self.signature
        except (TypeError, ValueError):  # a callable without one (some builtins): unchecked
            return lambda args, kwargs: None
        return argument_check(self.name, sig)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<task {self.name} queue={self.queue}>"

    def prepare(
        self,
        args: tuple[Any, ...] | list[Any] = (),
        kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> TaskCall:
        """A call of this task with options, to enqueue later or use as a callback.

        Options: ``queue``, ``connection``, ``priority``, ``delay``, ``eta``, ``first``,
        ``unique``, ``id``, ``callback``, ``on_failure``, ``on_progress``, ``timeout``,
        ``retries``, ``result_ttl``, ``expires``, ``shards``, ``pass_result`` (as a callback:
        the parent's result comes first in its arguments), ``replicas`` (wait for that many
        replicas to confirm the enqueue: docs/scaling.md), ``meta``. An unknown name raises
        :class:`~ztq.core.errors.UnknownOption` naming the nearest one.

        A prepared call may become a callback that the worker gives more arguments (the
        parent's result first with ``pass_result``, ``error_code``/``error_message`` as
        ``on_failure``, ``progress`` as ``on_progress``), so arguments are bound partially
        here: too many, an unknown keyword or one given twice raise
        :class:`~ztq.core.errors.WrongArguments`, a missing one does not. ``enqueue`` binds
        in full, and binds the callbacks it carries with what the worker will add.
        """
        return self._prepare(args, kwargs, options, "prepare")

    def _prepare(
        self,
        args: tuple[Any, ...] | list[Any],
        kwargs: dict[str, Any] | None,
        options: dict[str, Any],
        what: str,
    ) -> TaskCall:
        """The checked call: args and kwargs types, option names, arguments (in full, but
        for ``prepare``: partially), callbacks as the worker will call them."""
        if not isinstance(args, (tuple, list)):
            raise InvalidOption(
                f"args must be a tuple or list of arguments, not {type(args).__name__} {args!r}"
            )
        if kwargs is not None and not isinstance(kwargs, dict):
            raise InvalidOption(
                f"kwargs must be a dict of keyword arguments, not {type(kwargs).__name__} "
                f"{kwargs!r}"
            )
        if options and not OPTION_NAMES.issuperset(options):
            check_option_names(options, OPTION_NAMES, what)
        changed = self._changed  # the task's options, by name, worked out once
        if changed is None or changed[0] is not self.options:
            changed = self._changed = (self.options, self.options.changed())
        given = {**changed[1], **options} if options else changed[1]
        call = TaskCall(self.name, tuple(args), dict(kwargs or {}), app=self.app, **given)
        if what != "prepare":
            self.check_arguments(call.args, call.kwargs)
        else:  # with pass_result, the parent's result will come first
            args = (None, *call.args) if call.pass_result else call.args
            partial_check(self, args, call.kwargs)
        if call.callback or call.on_failure or call.on_progress:
            check_callbacks(self.app.registry.lookup, call)
        call = with_key(self, call, partial=what == "prepare")
        return call

    def enqueue(
        self,
        args: tuple[Any, ...] | list[Any] = (),
        kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> TaskHandle[R]:
        """Send one call with options (see :meth:`prepare`); returns its handle. Nothing is
        sent when the arguments do not bind to the function (``WrongArguments``)."""
        return send(self._prepare(args, kwargs, options, "enqueue"))

    async def aenqueue(
        self,
        args: tuple[Any, ...] | list[Any] = (),
        kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> TaskHandle[R]:
        """:meth:`enqueue` from a coroutine (``redis.asyncio``, the same script)."""
        return await asend(self._prepare(args, kwargs, options, "aenqueue"))

    async def adelay(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]:
        """:meth:`delay` from a coroutine: never blocks the event loop."""
        return await asend(self._prepare(args, kwargs, {}, "adelay"))

    def broadcast(self, *args: P.args, **kwargs: P.kwargs) -> BroadcastHandle:
        """Run the task once on every live worker that serves its queue (reload a config,
        clear a local cache); the handle lists and waits for each worker's run. Workers
        that start later do not run it (see ``App.broadcast_catch_up``, docs/channels.md)."""
        return send_broadcast(self._prepare(args, kwargs, {}, "broadcast"))

    def handle(self, task_id: str) -> TaskHandle[R]:
        """The handle of a task of this function from its id (its queue, or the shard of the
        queue the id lives in, connection and app), e.g. in a later request; ``outcome`` is
        '' (no enqueue made it)."""
        shards = self.shards or self.app.registry.shards(self.queue)
        queue = shard_for(self.queue, task_id, shards)
        return TaskHandle(task_id, queue, self.connection, "", self.app)

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]:
        """Send one call now with the task's default options (its arguments checked as
        :meth:`enqueue` checks them)."""
        call = self.template().call(args, kwargs)
        self.check_arguments(args, kwargs)
        return send(with_key(self, call))

    def template(self) -> CallTemplate:
        """The call of this task with its default options, prepared once (rebuilt when an
        option of the task changed): what :meth:`delay` fills with arguments."""
        cached = self._template
        if (cached is None or cached[0] is not self.options or cached[1] is not self.app
                or cached[2] != self.name):  # fmt: skip
            cached = self._template = (self.options, self.app, self.name,
                                       CallTemplate(self.prepare()))  # fmt: skip
        return cached[3]


class Registry:
    """Task name → task, for one app. A name is one function: registering another function
    under a taken name is an error (re-importing the same module is not)."""

    def __init__(self) -> None:
        self._tasks: dict[str, TaskFunction[Any, Any]] = {}
        self._shards: dict[str, tuple[int, str]] = {}  # queue -> (shards, task declaring it)
        self._lock = threading.Lock()

    def add(self, tf: TaskFunction[Any, Any]) -> None:
        with self._lock:
            old = self._tasks.get(tf.name)
            if old is not None and origin(old.fn) != origin(tf.fn):
                raise ConfigError(
                    f"task name {tf.name!r} is taken by {origin(old.fn)}; give name=..."
                )
            declared = self._shards.get(tf.queue)
            if tf.shards is not None and declared and declared[0] != tf.shards:
                # two counts for one queue would put one id in two shards: dedup would break
                raise ConfigError(
                    f"task {tf.name!r} gives queue {tf.queue!r} {tf.shards} shards, but task "
                    f"{declared[1]!r} gave it {declared[0]}; every task of a queue must agree"
                )
            self._tasks[tf.name] = tf
            if tf.shards is not None:
                self._shards[tf.queue] = (tf.shards, tf.name)

    def shards(self, queue: str) -> int:
        """The shard count the tasks of ``queue`` declare (1 when none does)."""
        declared = self._shards.get(queue)
        return declared[0] if declared else 1

    def rates(self, queue: str) -> dict[str, Rate | None]:
        """The rate limit of each task of ``queue`` (None: it has none)."""
        with self._lock:
            return {n: tf.rate_limit for n, tf in self._tasks.items() if tf.queue == queue}

    def remove(self, name: str) -> None:
        with self._lock:
            tf = self._tasks.pop(name, None)
            if tf is not None and self._shards.get(tf.queue, (0, ""))[1] == name:
                del self._shards[tf.queue]
                for other in self._tasks.values():  # another task may declare it too
                    if other.queue == tf.queue and other.shards is not None:
                        self._shards[tf.queue] = (other.shards, other.name)
                        break

    def lookup(self, name: str) -> TaskFunction[Any, Any]:
        """The task called ``name``, or :class:`UnknownTask`."""
        with self._lock:
            tf = self._tasks.get(name)
        if tf is None:
            raise UnknownTask(f"task {name!r} is not registered in this worker (check its imports)")
        return tf

    def all(self) -> dict[str, TaskFunction[Any, Any]]:
        with self._lock:
            return dict(self._tasks)


def is_coroutine_function(f: Callable[..., Any]) -> bool:
    """``async def``, or a callable whose ``__call__`` is one: its call returns a coroutine."""
    target = f if inspect.isfunction(f) or inspect.ismethod(f) else type(f).__call__
    return inspect.iscoroutinefunction(f) or inspect.iscoroutinefunction(target)


def check_runnable(f: Callable[..., Any], name: str) -> None:
    """Refuse functions whose call does not run their body: the worker would count them done.

    Generator and async generator functions return an iterator instead of doing their work,
    and nothing in a worker iterates it. ``async def`` functions are tasks of async pools
    (``--queue crawl:200:async``), see docs/asyncio.md.
    """
    if not callable(f):
        raise InvalidOption(f"task {name!r}: {f!r} is not callable")
    target = f if inspect.isfunction(f) or inspect.ismethod(f) else type(f).__call__
    if inspect.isasyncgenfunction(f) or inspect.isasyncgenfunction(target):
        kind = "an async generator function"
    elif inspect.isgeneratorfunction(f) or inspect.isgeneratorfunction(target):
        kind = "a generator function (its body runs only when iterated)"
    else:
        return
    raise UnsupportedTask(
        f"task {name!r} is {kind}: calling it would not run its body, and a worker never "
        "iterates what a task returns; make it a plain def or an async def that returns a list"
    )
