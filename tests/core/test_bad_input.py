"""Bad input on the core side: unreachable Redis, bad URLs, corrupt records."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from ztq.core.engine.record import TaskRecord
from ztq.core.errors import (
    ConfigError,
    ConnectionFailed,
    InvalidOption,
    UnknownOption,
    WrongArguments,
    ZtqError,
)
from ztq.core.monitor.queues import queue_stats
from ztq.worker.embedded import free_port


def test_unreachable_redis_is_a_clear_error_naming_the_url() -> None:
    port = free_port()
    ztq.connect(f"redis://:secret@127.0.0.1:{port}/0")
    try:
        started = time.monotonic()
        with pytest.raises(ConnectionFailed) as info:
            t.add.delay(1, 2)
        assert f"127.0.0.1:{port}" in str(info.value)
        assert "secret" not in str(info.value)  # the password is masked
        assert time.monotonic() - started < 10  # bounded retries, no hang
    finally:
        ztq.disconnect_all()


def test_unreachable_redis_inside_a_transaction_raises_at_exit() -> None:
    ztq.connect(f"redis://127.0.0.1:{free_port()}/0")
    try:
        with pytest.raises(ConnectionFailed), ztq.transaction():
            t.add.delay(1, 2)
    finally:
        ztq.disconnect_all()


@pytest.mark.parametrize("url", ["localhost:6379", "", "ftp://x"])
def test_bad_url(url: str) -> None:
    with pytest.raises(ConfigError):
        ztq.connect(url or "not a url", name="bad")


def test_unknown_connection_name() -> None:
    with pytest.raises(ConfigError, match="reports"):
        ztq.get_storage("reports")


def test_corrupt_records_decode_with_a_reason() -> None:
    rec = TaskRecord.from_raw("default", "x", '{"state":"queued"}\n{not json')
    assert rec.state == "queued" and "not valid JSON" in rec.payload_error
    rec = TaskRecord.from_raw("default", "x", "garbage")
    assert rec.state == "error" and "meta" in rec.meta["error"]
    rec = TaskRecord.from_raw("default", "x", '{"state":"queued"}\n{"args":[]}')
    assert "'task' name" in rec.payload_error
    for payload, reason in (
        ('["only.a.name"]', "must be [task, args, kwargs?, options?]"),
        ('["t",[],{},{},"extra"]', "must be [task, args, kwargs?, options?]"),
        ("[1,[]]", "'task' name"),
        ('["t",{}]', "'args' must be a list"),
        ('["t",[],[]]', "'kwargs' an object"),
    ):
        rec = TaskRecord.from_raw("default", "x", "1795546918890\n" + payload)
        assert reason in rec.payload_error, payload
        assert rec.state == "queued" and rec.get("enqueued") == 1795546918890


def test_both_record_forms_read_the_same() -> None:
    """The short forms ztq writes (bare enqueue time, payload list) and the long ones of
    earlier versions and other clients (meta JSON, payload object) are one record."""
    long = TaskRecord.from_raw(
        "default", "x", '{"state":"queued","enqueued":12}\n'
        '{"task":"a.b","args":[1],"kwargs":{"k":2},"opts":{"retries":1}}',
    )  # fmt: skip
    short = TaskRecord.from_raw("default", "x", '12\n["a.b",[1],{"k":2},{"retries":1}]')
    for rec in (long, short):
        assert (rec.state, rec.get("enqueued"), rec.task) == ("queued", 12, "a.b")
        assert (rec.args, rec.kwargs, rec.options) == ([1], {"k": 2}, {"retries": 1})
        assert not rec.payload_error
    assert TaskRecord.from_raw("default", "x", '7\n["a.b",[]]').kwargs == {}
    for meta in ("-12", "1.5", "١٢", "12 "):  # not a bare time: JSON, or not a record
        rec = TaskRecord.from_raw("default", "x", meta + '\n["a.b",[]]')
        assert rec.state == "error" and rec.get("enqueued") is None, meta


@pytest.mark.cluster
def test_named_connection_routes_a_queue_to_another_redis(redis_url: str, redis_cluster) -> None:
    other = ztq.connect(redis_cluster.url, name="reports")
    call = t.add.prepare((3, 4), connection="reports")
    h = call.enqueue()
    assert h.connection == "reports"
    assert other.tasks.record("default", h.id) is not None
    assert ztq.get_storage().tasks.record("default", h.id) is None


# -- calls refused at the enqueue (issue 24: nothing fails silently) ----------------------
@pytest.fixture
def mail(redis_url: str) -> Iterator[ztq.App]:
    app = ztq.App("bad-calls", redis_url=redis_url, prefix="bc")

    @app.task(name="send_mail")
    def send_mail(to, subject) -> None: ...

    @app.task(name="notify")
    def notify(result: Any, run_id: str) -> None: ...

    @app.task(name="failed")
    def failed(run_id: str, error_code: str, error_message: str) -> None: ...

    @app.task(name="anything")
    def anything(*args: Any, **kwargs: Any) -> None: ...

    yield app
    app.disconnect_all()


def nothing_queued(app: ztq.App) -> bool:
    return queue_stats(app.storage(), ["default"])[0].pending == 0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda f: f.delay("only-one"),
         "send_mail(to, subject): missing a required argument: 'subject'"),
        (lambda f: f.delay("a", "b", "c"), "send_mail(to, subject): too many"),
        (lambda f: f.delay("a", subjet="b"), "send_mail(to, subject): "),
        (lambda f: f.enqueue(("a",)), "missing a required argument: 'subject'"),
        (lambda f: f.enqueue(("a", "b"), {"to": "c"}), "multiple values for argument 'to'"),
        (lambda f: asyncio.run(f.adelay("a")), "missing a required argument: 'subject'"),
        (lambda f: asyncio.run(f.aenqueue(("a", "b", "c"))), "too many positional"),
        (lambda f: f.broadcast("a"), "missing a required argument: 'subject'"),
        (lambda f: f.prepare(("a", "b", "c")), "too many positional"),
        (lambda f: f.prepare(("a",), {"cc": "x"}), "unexpected keyword argument 'cc'"),
    ],
)  # fmt: skip
def test_wrong_arguments_are_refused_at_the_call_naming_the_task(mail, call, message) -> None:
    with pytest.raises(WrongArguments) as info:
        call(mail.lookup("send_mail"))
    assert message in str(info.value)
    assert isinstance(info.value, ZtqError) and isinstance(info.value, TypeError)
    assert nothing_queued(mail)


def test_callbacks_bind_with_what_the_worker_adds(mail) -> None:
    notify, failed, send_mail = (mail.lookup(n) for n in ("notify", "failed", "send_mail"))
    # prepare does not know the role: missing arguments may come at run time...
    later = failed.prepare(("run-7",))
    chained = notify.prepare(("run-7",), pass_result=True)  # the parent's result comes first
    h = send_mail.enqueue(("a", "b"), callback=chained, on_failure=later)
    assert not nothing_queued(mail) and h.id
    # ...but a call that cannot bind even so is refused, with the placeholder counted
    with pytest.raises(WrongArguments, match="too many positional"):
        notify.prepare(("run-7", "x"), pass_result=True)
    # and enqueueing a parent binds its callbacks as the worker will call them
    with pytest.raises(WrongArguments, match=r"^notify\(result, run_id\): missing"):
        send_mail.enqueue(("a", "c"), callback=notify.prepare(("run-7",)))
    with pytest.raises(WrongArguments, match=r"^failed\(.*\): missing .*'run_id'$"):
        send_mail.enqueue(("a", "c"), on_failure=failed.prepare(()))  # error_* are given
    with pytest.raises(WrongArguments, match="unexpected keyword argument 'error_code'"):
        send_mail.enqueue(("a", "c"), on_failure=notify.prepare(("x", "y")))
    with pytest.raises(WrongArguments, match="unexpected keyword argument 'progress'"):
        send_mail.enqueue(("a", "c"), on_progress=notify.prepare(("x", "y")))
    with pytest.raises(WrongArguments, match=r"^notify\(result, run_id\): missing"):
        send_mail.prepare(("a", "c"), callback=notify.prepare(("x",)))  # the role is known
    link = ztq.TaskCall("notify", ("x",), app=mail)  # made without the function...
    with pytest.raises(WrongArguments, match=r"^notify\(result, run_id\): missing"):
        send_mail.enqueue(("a", "d"), callback=ztq.TaskCall("send_mail", ("a", "b"), callback=link))
    assert queue_stats(mail.storage(), ["default"])[0].pending == 1  # only the first


def test_a_task_taking_star_args_binds_anything(mail) -> None:
    anything = mail.lookup("anything")
    assert anything.delay().id and anything.delay(1, 2, x=3).id
    assert anything.enqueue((1,), {"y": 2}).id


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ("z@example.org", None,
         "args must be a tuple or list of arguments, not str 'z@example.org'"),
        ({"to": "z"}, None, "args must be a tuple or list of arguments, not dict {'to': 'z'}"),
        (7, None, "args must be a tuple or list of arguments, not int 7"),
        (("z", "s"), ["x"], "kwargs must be a dict of keyword arguments, not list ['x']"),
    ],
)  # fmt: skip
def test_args_must_be_a_tuple_or_list(mail, args, kwargs, message) -> None:
    send_mail = mail.lookup("send_mail")
    for call in (
        lambda: send_mail.enqueue(args, kwargs),
        lambda: send_mail.prepare(args, kwargs),
        lambda: asyncio.run(send_mail.aenqueue(args, kwargs)),
    ):
        with pytest.raises(InvalidOption) as info:
            call()
        assert str(info.value) == message
    assert nothing_queued(mail)


def test_unknown_options_suggest_the_nearest_name(mail) -> None:
    send_mail = mail.lookup("send_mail")
    for call, what in (
        (lambda: send_mail.enqueue(("a", "b"), frist=True), "enqueue"),
        (lambda: send_mail.prepare(("a", "b"), frist=True), "prepare"),
        (lambda: asyncio.run(send_mail.aenqueue(("a", "b"), frist=True)), "aenqueue"),
        (lambda: ztq.TaskCall("send_mail", ("a", "b"), frist=True), "TaskCall"),
    ):
        with pytest.raises(UnknownOption) as info:
            call()
        text = str(info.value)
        assert text.startswith(f"unknown option 'frist' for {what}; did you mean 'first'? (known:")
        assert "pass_result" in text and isinstance(info.value, TypeError)
    with pytest.raises(UnknownOption, match=r"^unknown option 'colour' for enqueue \(known: "):
        send_mail.enqueue(("a", "b"), colour="red")  # nothing close: no suggestion
    with pytest.raises(InvalidOption, match="ztq_first is ZTQ's option"):  # still its own text
        send_mail.enqueue(("a", "b"), ztq_first=True)
    assert nothing_queued(mail)


def test_unknown_options_of_task_and_configure_queue(mail) -> None:
    with pytest.raises(UnknownOption, match="^unknown option 'retires' for task; did you mean "
                       "'retries'\\? \\(known: batch_size, concurrency, connection,"):  # fmt: skip
        mail.task(retires=3)
    with pytest.raises(UnknownOption, match="'retires' for task; did you mean 'retries'"):
        ztq.task(retires=3)  # the default app's
    with pytest.raises(UnknownOption, match="^unknown option 'max_pendng' for configure_queue; "
                       "did you mean 'max_pending'"):  # fmt: skip
        mail.configure_queue("default", max_pendng=3)
    with pytest.raises(UnknownOption, match="'max_runing' for configure_queue; did you mean"):
        ztq.configure_queue("default", max_runing=1)
