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

from ztq.core.client.calls import CallTemplate, TaskCall, check_task_name, ztq_option_error
from ztq.core.client.enqueue import asend, send
from ztq.core.client.handle import TaskHandle
from ztq.core.engine.keys import check_queue, shard_for
from ztq.core.errors import ConfigError, InvalidOption, UnknownTask, UnsupportedTask
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
    ) -> None:
        self.fn = fn
        self.shards = shards
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
        """The function's signature, computed once: workers check arguments with it."""
        return inspect.signature(self.fn)

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
        ``retries``, ``result_ttl``, ``shards``, ``pass_result`` (as a callback: the parent's result
        comes first in its arguments), ``replicas`` (wait for that many replicas to confirm
        the enqueue: docs/scaling.md). Unknown names raise ``TypeError``.
        """
        defaults: dict[str, Any] = {
            "queue": self.queue,
            "connection": self.connection,
            "priority": self.priority,
            "retries": self.retries,
            "timeout": self.timeout,
            "unique": self.unique,
            "result_ttl": self.result_ttl,
            "shards": self.shards,
        }
        defaults.update(options)
        try:
            return TaskCall(self.name, tuple(args), dict(kwargs or {}), app=self.app, **defaults)
        except TypeError:  # an unknown option: ZTQ's ztq_* names get a message that helps
            for name in options:
                if name.startswith("ztq_"):
                    raise ztq_option_error(name) from None
            raise

    def enqueue(
        self,
        args: tuple[Any, ...] | list[Any] = (),
        kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> TaskHandle[R]:
        """Send one call with options (see :meth:`prepare`); returns its handle."""
        return send(self.prepare(args, kwargs, **options))

    async def aenqueue(
        self,
        args: tuple[Any, ...] | list[Any] = (),
        kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> TaskHandle[R]:
        """:meth:`enqueue` from a coroutine (``redis.asyncio``, the same script)."""
        return await asend(self.prepare(args, kwargs, **options))

    async def adelay(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]:
        """:meth:`delay` from a coroutine: never blocks the event loop."""
        return await asend(self.prepare(args, kwargs))

    def broadcast(self, *args: P.args, **kwargs: P.kwargs) -> BroadcastHandle:
        """Run the task once on every live worker that serves its queue (reload a config,
        clear a local cache); the handle lists and waits for each worker's run. Workers
        that start later do not run it (see ``App.broadcast_catch_up``, docs/channels.md)."""
        return send_broadcast(self.prepare(args, kwargs))

    def handle(self, task_id: str) -> TaskHandle[R]:
        """The handle of a task of this function from its id (its queue, or the shard of the
        queue the id lives in, connection and app), e.g. in a later request; ``outcome`` is
        '' (no enqueue made it)."""
        shards = self.shards or self.app.registry.shards(self.queue)
        queue = shard_for(self.queue, task_id, shards)
        return TaskHandle(task_id, queue, self.connection, "", self.app)

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]:
        """Send one call now with the task's default options."""
        return send(self.template().call(args, kwargs))

    def template(self) -> CallTemplate:
        """The call of this task with its default options, prepared once (rebuilt when an
        option of the task changed): what :meth:`delay` fills with arguments."""
        key = (self.name, self.queue, self.connection, self.priority, self.retries,
               self.timeout, self.unique, self.result_ttl, self.shards, self.app)  # fmt: skip
        cached = self._template
        if cached is None or cached[0] != key:
            cached = self._template = (key, CallTemplate(self.prepare()))
        return cached[1]


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
) -> TaskFunction[Any, Any]:
    """Check a function and its options and wrap it as a task of ``app`` (not registered)."""
    task_name = check_task_name(name or f"{f.__module__}.{f.__qualname__}".replace(".<locals>", ""))
    check_runnable(f, task_name)
    check_queue(queue)
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        raise InvalidOption(f"batch_size must be an int >= 1, not {batch_size!r}")
    if on_batch is not None and not callable(on_batch):
        raise InvalidOption("on_batch must be callable")
    # validates priority, retries and timeout the same way enqueue does
    probe = TaskCall(task_name, queue=queue, priority=priority, retries=retries, timeout=timeout,
                     result_ttl=result_ttl, shards=shards)  # fmt: skip
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
