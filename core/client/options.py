"""A task's options, defined once: :class:`TaskOptions`, how a call is sent and run.

Every path that takes options ends here: ``@task(...)`` turns its keywords into the task's
``TaskOptions`` (its defaults), ``prepare``/``enqueue`` give a call the task's options with
the ones it names changed, and a :class:`~ztq.core.client.calls.TaskCall` *is* its options
with a task and arguments (callbacks, batches' callbacks, cron entries and the console's
"run now" are calls). The checks of every option live in ``TaskOptions.__post_init__``,
run once per value. What ``@task`` takes beside them (its name, ``cron``, ``batch_size``,
``on_batch``, and the key it finds in each call's arguments: :func:`task_keying`) belongs
to the task, not to its calls.
"""

from __future__ import annotations

import functools
import inspect
import math
import re
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any, ParamSpec, Self, TypeVar

from ztq.core.engine.keys import check_queue, check_shards
from ztq.core.engine.queue_limits import Rate, check_keyed, per_key_rate
from ztq.core.errors import InvalidName, InvalidOption, UnknownOption, unknown_name
from ztq.core.states import Priority

P = ParamSpec("P")
R = TypeVar("R")
TASK_ID = re.compile(r"^[A-Za-z0-9_.:\-]{1,128}$")


def check_task_id(task_id: str) -> str:
    if not isinstance(task_id, str) or not TASK_ID.match(task_id):
        raise InvalidName(
            f"task id {task_id!r} is not allowed: 1-128 letters, digits, '_', '.', ':' or '-'"
        )
    return task_id


@dataclass(frozen=True, kw_only=True)
class TaskOptions:
    """How a call of a task is sent and run; immutable, checked when made. ``@task(...)``
    makes a task's defaults; a call's options are the task's with the ones it names changed
    (``dataclasses.replace``). Equality leaves out what only says how the call is sent
    (``replicas``, ``shards``, the key and its limits)."""

    queue: str = "default"
    connection: str = "default"
    priority: Priority = Priority.NORMAL
    delay: float | None = None
    eta: float | None = None  # epoch seconds
    # seconds from the enqueue after which a task not started never runs (None: never)
    expires: float | None = None
    first: bool = False
    unique: bool = True
    id: str | None = None
    # calls (TaskCall, options with a task: ``Self`` there) sent after this one
    callback: Self | None = None
    on_failure: Self | None = None
    on_progress: Self | None = None
    timeout: float | None = None
    retries: int = 0
    result_ttl: float | None = None  # seconds its result is kept; None: the worker's setting
    pass_result: bool = False  # as a callback: the parent's result comes first in its args
    # durable enqueue: replicas that must confirm the write (None: the app's setting); how
    # the call is sent, not what it is: not in the payload, the id or equality
    replicas: int | None = field(default=None, compare=False)
    # the queue's shard count (None: what the app's tasks declare for the queue, else 1); it
    # picks the sub-queue the task goes to, not what the task is: not in the id or equality
    shards: int | None = field(default=None, compare=False)
    # headers that travel with the task to its run (e.g. a trace context); not in the id
    meta: dict[str, str] = field(default_factory=dict)
    # its key and its limits (docs/queue-controls.md, "Per-key limits"): not in the id
    key: str | None = field(default=None, compare=False)
    key_concurrency: int | None = field(default=None, compare=False)
    key_rate: str | None = field(default=None, compare=False)

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """A keyword that is no option is :class:`UnknownOption` naming the nearest one (as
        for ``prepare`` and ``enqueue``), not Python's bare ``TypeError``; ``replace`` and
        ``with_options`` come through here too."""
        known = _INIT_NAMES.get(cls) or _init_names(cls)
        if not known.issuperset(kwargs):
            unknown = [k for k in kwargs if k not in known]
            check_option_names(unknown, OPTION_NAMES, cls.__name__)
        return super().__new__(cls)

    def __post_init__(self) -> None:
        check_queue(self.queue)
        self._check()

    def _check(self) -> None:
        """Every option's check (a call checks its task and arguments first)."""
        if not isinstance(self.meta, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.meta.items()
        ):
            raise InvalidOption("meta must be a dict of str to str")
        set_ = object.__setattr__
        set_(self, "priority", check_priority(self.priority))
        set_(self, "delay", _seconds(self.delay, "delay"))
        set_(self, "timeout", _seconds(self.timeout, "timeout", allow_zero=False))
        set_(self, "result_ttl", _seconds(self.result_ttl, "result_ttl"))
        eta = self.eta
        if isinstance(eta, datetime):
            eta = eta.timestamp()
        set_(self, "eta", _seconds(eta, "eta"))
        if self.delay is not None and self.eta is not None:
            raise InvalidOption("give delay or eta, not both")
        if self.expires is not None:
            self._check_expires()
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise InvalidOption(f"retries must be an int >= 0, not {self.retries!r}")
        if self.replicas is not None and (
            isinstance(self.replicas, bool)
            or not isinstance(self.replicas, int)
            or self.replicas < 0
        ):
            raise InvalidOption(f"replicas must be an int >= 0, not {self.replicas!r}")
        if self.shards is not None:
            try:
                check_shards(self.shards)
            except InvalidName as exc:
                raise InvalidOption(str(exc)) from None
        if self.id is not None:
            check_task_id(self.id)
        if self.key is not None or self.key_concurrency is not None or self.key_rate is not None:
            check_keyed(self.key, self.key_concurrency, self.key_rate)
        for name in ("callback", "on_failure", "on_progress"):
            value = getattr(self, name)  # a TaskCall: options with a task
            if value is not None and not _is_call(value):
                raise InvalidOption(
                    f"{name} must be a prepared task (fn.prepare(...)), not {value!r}"
                )

    def _check_expires(self) -> None:
        """``expires`` as seconds; a due time at or after it is refused (the task could
        never run)."""
        expires = check_expires(self.expires)
        object.__setattr__(self, "expires", expires)
        if expires is None:
            return
        due = self.delay if self.eta is None else self.eta - time.time()
        if due is not None and due >= expires:
            what = f"delay={due:g}" if self.eta is None else f"eta (in {due:.0f} s)"
            raise InvalidOption(
                f"{what} is at or after expires={expires:g}: the task would expire before "
                "it is due and never run"
            )

    def changed(self) -> dict[str, Any]:
        """The options that differ from the defaults, by name: what a call of a task made
        with these options is given (``TaskCall(task, args, kwargs, **changed)``)."""
        got = {name: getattr(self, name) for name in OPTION_ORDER}
        return {name: value for name, value in got.items() if value != _DEFAULTS[name]}


