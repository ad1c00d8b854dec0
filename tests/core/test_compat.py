"""A path for ZTQ users: ZTQ's keywords refused with a pointer at ztq's calls, and
``ztq.core.contrib.compat`` running ZTQ's API on real Redis."""

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
         "ztq.core.contrib.compat"),
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
    # by name: send(body) takes no such keywords, which prepare() now refuses (issue 24)
    call = ztq.TaskCall(send.name, ("x",), {"ztq": 1, "my_ztq_flag": 2}, first=True)
    assert call.kwargs == {"ztq": 1, "my_ztq_flag": 2} and call.first
    with pytest.raises(TypeError, match="colour"):  # an unknown option is still a TypeError
        send.prepare(("x",), colour="red")


# -- ztq.core.contrib.compat on real Redis ----------------------------------------------
from collections.abc import Iterator  # noqa: E402
from typing import Any  # noqa: E402

from ztq.core.contrib import compat  # noqa: E402
from ztq.core.contrib.compat import async_, ping_task, prepare_task  # noqa: E402
from ztq.core.engine.record import decode_payload  # noqa: E402
from ztq.core.monitor import queues as monitor  # noqa: E402
from ztq.worker.testing.helpers import worker_for  # noqa: E402

app = ztq.App("ztq-compat", prefix="zc")
seen: list[tuple[str, Any]] = []  # what the tasks below were called with, in order


@async_(app=app)
def say(body: str) -> None:
    seen.append(("say", body))


@async_(queue="mail", app=app)
def send2(body: str) -> None:
    raise Exception("connection error")


@async_(queue="mail", app=app)
def fail_callback(return_code: str, return_msg: str) -> None:  # as ZTQ's README declares it
    seen.append(("fail_callback", (return_code, return_msg)))


@async_(queue="mail", app=app)
def failed_positional(note: str, code: str, msg: str) -> None:  # no ZTQ names: positional
    seen.append(("failed_positional", (note, code, msg)))


@async_(queue="mail", app=app)
def doc2pdf(filename: str) -> None:
    assert compat.report_job(4242, comment=filename, pages=3)
    assert compat.report_progress(page=2)


@async_(queue="mail", app=app)
def on_page(body: str, page: int) -> None:  # ZTQ's pcallback: progress data as keywords
    seen.append(("on_page", (body, page)))


@app.task(queue="mail", name="tests.ztq_native_failed")
def native_failed(error_code: str, error_message: str) -> None:  # a ztq task as a callback
    seen.append(("native_failed", (error_code, error_message)))


@pytest.fixture
def zapp(redis_url: str) -> Iterator[ztq.App]:
    app.connect(redis_url)
    seen.clear()
    yield app
    app.disconnect_all()
    app.use_transaction_manager(False)
    for entry in app.cron_entries():
        app.remove_cron(entry.name)


def drain(zapp: ztq.App) -> int:
    return worker_for(zapp, zapp.storage(), ["default", "mail"]).drain(run_delayed=True)


def payload(zapp: ztq.App, handle: ztq.TaskHandle) -> dict[str, Any]:
    rec = zapp.storage().tasks.record(handle.queue, handle.id)
    assert rec is not None
    return decode_payload(rec.payload_text)


def test_async_declares_a_task_whose_call_enqueues(zapp: ztq.App) -> None:
    h = say("hello, world")
    assert isinstance(say, compat.ZtqTask) and say._ztq_queue == "default"
    assert zapp.ping(h) == "queued" and say.name == f"{__name__}.say" and seen == []
    say.__raw__("inline")  # ZTQ's way to run the function itself
    assert drain(zapp) == 1 and seen == [("say", "inline"), ("say", "hello, world")]
    assert say("again", ztq_queue="mail").queue == "mail"  # ZTQ's dynamic queue


def test_ztq_first_puts_the_call_at_the_head(zapp: ztq.App) -> None:
    say("a")
    say("b")
    assert say("c", ztq_first=True).outcome == "added"
    assert say("a", ztq_first=True).outcome == "moved"  # pending already: moved to the head
    drain(zapp)
    assert [body for _, body in seen] == ["a", "c", "b"]


