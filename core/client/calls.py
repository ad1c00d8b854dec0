"""A prepared task call: what to run, with which options, and how it is encoded.

``TaskCall`` is ZTQ's ``prepare(...)``: it can be enqueued, buffered by a transaction, or
given as ``callback`` / ``on_failure`` / ``on_progress`` of another call (chainable, since a
callback carries its own options and callbacks).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ztq.core.client.apps import app_or_default
from ztq.core.client.options import OPTION_ORDER, TaskOptions, ztq_option_error
from ztq.core.engine.keys import check_queue
from ztq.core.engine.record import payload_list
from ztq.core.errors import InvalidName, InvalidOption, SerializationError
from ztq.core.states import Priority

if TYPE_CHECKING:
    from ztq.core.client.app import App
    from ztq.core.client.handle import TaskHandle

TASK_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,199}$")


def check_task_name(name: str) -> str:
    if not isinstance(name, str) or not TASK_NAME.match(name):
        raise InvalidName(f"task name {name!r} is not allowed: use a dotted Python name")
    return name


class _Encoder:
    """A ``json.JSONEncoder`` whose C encoder is built once: ``JSONEncoder.encode`` builds
    one per call, two thirds of encoding a short argument list (a transaction encodes one
    per task). Top-level strings and numbers, and Pythons without the C encoder, take the
    plain path; after an error the C encoder is built again (its circular-reference marks
    may be left over)."""

    def __init__(self, **options: Any) -> None:
        self.plain = json.JSONEncoder(**options)
        self._fast = self._build()

    def _build(self) -> Callable[[Any, int], Any] | None:
        e = self.plain
        make = getattr(json.encoder, "c_make_encoder", None)
        if make is None:
            return None
        basic = (
            json.encoder.encode_basestring_ascii
            if e.ensure_ascii
            else json.encoder.encode_basestring
        )
        try:
            return make({}, e.default, basic, e.indent, e.key_separator, e.item_separator,  # type: ignore[no-any-return]
                        e.sort_keys, e.skipkeys, e.allow_nan)  # fmt: skip
        except TypeError:  # another signature: the plain path
            return None

    def encode(self, value: Any) -> str:
        fast = self._fast
        if fast is None or type(value) not in (list, dict):
            return self.plain.encode(value)
        try:
            return "".join(fast(value, 0))
        except BaseException:
            self._fast = self._build()
            raise


# one encoder each, built once: json.dumps with options builds a new encoder per call
_COMPACT = _Encoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_CANONICAL = _Encoder(separators=(",", ":"), ensure_ascii=True, allow_nan=False, sort_keys=True)


def encode_json(value: Any, what: str) -> str:
    """Compact JSON or a :class:`SerializationError` that says what could not be encoded."""
    try:
        return _COMPACT.encode(value)
    except (TypeError, ValueError) as exc:
        raise SerializationError(
            f"{what} cannot be sent as JSON (ztq never pickles): {exc}"
        ) from exc


def task_id_for(queue: str, task: str, args: list[Any], kwargs: dict[str, Any]) -> str:
    """The dedup id: hex MD5 of the canonical JSON of queue, task name, args and kwargs.

    Canonical: ``json.dumps({"args":..., "kwargs":..., "queue":..., "task":...},
    sort_keys=True, separators=(",", ":"), ensure_ascii=True)`` encoded as UTF-8. Options
    (priority, delay, callbacks, ...) are not part of it: the same work with other options is
    the same task.
    """
    canonical = _CANONICAL.encode({"args": args, "kwargs": kwargs, "queue": queue, "task": task})
    return hashlib.md5(canonical.encode("utf-8"), usedforsecurity=False).hexdigest()


# what a worker adds to a callback's keyword arguments (core/middleware/policies.py
# Callbacks): ``on_failure`` gets the error's type and message, ``on_progress`` the data
FAILURE_KWARGS = ("error_code", "error_message")
PROGRESS_KWARG = "progress"


@dataclass(frozen=True, repr=False)
class TaskCall(TaskOptions):
    """One call of a registered task: the task, its arguments and its options (a call *is*
    its :class:`TaskOptions`, with what to run); immutable, reusable. The options are
    keywords: ``TaskCall("mail.send", ("a@b",), queue="mail")``."""

    task: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    # the app that sends it (None: the default app); not part of the payload or of equality
    app: App | None = field(default=None, compare=False, kw_only=True)
    _payload: str = field(default="", init=False, compare=False)
    _id: str = field(default="", init=False, compare=False)  # the MD5, once known

    def __post_init__(self) -> None:
        check_task_name(self.task)
        check_queue(self.queue)
        if not isinstance(self.args, (list, tuple)):
            raise InvalidOption(f"args must be a list or tuple, not {type(self.args).__name__}")
        if not isinstance(self.kwargs, dict):
            raise InvalidOption("kwargs must be a dict with str keys")
        for key in self.kwargs:  # one pass over the keys, and none when there are none
            if not isinstance(key, str):
                raise InvalidOption("kwargs must be a dict with str keys")
            if key[:4] == "ztq_":
                raise ztq_option_error(key)
        object.__setattr__(self, "args", tuple(self.args))
        self._check()  # the options' checks
        # encode now so that a bad argument fails at the caller, not in a worker; the text
        # is kept for payload()
        object.__setattr__(self, "_payload", self._encode_payload())

    def __repr__(self) -> str:
        """The task and its arguments first, then its options."""
        shown = [f"{n}={getattr(self, n)!r}" for n in ("task", "args", "kwargs", *OPTION_ORDER)]
        return f"TaskCall({', '.join(shown)})"

    def with_options(self, **changes: Any) -> TaskCall:
        """A copy with other options (``TaskCall`` is immutable)."""
        return replace(self, **changes)

    # -- encoding ----------------------------------------------------------------------------
    def resolve_id(self) -> str:
        """The explicit id, the MD5 dedup id, or a fresh random id when ``unique=False``."""
        if self.id is not None:
            return self.id
        if not self.unique:
            return os.urandom(16).hex()  # 128 random bits, as uuid4 (whose object cost 2 µs)
        return self._id or task_id_for(self.queue, self.task, list(self.args), self.kwargs)

    def delay_ms(self, now: float | None = None) -> int:
        if self.eta is not None:
            now = time.time() if now is None else now
            return max(0, int(round((self.eta - now) * 1000)))
        return int(round((self.delay or 0) * 1000))

    def expires_ms(self) -> int:
        """The expiry as the enqueue script takes it: ms from the enqueue (0: none)."""
        return 0 if self.expires is None else max(1, int(round(self.expires * 1000)))

    def options_dict(self) -> dict[str, Any]:
        """The options a worker needs, only those that differ from the defaults."""
        opts: dict[str, Any] = {}
        if self.retries:
            opts["retries"] = self.retries
        if self.timeout is not None:
            opts["timeout"] = self.timeout
        if self.result_ttl is not None:
            opts["result_ttl"] = self.result_ttl
        if self.meta:
            opts["meta"] = self.meta
        for name in ("callback", "on_failure", "on_progress"):
            value = getattr(self, name)
            if value is not None:
                opts[name] = value.to_dict()
        return opts

    def payload(self) -> str:
        """The payload JSON stored in Redis (encoded once, when the call was made)."""
        return self._payload

    def _encode_payload(self) -> str:
        """``[task, args, kwargs, opts]``, without the empty ones at the end: every queued
        task carries its payload, and a list spends no bytes on keys (ztq.core.engine.record)."""
        data = payload_list(self.task, list(self.args), self.kwargs, self.options_dict())
        return encode_json(data, f"arguments of {self.task}")

    def to_dict(self) -> dict[str, Any]:
        """A callback as stored inside its parent's payload."""
        data: dict[str, Any] = {
            "task": self.task,
            "args": list(self.args),
            "kwargs": self.kwargs,
            "queue": self.queue,
        }
        if self.connection != "default":
            data["connection"] = self.connection
        if self.shards is not None:
            data["shards"] = self.shards
        if self.priority is not Priority.NORMAL:
            data["priority"] = self.priority.value
        if self.delay:
            data["delay"] = self.delay
        if self.expires is not None:
            data["expires"] = self.expires
        if self.first:
            data["first"] = True
        if not self.unique:
            data["unique"] = False
        if self.id is not None:
            data["id"] = self.id
        if self.pass_result:
            data["pass_result"] = True
        opts = self.options_dict()
        if opts:
            data["opts"] = opts
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], app: App | None = None) -> TaskCall:
        """Rebuild a callback stored by :meth:`to_dict`, to be sent by ``app``."""
        opts = dict(data.get("opts") or {})

        def nested(name: str) -> TaskCall | None:
            return cls.from_dict(opts[name], app) if opts.get(name) else None

        return cls(
            task=data["task"],
            args=tuple(data.get("args") or ()),
            kwargs=dict(data.get("kwargs") or {}),
            queue=data.get("queue", "default"),
            connection=data.get("connection", "default"),
            shards=data.get("shards"),
            priority=Priority(data.get("priority", "normal")),
            delay=data.get("delay"),
            expires=data.get("expires"),
            first=bool(data.get("first", False)),
            unique=bool(data.get("unique", True)),
            id=data.get("id"),
            timeout=opts.get("timeout"),
            retries=int(opts.get("retries", 0)),
            result_ttl=opts.get("result_ttl"),
            meta=dict(opts.get("meta") or {}),
            pass_result=bool(data.get("pass_result", False)),
            callback=nested("callback"),
            on_failure=nested("on_failure"),
            on_progress=nested("on_progress"),
            app=app,
        )

    # -- sending -----------------------------------------------------------------------------
    def enqueue(self) -> TaskHandle:
        """Send the call now, or buffer it when a transaction is open."""
        return app_or_default(self.app).send(self)


