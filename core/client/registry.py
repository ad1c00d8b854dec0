"""Registered tasks: :class:`TaskFunction`, and the :class:`Registry` each app keeps of them.

``@app.task`` (or ``@task`` on the default app, :mod:`ztq.core.client.app`) builds a
``TaskFunction`` with :func:`make_task` and adds it to the app's registry; workers look
payloads' task names up in the registry of the app they serve.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from ztq.core.client.calls import (
    FAILURE_KWARGS,
    OPTION_NAMES,
    PROGRESS_KWARG,
    CallTemplate,
    TaskCall,
    check_option_names,
    check_task_name,
)
from ztq.core.client.enqueue import asend, send
from ztq.core.client.handle import TaskHandle
from ztq.core.client.keying import Keyed, KeyOf, task_keying, with_key
from ztq.core.engine.keys import check_queue, shard_for
from ztq.core.engine.queue_limits import Rate
from ztq.core.errors import (
    ConfigError,
    InvalidOption,
    UnknownTask,
    UnsupportedTask,
    WrongArguments,
)
from ztq.core.messaging.broadcast import BroadcastHandle, send_broadcast
from ztq.core.states import Priority

if TYPE_CHECKING:
    from ztq.core.client.app import App

P = ParamSpec("P")
R = TypeVar("R")


class TaskFunction(Generic[P, R]):
    """A registered task. Calling it runs the function inline; ``delay``/``enqueue`` send it."""

    def __init__(
        self,
        fn: Callable[P, R],
        *,
        app: App,
        name: str,
        queue: str,
        connection: str,
        priority: Priority,
        retries: int,
        timeout: float | None,
        unique: bool,
        batch_size: int | None,
        on_batch: Callable[[], Any] | None,
        result_ttl: float | None = None,
        shards: int | None = None,
        expires: float | None = None,
        rate_limit: Rate | None = None,
        keyed: Keyed = (None, None, None),
    ) -> None:
        self.fn = fn
        self.key, self.key_concurrency, self.key_rate = keyed  # client/keying.py
        self.expires = expires
        self.shards = shards
        self.rate_limit = rate_limit  # starts per s/m/h across the fleet (fetch.lua)
        self.result_ttl = result_ttl
        self.app = app
        self.name = name
        self.queue = queue
        self.connection = connection
        self.priority = priority
        self.retries = retries
        self.timeout = timeout
        self.unique = unique
        self.batch_size = batch_size
        self.on_batch = on_batch
        # an async def runs on an async pool's event loop; a plain def in a thread or process
        self.is_async = is_coroutine_function(fn)
        self._template: tuple[tuple[Any, ...], CallTemplate] | None = None
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    @functools.cached_property
    def signature(self) -> inspect.Signature:
        """The function's signature, computed once: :attr:`check_arguments` binds with it."""
        return inspect.signature(self.fn)

    @functools.cached_property
    def check_arguments(self) -> Callable[[tuple[Any, ...], dict[str, Any]], None]:
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
        defaults: dict[str, Any] = {
            "queue": self.queue,
            "connection": self.connection,
            "priority": self.priority,
            "retries": self.retries,
            "timeout": self.timeout,
            "unique": self.unique,
            "result_ttl": self.result_ttl,
            "shards": self.shards,
            "expires": self.expires,
            "key_concurrency": self.key_concurrency,
            "key_rate": self.key_rate,
        }
        defaults.update(options)
        call = TaskCall(self.name, tuple(args), dict(kwargs or {}), app=self.app, **defaults)
        if what != "prepare":
            self.check_arguments(call.args, call.kwargs)
        else:  # with pass_result, the parent's result will come first
            args = (None, *call.args) if call.pass_result else call.args
            partial_check(self, args, call.kwargs)
        if call.callback or call.on_failure or call.on_progress:
            check_callbacks(self.app, call)
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
        key = (self.name, self.queue, self.connection, self.priority, self.retries,
               self.timeout, self.unique, self.result_ttl, self.shards, self.expires,
               self.app)  # fmt: skip
        cached = self._template
        if cached is None or cached[0] != key:
            cached = self._template = (key, CallTemplate(self.prepare()))
        return cached[1]