def test_callbacks_map_onto_callback_on_failure_and_on_progress(zapp: ztq.App) -> None:
    ok = prepare_task(say, "succeeded", ztq_queue="mail")
    h = say("x", ztq_callback=ok, ztq_fcallback=prepare_task(fail_callback))
    opts = payload(zapp, h)["opts"]
    assert opts["callback"]["task"].endswith(".say") and opts["callback"]["queue"] == "mail"
    assert opts["on_failure"]["task"].endswith(".fail_callback")
    drain(zapp)
    assert seen == [("say", "x"), ("say", "succeeded")]  # no failure: no fcallback


def test_fcallback_gets_ztqs_return_code_and_return_msg(zapp: ztq.App) -> None:
    """ZTQ's worker called the fcallback with return_code and return_msg after its own
    arguments; ztq's on_failure sends error_code/error_message: the bridge is the task's."""
    send2("boom", ztq_fcallback=prepare_task(fail_callback))
    send2("boom2", ztq_fcallback=(failed_positional, ("note",), {}))  # ZTQ's own tuple form
    send2("boom3", ztq_fcallback=native_failed.prepare())
    drain(zapp)
    message = "Exception: connection error"
    assert sorted(seen) == [
        ("fail_callback", ("Exception", message)),
        ("failed_positional", ("note", "Exception", message)),
        ("native_failed", ("Exception", "connection error")),  # ztq's keywords for ztq tasks
    ]
    assert monitor.queue_stats(zapp.storage(), ["mail"])[0].errors == 3


def test_pcallback_gets_the_progress_as_keywords_and_report_job_a_comment(
    zapp: ztq.App,
) -> None:
    h = doc2pdf("a.doc", ztq_pcallback=prepare_task(on_page, "a.doc"))
    worker = worker_for(zapp, zapp.storage(), ["mail"])
    comments: list[str] = []
    original = zapp.storage().leases.set_run_info

    def spy(queue: str, task_id: str, token: int, wid: str, field: str, value: str) -> bool:
        if field == "comment":
            comments.append(value)
        return bool(original(queue, task_id, token, wid, field, value))

    zapp.storage().leases.set_run_info = spy  # type: ignore[method-assign]
    try:
        worker.drain(["mail"])
    finally:
        del zapp.storage().leases.set_run_info
    assert zapp.ping(h) == "done" and seen == [("on_page", ("a.doc", 2))]
    assert comments == ["a.doc pages=3"]
    assert not compat.report_progress(page=1) and not compat.report_job(1234)  # not in a task


def test_the_signature_workers_check_takes_ztqs_callback_keywords() -> None:
    """A worker checks a payload's arguments before the run (WrongArguments): the check
    sees the arguments as the function will, after the bridge."""
    sig = fail_callback.task.signature
    assert str(sig) == "(return_code: 'str', return_msg: 'str') -> 'None'"
    assert sig.bind(error_code="E", error_message="m").arguments == {
        "return_code": "E", "return_msg": "E: m"}  # fmt: skip
    assert failed_positional.task.signature.bind("n", error_code="E", error_message="").args == (
        "n", "E", "E")  # fmt: skip
    assert on_page.task.signature.bind("b", progress={"page": 2}).arguments["page"] == 2
    with pytest.raises(TypeError, match="return_msg"):
        sig.bind("E")  # still a wrong call
    assert str(native_failed.signature) == "(error_code: 'str', error_message: 'str') -> 'None'"


def test_ping_task_answers_in_ztqs_words(zapp: ztq.App) -> None:
    assert ping_task(say, "p") == "none"
    assert ping_task(say, "p", ztq_run=True) == "none" and ping_task(say, "p") == "queue"
    say("q")
    assert ping_task(say, "q", ztq_first=True) == "queue"  # and moved to the head
    drain(zapp)
    assert [body for _, body in seen] == ["q", "p"]
    assert ping_task(say, "p") == "none"  # done: not pending any more
    send2("e")
    drain(zapp)
    assert ping_task(send2, "e", ztq_run=True) == "error"  # left in the error list
    assert monitor.queue_stats(zapp.storage(), ["mail"])[0].pending == 0
    assert ping_task(say, "later", ztq_queue="mail", ztq_run=True) == "none"
    assert ping_task(say, "later", ztq_queue="mail") == "queue"


