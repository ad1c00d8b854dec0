"""``@task``: registering functions under stable names, and looking them up in workers."""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any, Generic, ParamSpec, TypeVar, overload

from ztq.core.calls import TaskCall, check_task_name
from ztq.core.errors import ConfigError, InvalidOption, UnknownTask, UnsupportedTask
from ztq.core.handle import TaskHandle
from ztq.core.keys import check_queue
from ztq.core.states import Priority

P = ParamSpec("P")
R = TypeVar("R")

_registry: dict[str, TaskFunction[Any, Any]] = {}
_lock = threading.Lock()


class TaskFunction(Generic[P, R]):
    """A registered task. Calling it runs the function inline; ``delay``/``enqueue`` send it."""

    def __init__(
        self,
        fn: Callable[P, R],
        *,
        name: str,
        queue: str,
        connection: str,
        priority: Priority,
        retries: int,
        timeout: float | None,
        unique: bool,
        batch_size: int | None,
        on_batch: Callable[[], Any] | None,
    ) -> None:
        self.fn = fn
        self.name = name
        self.queue = queue
        self.connection = connection
        self.priority = priority
        self.retries = retries
        self.timeout = timeout
        self.unique = unique
        self.batch_size = batch_size
        self.on_batch = on_batch
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
        ``retries``. Unknown names raise ``TypeError``.
        """
        defaults: dict[str, Any] = {
            "queue": self.queue,
            "connection": self.connection,
            "priority": self.priority,
            "retries": self.retries,
            "timeout": self.timeout,
            "unique": self.unique,
        }
        defaults.update(options)
        return TaskCall(self.name, tuple(args), dict(kwargs or {}), **defaults)

    def enqueue(
        self,
        args: tuple[Any, ...] | list[Any] = (),
        kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> TaskHandle:
        """Send one call with options (see :meth:`prepare`); returns its handle."""
        return self.prepare(args, kwargs, **options).enqueue()

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle:
        """Send one call now with the task's default options."""
        return self.prepare(args, kwargs).enqueue()


@overload
def task(fn: Callable[P, R], /) -> TaskFunction[P, R]: ...
@overload
def task(
    fn: None = None,
    /,
    *,
    queue: str = "default",
    name: str | None = None,
    connection: str = "default",
    priority: Priority | str = Priority.NORMAL,
    retries: int = 0,
    timeout: float | None = None,
    unique: bool = True,
    cron: str | None = None,
    batch_size: int | None = None,
    on_batch: Callable[[], Any] | None = None,
) -> Callable[[Callable[P, R]], TaskFunction[P, R]]: ...


def task(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    queue: str = "default",
    name: str | None = None,
    connection: str = "default",
    priority: Priority | str = Priority.NORMAL,
    retries: int = 0,
    timeout: float | None = None,
    unique: bool = True,
    cron: str | None = None,
    batch_size: int | None = None,
    on_batch: Callable[[], Any] | None = None,
) -> Any:
    """Register a function as a task, by default as ``module.qualname`` on queue ``default``.

    ``cron="*/5 * * * *"`` also schedules it (no arguments); ``batch_size`` with
    ``on_batch`` calls ``on_batch()`` after that many runs or when the queue runs dry.
    """

    def register(f: Callable[..., Any]) -> TaskFunction[Any, Any]:
        task_name = check_task_name(
            name or f"{f.__module__}.{f.__qualname__}".replace(".<locals>", "")
        )
        check_runnable(f, task_name)
        check_queue(queue)
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise InvalidOption(f"batch_size must be an int >= 1, not {batch_size!r}")
        if on_batch is not None and not callable(on_batch):
            raise InvalidOption("on_batch must be callable")
        # validates priority, retries and timeout the same way enqueue does
        probe = TaskCall(
            task_name, queue=queue, priority=priority, retries=retries, timeout=timeout
        )
        tf: TaskFunction[Any, Any] = TaskFunction(
            f,
            name=task_name,
            queue=queue,
            connection=connection,
            priority=probe.priority,
            retries=retries,
            timeout=probe.timeout,
            unique=unique,
            batch_size=batch_size,
            on_batch=on_batch,
        )
        with _lock:
            old = _registry.get(task_name)
            if old is not None and _origin(old.fn) != _origin(f):
                raise ConfigError(
                    f"task name {task_name!r} is taken by {_origin(old.fn)}; give name=..."
                )
            _registry[task_name] = tf
        if cron is not None:
            from ztq.core.cron import add_cron

            add_cron(tf.prepare(), cron, name=task_name)
        return tf

    if fn is not None:
        return register(fn)
    return register


def check_runnable(f: Callable[..., Any], name: str) -> None:
    """Refuse functions whose call does not run their body: the worker would count them done.

    ``async def`` (coroutine and async generator functions) and generator functions return
    an object instead of doing their work; a thread-pool worker cannot drive them.
    """
    if not callable(f):
        raise InvalidOption(f"task {name!r}: {f!r} is not callable")
    # an instance with an async __call__ is a callable whose call returns a coroutine
    target = f if inspect.isfunction(f) or inspect.ismethod(f) else type(f).__call__
    if inspect.iscoroutinefunction(f) or inspect.iscoroutinefunction(target):
        kind = "an async def (coroutine) function"
    elif inspect.isasyncgenfunction(f) or inspect.isasyncgenfunction(target):
        kind = "an async generator function"
    elif inspect.isgeneratorfunction(f) or inspect.isgeneratorfunction(target):
        kind = "a generator function (its body runs only when iterated)"
    else:
        return
    raise UnsupportedTask(
        f"task {name!r} is {kind}: ztq workers run plain functions in threads, and calling it "
        "would not run its body; make it a plain def (e.g. wrap the coroutine with "
        "asyncio.run, or return a list)"
    )


def _origin(f: Callable[..., Any]) -> str:
    code = getattr(f, "__code__", None)
    where = f"{code.co_filename}:{code.co_firstlineno}" if code else ""
    return f"{f.__module__}.{getattr(f, '__qualname__', f)} {where}".strip()


def lookup(name: str) -> TaskFunction[Any, Any]:
    """The registered task called ``name``, or :class:`UnknownTask`."""
    with _lock:
        tf = _registry.get(name)
    if tf is None:
        raise UnknownTask(f"task {name!r} is not registered in this worker (check its imports)")
    return tf


def registered() -> dict[str, TaskFunction[Any, Any]]:
    with _lock:
        return dict(_registry)
