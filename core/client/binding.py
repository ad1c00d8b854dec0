"""How a call's arguments bind to its task's function: checked before anything is sent.

``delay``/``enqueue`` bind in full (:func:`argument_check`, fast for the common shapes),
``prepare`` partially (a callback gets more arguments from the worker), the callbacks a
call carries as the worker will call them (:func:`check_callbacks`); a keyed task's key
is found in the bound arguments (:func:`with_key`, docs/queue-controls.md, "Per-key limits
and fair turns"). Typed against :class:`Bindable`, what a registered task offers here.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Protocol

from ztq.core.client.calls import FAILURE_KWARGS, PROGRESS_KWARG, TaskCall
from ztq.core.client.options import KeyOf, own_rate_refused
from ztq.core.engine.queue_limits import Rate, check_key
from ztq.core.errors import InvalidOption, UnknownTask, WrongArguments

ArgumentCheck = Callable[[tuple[Any, ...], dict[str, Any]], None]


class Bindable(Protocol):
    """A registered task, as the checks here see it (``TaskFunction``)."""

    name: str
    key: str | KeyOf | None
    rate_limit: Rate | None

    @property
    def signature(self) -> inspect.Signature: ...

    @property
    def check_arguments(self) -> ArgumentCheck: ...


def argument_check(name: str, sig: inspect.Signature) -> ArgumentCheck:
    """The check of ``TaskFunction.check_arguments``, fast for the common shapes (every
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


def partial_check(tf: Bindable, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
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


def check_callbacks(lookup: Callable[[str], Bindable], call: TaskCall) -> None:
    """Bind the callbacks ``call`` carries (and theirs) as the worker will call them, when
    ``lookup`` (an app's registry) knows their function: ``callback`` with the parent's
    result first if it ``pass_result``, ``on_failure`` with ``error_code`` and
    ``error_message``, ``on_progress`` with ``progress`` (for functions with a signature of
    their own, such as compat's, which spreads ``progress``, only partially)."""
    for role in ("callback", "on_failure", "on_progress"):
        cb: TaskCall | None = getattr(call, role)
        if cb is None:
            continue
        try:
            tf: Bindable | None = lookup(cb.task)
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
        check_callbacks(lookup, cb)


def key_of(tf: Bindable, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """The key of a call of ``tf`` (whose arguments bind: checked before): ``key(args,
    kwargs)``, or the value of the argument named ``key`` (an int is written as a str);
    refused with one line, before anything is sent, when it is not a short str."""
    if callable(tf.key):
        return check_key(tf.key(args, kwargs))
    bound = tf.signature.bind_partial(*args, **kwargs)
    bound.apply_defaults()
    value = bound.arguments.get(str(tf.key))
    return check_key(str(value) if type(value) is int else value)


def with_key(tf: Bindable, call: TaskCall, partial: bool = False) -> TaskCall:
    """``call`` with the key ``tf`` declares, found from its arguments (unless the call
    names one; ``partial``: a ``prepare`` without arguments, a template, stays keyless).
    A key given to a call of a task with its own rate limit is refused (``own_rate_refused``)."""
    if call.key is not None and tf.rate_limit is not None:
        raise InvalidOption(own_rate_refused(tf.rate_limit))
    if tf.key is None or call.key is not None or (partial and not (call.args or call.kwargs)):
        return call
    return call.with_options(key=key_of(tf, call.args, call.kwargs))