class CallTemplate:
    """What every call of one task with its default options shares, validated and encoded
    once (``fn.delay(...)`` is one-by-one enqueue's hot path): the options, the payload's
    JSON around the arguments, the canonical JSON around them for the dedup id. A call
    made here equals ``TaskCall(task, args, kwargs, <the same options>)`` field for field,
    payload and id included (tests/core/test_calls.py checks it)."""

    def __init__(self, base: TaskCall) -> None:
        self.base = base  # validated by TaskCall(), with no arguments
        self.fields = dict(base.__dict__)
        self.head = "[" + _COMPACT.encode(base.task) + ","
        opts = base.options_dict()
        opts_json = encode_json(opts, f"options of {base.task}") if opts else ""
        # after the kwargs, or with none: after an empty one when options follow
        self.tail = ("," + opts_json if opts else "") + "]"
        self.tail_no_kwargs = (",{}," + opts_json if opts else "") + "]"
        self.dedup = base.unique and base.id is None
        queue_task = _CANONICAL.encode(base.queue) + ',"task":' + _CANONICAL.encode(base.task)
        self.id_tail = ',"queue":' + queue_task + "}"

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> TaskCall:
        """The call of the task with these arguments (a SerializationError, InvalidOption
        as ``TaskCall`` raises them)."""
        for key in kwargs:
            if not isinstance(key, str):
                raise InvalidOption("kwargs must be a dict with str keys")
            if key[:4] == "ztq_":
                raise ztq_option_error(key)
        what = f"arguments of {self.base.task}"
        listed = list(args)
        args_json = encode_json(listed, what)
        if kwargs:
            payload = self.head + args_json + "," + encode_json(kwargs, what) + self.tail
        else:
            payload = self.head + args_json + self.tail_no_kwargs
        call: TaskCall = object.__new__(TaskCall)
        values = call.__dict__
        values.update(self.fields)
        values["args"], values["kwargs"], values["_payload"] = args, kwargs, payload
        if self.dedup:
            # canonical JSON: sorted keys, ASCII only; flat ASCII arguments encode the same
            # both ways (but DEL, which only the ASCII encoder escapes)
            flat = args_json.isascii() and "\x7f" not in args_json
            flat = flat and all(type(a) in _FLAT for a in listed)
            canonical = ('{"args":' + (args_json if flat else _CANONICAL.encode(listed)) +
                         ',"kwargs":' + (_CANONICAL.encode(kwargs) if kwargs else "{}") +
                         self.id_tail)  # fmt: skip
            values["_id"] = hashlib.md5(canonical.encode(), usedforsecurity=False).hexdigest()
        return call


_FLAT = frozenset({str, int, float, bool, type(None)})