def refuse_unknown_options(what: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a function whose options are keyword-only parameters (``App.task``,
    ``configure_queue``): an unknown keyword raises :class:`UnknownOption` naming the
    nearest one, not Python's bare ``TypeError``. Not for hot paths: one more call."""

    def decorate(f: Callable[P, R]) -> Callable[P, R]:
        params = inspect.signature(f).parameters.values()
        keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        accepted = frozenset(p.name for p in params if p.kind in keyword)
        options = [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]

        @functools.wraps(f)
        def checked(*args: P.args, **kwargs: P.kwargs) -> R:
            if kwargs and not accepted.issuperset(kwargs):
                check_option_names([k for k in kwargs if k not in accepted], options, what)
            return f(*args, **kwargs)

        return checked

    return decorate


def argument_check(
    name: str, sig: inspect.Signature
) -> Callable[[tuple[Any, ...], dict[str, Any]], None]:
    """The check of :attr:`TaskFunction.check_arguments`, fast for the common shapes (every
    ``fn.delay()`` runs it): for a function of plain positional parameters (and optional
    keyword-only ones) it compares counts, and, when none has a default, keyword names;
    one of ``*args, **kwargs`` takes anything; any other call, or a signature of its own
    (``ztq.core.contrib.compat``'s), asks ``sig.bind``."""

    def bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise wrong_arguments(name, sig, exc) from None

    if type(sig) is not inspect.Signature:
        return bind
    params = list(sig.parameters.values())
    kinds = [p.kind for p in params]
    if kinds == [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]:
        return lambda args, kwargs: None
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    high = sum(1 for kind in kinds if kind in positional)  # they come first
    optional = all(p.kind is p.KEYWORD_ONLY and p.default is not p.empty for p in params[high:])
    if not optional:  # *args, **kwargs or a keyword-only parameter that must be given
        return bind
    low = sum(1 for p in params[:high] if p.default is p.empty)
    by_keyword = low == high == len(params) and inspect.Parameter.POSITIONAL_ONLY not in kinds
    # the names a call with n positional arguments must give as keywords, n = 0..high
    rest = [frozenset(p.name for p in params[n:]) for n in range(high + 1)]

    def check(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        n = len(args)
        if not kwargs:
            if low <= n <= high:
                return
        elif by_keyword and n + len(kwargs) == high and rest[n].issuperset(kwargs):
            return
        bind(args, kwargs)

    return check


def partial_check(
    tf: TaskFunction[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """``bind_partial`` with the task's signature: too many arguments, an unknown or a
    repeated keyword raise :class:`WrongArguments`; missing ones may come later (a
    callback's)."""
    try:
        sig = tf.signature
    except (TypeError, ValueError):  # a callable without one: unchecked
        return
    try:
        sig.bind_partial(*args, **kwargs)
    except TypeError as exc:
        raise wrong_arguments(tf.name, sig, exc) from None


def wrong_arguments(name: str, sig: inspect.Signature, exc: TypeError) -> WrongArguments:
    """``send_mail(to, subject): missing a required argument: 'subject'``."""
    bare = [p.replace(annotation=p.empty) for p in sig.parameters.values()]
    shown = inspect.Signature(bare)  # the parameters without annotations
    return WrongArguments(f"{name}{shown}: {exc}")


def check_callbacks(app: App, call: TaskCall) -> None:
    """Bind the callbacks ``call`` carries (and theirs) as the worker will call them, when
    ``app`` knows their function: ``callback`` with the parent's result first if it
    ``pass_result``, ``on_failure`` with ``error_code`` and ``error_message``,
    ``on_progress`` with ``progress`` (for functions with a signature of their own, such as
    compat's, which spreads ``progress``, only partially)."""
    for role in ("callback", "on_failure", "on_progress"):
        cb: TaskCall | None = getattr(call, role)
        if cb is None:
            continue
        try:
            tf = app.registry.lookup(cb.task)
        except UnknownTask:  # a task of another process: its worker checks it
            tf = None
        if tf is not None:
            args, kwargs = cb.args, cb.kwargs
            if role == "callback" and cb.pass_result:
                args = (None, *args)
            elif role == "on_failure":
                kwargs = {**kwargs, **dict.fromkeys(FAILURE_KWARGS, "")}
            if role != "on_progress":
                tf.check_arguments(args, kwargs)
            elif type(tf.signature) is inspect.Signature:
                tf.check_arguments(args, {**kwargs, PROGRESS_KWARG: {}})
            else:
                partial_check(tf, args, kwargs)
        check_callbacks(app, cb)


def make_task(
    app: App,
    f: Callable[..., Any],
    *,
    queue: str,
    name: str | None,
    connection: str,
    priority: Priority | str,
    retries: int,
    timeout: float | None,
    unique: bool,
    batch_size: int | None,
    on_batch: Callable[[], Any] | None,
    result_ttl: float | None = None,
    shards: int | None = None,
    expires: float | None = None,
    rate_limit: str | None = None,
    key: str | KeyOf | None = None,
    concurrency: int | None = None,
) -> TaskFunction[Any, Any]:
    """Check a function and its options and wrap it as a task of ``app`` (not registered)."""
    keyed, rate = task_keying(key, concurrency, rate_limit)  # refused at the decorator
    task_name = check_task_name(name or f"{f.__module__}.{f.__qualname__}".replace(".<locals>", ""))
    check_runnable(f, task_name)
    check_queue(queue)
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        raise InvalidOption(f"batch_size must be an int >= 1, not {batch_size!r}")
    if on_batch is not None and not callable(on_batch):
        raise InvalidOption("on_batch must be callable")
    # validates priority, retries and timeout the same way enqueue does
    probe = TaskCall(task_name, queue=queue, priority=priority, retries=retries, timeout=timeout,
                     result_ttl=result_ttl, shards=shards, expires=expires)  # fmt: skip
    return TaskFunction(
        f,
        app=app,
        name=task_name,
        queue=queue,
        connection=connection,
        priority=probe.priority,
        retries=retries,
        timeout=probe.timeout,
        unique=unique,
        batch_size=batch_size,
        on_batch=on_batch,
        result_ttl=probe.result_ttl,
        shards=shards,
        expires=probe.expires,
        rate_limit=rate,
        keyed=keyed,
    )


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


def origin(f: Callable[..., Any]) -> str:
    code = getattr(f, "__code__", None)
    where = f"{code.co_filename}:{code.co_firstlineno}" if code else ""
    return f"{f.__module__}.{getattr(f, '__qualname__', f)} {where}".strip()