def test_cron_entries_from_ztqs_cron_info(zapp: ztq.App) -> None:
    assert not compat.has_cron(say)
    entry = compat.add_cron({"hour": 1}, say, "aof")
    assert entry.spec == "0 1 * * *" and entry.call.args == ("aof",) and compat.has_cron(say)
    assert compat.add_cron({"minute": 30}, say, "x").spec == "30 * * * *"
    assert len(zapp.cron_entries()) == 1  # one entry per task, as in ZTQ
    compat.remove_cron(say)
    assert not compat.has_cron(say)
    for bad in ({"day": 1}, {"hour": 24}, {"minute": "soon"}, "hourly"):
        with pytest.raises(InvalidOption, match="cron_info"):
            compat.add_cron(bad, say)  # type: ignore[arg-type]


def test_ztqs_queue_colon_name_strings_name_default_app_tasks(redis_url: str) -> None:
    """ZTQ code may name a task 'queue:function' (its cron did): the full ztq name, or the
    bare function name when one task of the default app has it."""
    assert compat.prepare_task(f"mail:{__name__}.send", "x").task == f"{__name__}.send"
    assert compat.prepare_task("default:ztq_bare_name_1").task.endswith(".ztq_bare_name_1")
    with pytest.raises(InvalidOption, match="no task named 'default:nothing_like_it'"):
        compat.prepare_task("default:nothing_like_it")
    ztq.task(name="a.dup_name")(lambda: None)
    ztq.task(name="b.dup_name")(lambda: None)
    with pytest.raises(InvalidOption, match="dup_name is the name of a.dup_name, b.dup_name"):
        compat.prepare_task("dup_name")


@ztq.task
def ztq_bare_name_1() -> None: ...


def test_enable_transaction_and_ztq_transaction(zapp: ztq.App) -> None:
    import transaction

    compat.enable_transaction(True, app=zapp)
    say("on commit")
    say("now", ztq_transaction=False)
    assert ping_task(say, "on commit") == "none" and ping_task(say, "now") == "queue"
    transaction.commit()
    assert ping_task(say, "on commit") == "queue"
    say("aborted")
    transaction.abort()
    compat.enable_transaction(False, app=zapp)
    say("joins", ztq_transaction=True)  # one call joins though the app does not
    assert ping_task(say, "joins") == "none"
    transaction.commit()
    assert ping_task(say, "joins") == "queue" and ping_task(say, "aborted") == "none"


def test_setup_redis_names_a_connection(zapp: ztq.App, redis_url: str) -> None:
    host, port = redis_url.split("//")[1].split("/")[0].split(":")
    storage = compat.setup_redis("default", host, int(port), 0, app=zapp)
    assert storage.url == f"redis://{host}:{port}/0" and zapp.storage() is storage
    other = compat.setup_redis("other", host, int(port), 1, app=zapp, password=None)
    assert other.client.connection_pool.connection_kwargs["db"] == 1
    with pytest.raises(InvalidOption, match="socket_timeout"):
        compat.setup_redis("x", host, int(port), 0, app=zapp, socket_timeout=1)


def test_what_compat_cannot_map_says_so(zapp: ztq.App) -> None:
    with pytest.raises(InvalidOption, match="ztq_buffer=True: ztq has no buffer queues"):
        say("x", ztq_buffer=True)
    with pytest.raises(InvalidOption, match="ztq_run has no meaning here"):
        say("x", ztq_run=True)
    with pytest.raises(InvalidOption, match="ztq_colour looks like one of ZTQ's options"):
        say("x", ztq_colour=1)
    with pytest.raises(InvalidOption, match="not a task"):
        prepare_task(print)
    with pytest.raises(ztq.UnsupportedTask, match="async def"):

        @async_(app=zapp)
        async def crawl() -> None: ...
