"""ZTQ's API on ztq: the names ZTQ code calls, mapped onto today's API.

A ZTQ application moves in two steps (``docs/migrating-from-ztq.md``): first its imports
point here and it runs unchanged but for one name, then its modules move to ztq's own API
one at a time, both kinds of task living side by side meanwhile.

    from ztq.core.contrib import compat as ztq_core        # was: import ztq_core
    from ztq.core.contrib.compat import async_             # was: from ztq_core import async

    @async_(queue="mail")                          # was: @async(queue='mail')
    def send(body): ...

    send("hello", ztq_first=True)                  # calling it enqueues, as in ZTQ

``async`` is a keyword in Python 3, so ``ztq_core.async`` cannot be spelled: ``async_``
replaces it (ztq's own name is ``ztq.core.task``, whose call runs the function and whose
``delay`` enqueues). ZTQ's ``ztq_*`` keywords become ztq's options: ``ztq_queue`` ->
``queue``, ``ztq_first`` -> ``first``, ``ztq_callback`` -> ``callback``, ``ztq_fcallback``
-> ``on_failure``, ``ztq_pcallback`` -> ``on_progress``, ``ztq_transaction`` -> whether the
call joins the transaction, ``ztq_system`` -> ``connection``.

Callbacks keep ZTQ's arguments. ztq's ``on_failure`` passes ``error_code=<type>,
error_message=<message>`` and ``on_progress`` passes ``progress=<dict>``; a task declared
with :func:`async_` receives what ZTQ's worker passed instead: ``return_code`` and
``return_msg`` as keywords after its own arguments (ZTQ's ``ztq_worker/job_thread.py``;
positionally when the function has no parameters of those names), and the progress data as
keywords. A task declared with ``@task`` gets ztq's keywords.

``report_progress`` and ``report_job`` act on the task the calling thread runs in a worker
(``ztq.worker.context``); outside a worker, where ``ztq.worker`` is not even loaded, they do
nothing and return False, as ztq's own do outside a run. This module never imports
``ztq.worker`` (core imports neither the worker nor the console): it uses the worker's run
context only when the worker already loaded it.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ztq.core.client.app import App, default_app
from ztq.core.client.calls import TaskCall
from ztq.core.client.enqueue import send
from ztq.core.client.handle import TaskHandle
from ztq.core.client.options import ZTQ_OPTIONS, ztq_option_error
from ztq.core.client.registry import TaskFunction, is_coroutine_function
from ztq.core.engine.connection import make_client
from ztq.core.engine.keys import shard_for
from ztq.core.engine.storage import Storage
from ztq.core.errors import InvalidOption, UnsupportedTask
from ztq.core.monitor.queues import run_first

if TYPE_CHECKING:
    from ztq.core.client.cron import CronEntry

__all__ = [
    "ZtqTask",
    "add_cron",
    "async_",
    "enable_transaction",
    "has_cron",
    "ping_task",
    "prepare_task",
    "remove_cron",
    "report_job",
    "report_progress",
    "setup_redis",
]

# ZTQ's has_task words for ztq's states (ZTQ had no delayed tasks and kept no finished ones)
PING_WORDS = {
    "queued": "queue",
    "overflow": "queue",
    "delayed": "queue",
    "running": "running",
    "error": "error",
    "done": "none",
    "none": "none",
}
CALL_OPTIONS = ("ztq_queue", "ztq_first", "ztq_callback", "ztq_fcallback", "ztq_pcallback",
                "ztq_system", "ztq_buffer")  # fmt: skip
SETUP_REDIS_OPTIONS = ("password", "username")


# -- declaring tasks -------------------------------------------------------------------------
class ZtqTask:
    """A task declared with :func:`async_`: calling it enqueues it, as ZTQ's ``@async`` did.

    ``task`` is the registered :class:`~ztq.core.client.registry.TaskFunction` (``delay``,
    ``enqueue``, ``prepare`` and ``handle`` are its); ``__raw__`` is the function as written,
    to run it inline (ZTQ's name).
    """

    def __init__(self, tf: TaskFunction[Any, Any], raw: Callable[..., Any]) -> None:
        self.task = tf
        self.__raw__ = raw
        functools.update_wrapper(self, raw)

    @property
    def name(self) -> str:
        return self.task.name

    @property
    def _ztq_queue(self) -> str:  # ZTQ's attribute
        return self.task.queue

    def __call__(self, *args: Any, **kwargs: Any) -> TaskHandle[Any]:
        """Enqueue (ZTQ's call): ZTQ's ``ztq_*`` keywords are options, the others arguments."""
        call, join = _call(self.task, args, kwargs, joinable=True)
        return send(call, join=join)

    def delay(self, *args: Any, **kwargs: Any) -> TaskHandle[Any]:
        return self.task.delay(*args, **kwargs)

    def enqueue(self, *args: Any, **kwargs: Any) -> TaskHandle[Any]:
        return self.task.enqueue(*args, **kwargs)

    def prepare(self, *args: Any, **kwargs: Any) -> TaskCall:
        return self.task.prepare(*args, **kwargs)

    def handle(self, task_id: str) -> TaskHandle[Any]:
        return self.task.handle(task_id)

    def __repr__(self) -> str:
        return f"<ZTQ task {self.task.name} queue={self.task.queue}>"


def async_(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    queue: str = "default",
    app: App | None = None,
    **options: Any,
) -> Any:
    """ZTQ's ``@async`` / ``@async(queue='mail')`` (``async`` is a keyword in Python 3).

    Registers the function as a task of ``app`` (default: the default app) on ``queue``,
    named as ``@task`` names it (``module.qualname``; ZTQ used the bare function name), with
    any other option of :meth:`ztq.core.App.task` (``retries``, ``timeout``, ``name``, ...).
    Returns a :class:`ZtqTask`: calling it enqueues. The task takes ZTQ's callback arguments
    (``return_code``, ``return_msg``, progress data as keywords) when ztq calls it back.
    """

    def declare(f: Callable[..., Any]) -> ZtqTask:
        if is_coroutine_function(f):
            raise UnsupportedTask(
                f"{getattr(f, '__qualname__', f)} is an async def: ZTQ had none; declare it "
                "with ztq.core.task and serve it with an async pool (docs/asyncio.md)"
            )
        tf = (app or default_app()).task(queue=queue, **options)(ztq_arguments(f))
        return ZtqTask(tf, f)

    return declare(fn) if fn is not None else declare


class ZtqSignature(inspect.Signature):
    """The signature of a task declared with :func:`async_`: the function's own, whose
    ``bind`` (what a worker checks a payload's arguments with) first turns ztq's callback
    keywords into ZTQ's, exactly as the call will."""

    __slots__ = ("translate",)
    translate: Callable[[tuple[Any, ...], dict[str, Any]], tuple[tuple[Any, ...], dict[str, Any]]]

    def bind(self, /, *args: Any, **kwargs: Any) -> inspect.BoundArguments:
        args, kwargs = self.translate(args, kwargs)
        return super().bind(*args, **kwargs)


def ztq_arguments(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` taking ztq's callback keywords the way ZTQ passed them.

    ``error_code`` / ``error_message`` (both: ztq's ``on_failure``) become ZTQ's
    ``return_code`` / ``return_msg``: keywords when ``fn`` has parameters of those names or
    ``**kwargs``, else two more positional arguments. ``progress={...}`` (ztq's
    ``on_progress``) is spread into keywords. A function that declares ``error_code`` or
    ``progress`` itself gets them as ztq sends them.
    """
    sig = inspect.signature(fn)
    params = sig.parameters
    own_error = "error_code" in params or "error_message" in params
    own_progress = "progress" in params
    if own_error and own_progress:
        return fn
    by_name = any(p.kind is p.VAR_KEYWORD for p in params.values()) or (
        "return_code" in params and "return_msg" in params
    )

    def translate(
        args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if not own_error and "error_code" in kwargs and "error_message" in kwargs:
            kwargs = dict(kwargs)
            code, message = kwargs.pop("error_code"), kwargs.pop("error_message")
            text = f"{code}: {message}" if message else str(code)  # a traceback's last line
            if by_name:
                kwargs.update(return_code=code, return_msg=text)
            else:
                args = (*args, code, text)
        if not own_progress and isinstance(kwargs.get("progress"), dict):
            kwargs = dict(kwargs)
            kwargs.update(kwargs.pop("progress"))
        return args, kwargs

    @functools.wraps(fn)
    def with_ztq_arguments(*args: Any, **kwargs: Any) -> Any:
        args, kwargs = translate(args, kwargs)
        return fn(*args, **kwargs)

    signature = ZtqSignature(list(params.values()), return_annotation=sig.return_annotation)
    signature.translate = translate
    with_ztq_arguments.__signature__ = signature  # type: ignore[attr-defined]
    return with_ztq_arguments


def _task(func: Any) -> TaskFunction[Any, Any]:
    """The registered task behind what ZTQ code passes: a ZtqTask, a TaskFunction, or a task
    name (``'queue:name'`` as ZTQ wrote it, or ztq's name)."""
    if isinstance(func, ZtqTask):
        return func.task
    if isinstance(func, TaskFunction):
        return func
    if isinstance(func, str):
        name = func.rsplit(":", 1)[-1]
        tasks = default_app().registered()
        if name in tasks:
            return tasks[name]
        ends = sorted(n for n in tasks if n.rsplit(".", 1)[-1] == name)
        if len(ends) == 1:  # ZTQ's bare function name
            return tasks[ends[0]]
        if ends:
            raise InvalidOption(f"{name} is the name of {', '.join(ends)}: give the full one")
        raise InvalidOption(f"no task named {func!r} in the default app")
    raise InvalidOption(
        f"{func!r} is not a task: declare it with async_ (or ztq.core.task) before using it"
    )


def _callback(value: Any, option: str) -> TaskCall | None:
    """A callback as ZTQ code gives it: prepare_task(...) (a TaskCall), or ZTQ's own tuple
    (func, args, kwargs); None and '' for none."""
    if value is None or value == "":
        return None
    if isinstance(value, TaskCall):
        return value
    if isinstance(value, tuple) and len(value) == 3:
        func, args, kwargs = value
        return prepare_task(func, *args, **dict(kwargs))
    raise InvalidOption(f"{option} must be prepare_task(func, ...), not {value!r}")


def _call(
    tf: TaskFunction[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any], *, joinable: bool
) -> tuple[TaskCall, bool | None]:
    """A call of ``tf`` with ZTQ's ``ztq_*`` keywords turned into options, and whether it
    joins the transaction (``ztq_transaction``; None: the app's policy)."""
    options: dict[str, Any] = {}
    join: bool | None = None
    plain = {}
    for key, value in kwargs.items():
        if key[:4] != "ztq_":
            plain[key] = value
        elif key == "ztq_queue":
            options["queue"] = value
        elif key == "ztq_first":
            options["first"] = bool(value)
        elif key in ("ztq_callback", "ztq_fcallback", "ztq_pcallback"):
            option = {"ztq_callback": "callback", "ztq_fcallback": "on_failure",
                      "ztq_pcallback": "on_progress"}[key]  # fmt: skip
            options[option] = _callback(value, key)
        elif key == "ztq_system":
            options["connection"] = value
        elif key == "ztq_buffer":
            if value:
                raise InvalidOption(
                    "ztq_buffer=True: ztq has no buffer queues; enqueue directly (a queue "
                    "has no length limit)"
                )
        elif key == "ztq_transaction" and joinable:
            join = bool(value)
        else:
            known = ", ".join(CALL_OPTIONS + (("ztq_transaction",) if joinable else ()))
            if key in ZTQ_OPTIONS:
                raise InvalidOption(f"{key} has no meaning here; options of a call: {known}")
            raise ztq_option_error(key)
    return tf.prepare(args, plain, **options), join


# -- calls -----------------------------------------------------------------------------------
def prepare_task(func: Any, *args: Any, **kwargs: Any) -> TaskCall:
    """ZTQ's ``prepare_task(func, *args, **kw)``: a call to give as ``ztq_callback``,
    ``ztq_fcallback`` or ``ztq_pcallback`` (or to enqueue: ``call.enqueue()``); ``ztq_queue``
    and the callback keywords of ZTQ are its options."""
    call, _ = _call(_task(func), args, kwargs, joinable=False)
    return call


def ping_task(func: Any, *args: Any, **kwargs: Any) -> str:
    """ZTQ's ``ping_task(func, *args, ztq_first=..., ztq_run=..., **kw)``: where the task of
    this call is, in ZTQ's words: ``'running'``, ``'queue'`` (queued or delayed), ``'error'``
    or ``'none'`` (not pending: never enqueued, done, or deleted).

    ``ztq_first=True`` moves it to the head of its queue when it is waiting there (as the
    console's "Run first" does; if it starts meanwhile it is not moved); ``ztq_run=True``
    enqueues it when it is ``'none'`` (with the call's other options). A task in the error
    list is left there: redo it from the console (ZTQ's ``has_task`` did not look there).
    """
    run = bool(kwargs.pop("ztq_run", False))
    call, join = _call(_task(func), args, kwargs, joinable=True)
    if not call.unique:
        raise InvalidOption(f"ping_task: {call.task} has unique=False, so no call names one task")
    app = call.app or default_app()
    task_id = call.resolve_id()
    word = PING_WORDS[app.ping(task_id, call.queue, connection=call.connection)]
    if word == "queue" and call.first:
        shards = call.shards or app.registry.shards(call.queue)
        run_first(app.storage(call.connection), shard_for(call.queue, task_id, shards), [task_id])
    elif word == "none" and run:
        send(call, join=join)
    return word


# -- cron ------------------------------------------------------------------------------------
def _cron_spec(cron_info: Any) -> str:
    """ZTQ's ``{'minute': M, 'hour': H}`` as a crontab line: minute M (default 0) of hour H
    (default every hour), as ZTQ's cron thread read it."""
    if not isinstance(cron_info, dict) or set(cron_info) - {"minute", "hour"}:
        raise InvalidOption(
            f"cron_info must be ZTQ's {{'minute': M, 'hour': H}}, not {cron_info!r}; for any "
            "other schedule use ztq.core.add_cron(call, '<crontab line>')"
        )
    spec = []
    for key, high in (("minute", 59), ("hour", 23)):
        value = cron_info.get(key, 0 if key == "minute" else -1)
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise InvalidOption(f"cron_info {key} must be a whole number, not {value!r}") from None
        if key == "hour" and number == -1:
            spec.append("*")
        elif 0 <= number <= high:
            spec.append(str(number))
        else:
            raise InvalidOption(f"cron_info {key} must be 0-{high}, not {value!r}")
    return f"{spec[0]} {spec[1]} * * *"


def add_cron(cron_info: dict[str, int], full_func: Any, *args: Any, **kwargs: Any) -> CronEntry:
    """ZTQ's ``add_cron({'hour': 1}, func, *args, **kw)``: enqueue ``func(*args, **kw)``
    at minute ``minute`` (default 0) of hour ``hour`` (default every hour).

    ztq keeps cron entries in the app, not in Redis: call it in a module the worker imports
    (every worker fires the entry; one task per tick in all). The entry is named after the
    task, so one entry per task, as ZTQ had it.
    """
    tf = _task(full_func)
    call, _ = _call(tf, args, kwargs, joinable=False)
    return tf.app.add_cron(call, _cron_spec(cron_info), name=tf.name)


def has_cron(func: Any) -> bool:
    """ZTQ's ``has_cron(func)``: does the task have a cron entry (in this process's app)?"""
    tf = _task(func)
    return any(entry.name == tf.name for entry in tf.app.cron_entries())


def remove_cron(func: Any) -> None:
    """ZTQ's ``remove_cron(func)``: drop the task's cron entry."""
    tf = _task(func)
    tf.app.remove_cron(tf.name)


# -- transactions, Redis ---------------------------------------------------------------------
def enable_transaction(enable: bool, app: App | None = None) -> None:
    """ZTQ's ``enable_transaction(True)``: enqueues join the ``transaction`` package's current
    transaction and are written when it commits (``app.use_transaction_manager``); a call's
    ``ztq_transaction=False`` is sent at once all the same."""
    (app or default_app()).use_transaction_manager(bool(enable))


def setup_redis(
    name: str, host: str, port: int, db: int = 0, *, app: App | None = None, **options: Any
) -> Storage:
    """ZTQ's ``setup_redis('default', 'localhost', 6379, 0)``: connection ``name`` of the app
    (``'default'`` is the one tasks use unless they say ``connection=``/``ztq_system``).

    Like :func:`ztq.core.connect`, the address given is a flag: it wins over
    ``ZTQ_REDIS_URL``. Of redis-py's other keywords ``password`` and ``username`` are taken;
    ztq sets its own timeouts and retries.
    """
    unknown = sorted(set(options) - set(SETUP_REDIS_OPTIONS))
    if unknown:
        raise InvalidOption(
            f"setup_redis: {', '.join(unknown)} not taken (only {', '.join(SETUP_REDIS_OPTIONS)}"
            "); ztq sets its own timeouts and retries, or give ztq.core.connect(url, client=...)"
        )
    url = f"redis://{host}:{int(port)}/{int(db)}"
    target = app or default_app()
    if options:
        return target.connect(url, name=name, client=make_client(url, **options))
    return target.connect(url, name=name)


# -- inside a running task -------------------------------------------------------------------
def _run_context() -> Any:
    """``ztq.worker.context`` when this process runs tasks (a worker loaded it), else None."""
    return sys.modules.get("ztq.worker.context")


def report_progress(**data: Any) -> bool:
    """ZTQ's ``ztq_worker.report_progress(page=2)``: store progress data for the running task
    (the console shows it) and send its ``ztq_pcallback``; False outside a task."""
    context = _run_context()
    return bool(context.report_progress(**data)) if context is not None else False


def report_job(pid: int = -1, comment: str = "", **info: Any) -> bool:
    """ZTQ's ``ztq_worker.report_job(pid, comment=...)``: publish the pid of a child process
    the task runs (so an operator can kill it) and a comment; ZTQ's ``-1`` means no pid.
    Other keywords are added to the comment as ``key=value``. False outside a task."""
    context = _run_context()
    if context is None:
        return False
    extra = " ".join(f"{k}={v}" for k, v in info.items())
    text = f"{comment} {extra}".strip() if extra else str(comment)
    child = pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 1 else None
    return bool(context.report_job(pid=child, comment=text))
