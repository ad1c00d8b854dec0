"""A path for ZTQ users: ZTQ's keywords refused with a pointer at ztq's calls, and
``ztq.core.compat`` running ZTQ's API on real Redis."""

from __future__ import annotations

import pytest

import ztq.core as ztq
from ztq.core.errors import InvalidOption


@ztq.task(queue="mail")
def send(body: str) -> None:
    """A ztq task a ZTQ caller might still pass ZTQ's options to."""


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: send.delay("x", ztq_first=True),
         "ztq_first is ZTQ's option: use first=True (fn.enqueue(args, first=True)) or "
         "ztq.core.compat"),
        (lambda: send.enqueue(("x",), {"ztq_callback": None}), "ztq_callback is ZTQ's option: "
         "use callback= (fn.enqueue(args, callback=done.prepare(args)))"),
        (lambda: send.prepare(("x",), ztq_fcallback=None), "ztq_fcallback is ZTQ's option: use "
         "on_failure= (fn.enqueue(args, on_failure=failed.prepare(args)))"),
        (lambda: send.enqueue(("x",), ztq_pcallback=None), "use on_progress="),
        (lambda: send.delay("x", ztq_queue="other"), "use queue= (fn.enqueue(args, queue='mail'))"),
        (lambda: send.delay("x", ztq_transaction=False), "use with transaction():"),
        (lambda: send.delay("x", ztq_colour="red"), "ztq_colour looks like one of ZTQ's options: "
         "keyword arguments starting with ztq_ are reserved"),
        (lambda: ztq.TaskCall("any.task", kwargs={"ztq_first": 1}), "ztq_first is ZTQ's option"),
    ],
)  # fmt: skip
def test_ztq_keywords_are_refused_at_the_call_naming_the_new_option(call, message: str) -> None:
    """Before, ``send.delay(x, ztq_first=True)`` stored ``ztq_first`` as an argument and the
    worker failed the task with WrongArguments; now the call raises (before any Redis)."""
    with pytest.raises(InvalidOption) as caught:
        call()
    assert message in str(caught.value)


def test_other_keywords_and_options_still_pass() -> None:
    call = send.prepare(("x",), {"ztq": 1, "my_ztq_flag": 2}, first=True)
    assert call.kwargs == {"ztq": 1, "my_ztq_flag": 2} and call.first
    with pytest.raises(TypeError, match="colour"):  # an unknown option is still a TypeError
        send.prepare(("x",), colour="red")