# the options of TaskCall(...), prepare and enqueue, in their order
OPTION_ORDER = tuple(f.name for f in fields(TaskOptions))
OPTION_NAMES = frozenset(OPTION_ORDER)
_DEFAULTS: dict[str, Any] = {
    f.name: ({} if f.name == "meta" else f.default) for f in fields(TaskOptions)
}  # meta's is a fresh dict


def _is_call(value: object) -> bool:
    """A TaskCall (client/calls.py): options with a task to run."""
    return isinstance(value, TaskOptions) and hasattr(value, "task")


_INIT_NAMES: dict[type, frozenset[str]] = {}  # a class's keywords (TaskCall's: and the call)


def _init_names(cls: type) -> frozenset[str]:
    found = _INIT_NAMES[cls] = frozenset(f.name for f in fields(cls) if f.init)
    return found


def check_priority(value: Priority | str) -> Priority:
    """``priority``: a :class:`Priority` or its name."""
    if type(value) is Priority:
        return value
    try:
        return Priority(value)
    except ValueError:
        raise InvalidOption(f"priority must be one of high, normal, low, not {value!r}") from None


def _seconds(value: Any, what: str, *, allow_zero: bool = True) -> float | None:
    if value is None:
        return None
    if isinstance(value, timedelta) and what != "eta":  # a length of time (an eta is a moment)
        value = value.total_seconds()
    if type(value) is float and value > 0 and math.isfinite(value):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidOption(f"{what} must be a number of seconds, not {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise InvalidOption(f"{what} must be {'>= 0' if allow_zero else '> 0'}, not {value!r}")
    return float(value)


def check_expires(value: Any) -> float | None:
    """``expires``: seconds (> 0) or a ``timedelta``; None never expires."""
    if isinstance(value, datetime):
        raise InvalidOption(
            f"expires takes seconds or a timedelta (how long the task stays useful), "
            f"not a datetime: {value!r}"
        )
    return _seconds(value, "expires", allow_zero=False)


# -- option names -----------------------------------------------------------------------------
# ZTQ passed its options as ``ztq_*`` keywords of the call itself; ztq takes options as
# keyword arguments of ``enqueue``/``prepare`` and every keyword of ``delay`` is an argument
# of the task. A ``ztq_*`` argument is refused at the call (ZTQ code would otherwise store the
# option as an argument, and the worker fail the task with WrongArguments): see
# docs/migrating-from-ztq.md and ztq.core.contrib.compat, which maps these names.
ZTQ_OPTIONS = {  # ZTQ's name -> (ztq's option, how a call gives it)
    "ztq_first": ("first=True", "fn.enqueue(args, first=True)"),
    "ztq_callback": ("callback=", "fn.enqueue(args, callback=done.prepare(args))"),
    "ztq_fcallback": ("on_failure=", "fn.enqueue(args, on_failure=failed.prepare(args))"),
    "ztq_pcallback": ("on_progress=", "fn.enqueue(args, on_progress=progress.prepare(args))"),
    "ztq_queue": ("queue=", "fn.enqueue(args, queue='mail')"),
    "ztq_transaction": ("with transaction():", "calls in the block are sent at its end"),
    "ztq_run": ("ping() before delay()", "compat.ping_task(fn, *args, ztq_run=True)"),
}


def ztq_option_error(name: str) -> InvalidOption:
    """The error for a ``ztq_*`` keyword given to ``delay``/``enqueue``/``prepare``."""
    if name not in ZTQ_OPTIONS:
        return InvalidOption(
            f"{name} looks like one of ZTQ's options: keyword arguments starting with ztq_ "
            "are reserved; give options to fn.enqueue(args, kwargs, **options), or call "
            "through ztq.core.contrib.compat (docs/migrating-from-ztq.md)"
        )
    option, example = ZTQ_OPTIONS[name]
    return InvalidOption(
        f"{name} is ZTQ's option: use {option} ({example}) or ztq.core.contrib.compat"
    )


def check_option_names(given: Iterable[str], known: Collection[str], what: str) -> None:
    """Refuse an option name that ``what`` does not take: ZTQ's ``ztq_*`` names with the
    ztq option that replaces them, any other with the nearest known name
    (:class:`UnknownOption`, a ``TypeError`` too). Callers test the names cheaply first
    (``known.issuperset(given)``) and call this only when one is unknown."""
    for name in given:
        if name not in known:
            if isinstance(name, str) and name.startswith("ztq_"):
                raise ztq_option_error(name)
            raise UnknownOption(unknown_name("option", name, known, what))


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


# -- the task's key ---------------------------------------------------------------------------
# A task's key (docs/queue-controls.md, "Per-key limits and fair turns"): what
# ``@task(key=..., concurrency=N, rate_limit="5/s per key")`` declares. The scripts keep one
# ready list per key and let the keys take turns (engine/scripts/_keyed.lua); each call's
# key, found from its arguments (client/binding.py), travels on the call as ``key``.
KeyOf = Callable[[tuple[Any, ...], dict[str, Any]], str]


def task_keying(
    key: str | KeyOf | None, rate_limit: str | None
) -> tuple[str | KeyOf | None, str | None, Rate | None]:
    """The decorator's key and rate limit checked (refused with one line at the decorator):
    the key to find in each call, the rate each key's calls carry (``key_rate``) and the
    task's own rate limit: ``"5/s per key"`` is each key's, anything else the task's."""
    key_rate = per_key_rate(rate_limit)
    rate = None if rate_limit is None or key_rate else Rate.parse(rate_limit)
    if key is not None and rate is not None:
        raise InvalidOption(own_rate_refused(rate_limit))
    if not (key is None or callable(key) or (isinstance(key, str) and key.isidentifier())):
        raise InvalidOption(f"key must be an argument's name or a callable, not {key!r}")
    return key, key_rate, rate


def own_rate_refused(rate_limit: object) -> str:
    """Why a keyed call of a task with its own rate limit is refused: the keyed fetch takes
    turns between keys and checks each key's rate, not the task's (docs/queue-controls.md,
    "Known limits of per-key limits"), so the limit would be silently ignored."""
    return (f"a keyed task's own rate_limit={str(rate_limit)!r} would not be enforced: write "
            f"'{str(rate_limit).strip()} per key' for each key's, or configure_queue("
            "rate_limit=...) for the queue's")  # fmt: skip
