"""A task's key (docs/queue-controls.md, "Per-key limits and fair turns"): what
``@task(key=..., concurrency=N, rate_limit="5/s per key")`` declares and how a call's key is
found from its arguments. The scripts keep one ready list per key and let the keys take
turns (engine/scripts/_keyed.lua); the key, checked here, travels on the call
(``TaskCall.key``) and is stored on the task's record."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ztq.core.client.calls import TaskCall
from ztq.core.engine.queue_limits import Rate, check_key, check_keyed, per_key_rate
from ztq.core.errors import InvalidOption

if TYPE_CHECKING:
    from ztq.core.client.registry import TaskFunction

KeyOf = Callable[[tuple[Any, ...], dict[str, Any]], str]
Keyed = tuple[str | KeyOf | None, int | None, str | None]  # key, concurrency, rate per key


def task_keying(
    key: str | KeyOf | None, concurrency: int | None, rate_limit: str | None
) -> tuple[Keyed, Rate | None]:
    """The decorator's key options checked (refused with one line at the decorator), and
    its rate limit: ``"5/s per key"`` is each key's, anything else the task's."""
    key_rate = per_key_rate(rate_limit)
    rate = None if rate_limit is None or key_rate else Rate.parse(rate_limit)
    if key is not None and rate is not None:
        raise InvalidOption(own_rate_refused(rate_limit))
    check_keyed(None, concurrency, None)
    if not (key is None or callable(key) or (isinstance(key, str) and key.isidentifier())):
        raise InvalidOption(f"key must be an argument's name or a callable, not {key!r}")
    return (key, concurrency, key_rate), rate


def key_of(tf: TaskFunction[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """The key of a call of ``tf`` (whose arguments bind: checked before): ``key(args,
    kwargs)``, or the value of the argument named ``key`` (an int is written as a str);
    refused with one line, before anything is sent, when it is not a short str."""
    if callable(tf.key):
        return check_key(tf.key(args, kwargs))
    bound = tf.signature.bind_partial(*args, **kwargs)
    bound.apply_defaults()
    value = bound.arguments.get(str(tf.key))
    return check_key(str(value) if type(value) is int else value)


def own_rate_refused(rate_limit: object) -> str:
    """Why a keyed call of a task with its own rate limit is refused: the keyed fetch takes
    turns between keys and checks each key's rate, not the task's (docs/queue-controls.md,
    "Known limits of per-key limits"), so the limit would be silently ignored."""
    return (f"a keyed task's own rate_limit={str(rate_limit)!r} would not be enforced: write "
            f"'{str(rate_limit).strip()} per key' for each key's, or configure_queue("
            "rate_limit=...) for the queue's")  # fmt: skip


def with_key(tf: TaskFunction[Any, Any], call: TaskCall, partial: bool = False) -> TaskCall:
    """``call`` with the key ``tf`` declares, found from its arguments (unless the call
    names one; ``partial``: a ``prepare`` without arguments, a template, stays keyless).
    A key given to a call of a task with its own rate limit is refused (``own_rate_refused``)."""
    if call.key is not None and tf.rate_limit is not None:
        raise InvalidOption(own_rate_refused(tf.rate_limit))
    if tf.key is None or call.key is not None or (partial and not (call.args or call.kwargs)):
        return call
    return call.with_options(key=key_of(tf, call.args, call.kwargs))
