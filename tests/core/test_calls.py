"""Pure unit tests of ids, payloads and option checks (no Redis needed)."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from tests import sample_tasks as t
from ztq.core import (
    InvalidName,
    InvalidOption,
    SerializationError,
    TaskCall,
    lookup,
    task,
    task_id_for,
)
from ztq.core.engine.record import decode_payload
from ztq.core.errors import ConfigError, UnknownOption, WrongArguments


def test_id_is_md5_of_documented_canonical_json() -> None:
    canonical = '{"args":[1,2],"kwargs":{"x":"\\u00e9"},"queue":"default","task":"m.f"}'
    expected = hashlib.md5(canonical.encode()).hexdigest()
    assert task_id_for("default", "m.f", [1, 2], {"x": "é"}) == expected


def test_same_call_same_id_other_args_other_id() -> None:
    a = t.add.prepare((1, 2)).resolve_id()
    assert a == t.add.prepare([1, 2]).resolve_id()
    assert a != t.add.prepare((2, 1)).resolve_id()
    assert a != t.add.prepare((1, 2), queue="other").resolve_id()


def test_options_do_not_change_the_id_but_unique_false_does() -> None:
    base = t.add.prepare((1, 2)).resolve_id()
    assert t.add.prepare((1, 2), priority="high", delay=5).resolve_id() == base
    ids = {t.add.prepare((1, 2), unique=False).resolve_id() for _ in range(3)}
    assert len(ids) == 3 and base not in ids
    assert all(len(i) == 32 and set(i) <= set("0123456789abcdef") for i in ids)


def test_names_are_module_qualified() -> None:
    assert t.send.name == "tests.sample_tasks.send"
    assert t.send_other.name == "tests.other.send"
    assert lookup("tests.sample_tasks.add") is t.add


def test_name_collision_is_refused() -> None:
    with pytest.raises(ConfigError, match="taken"):

        @task(name="tests.sample_tasks.add")
        def other(a: int, b: int) -> int:
            return 0


def test_the_payload_is_a_list_that_ends_at_its_last_non_empty_part() -> None:
    """``[task, args, kwargs, opts]`` (memory: every waiting task carries its payload):
    kwargs and options only when the call has them, ``{}`` for kwargs when options follow;
    a task's template writes the same text as prepare()."""
    add = '["tests.sample_tasks.add",'
    assert t.add.prepare((1, 2)).payload() == add + "[1,2]]"
    assert t.add.prepare((), {"b": 2}).payload() == add + '[],{"b":2}]'
    assert t.add.prepare((1,), retries=3).payload() == add + '[1],{},{"retries":3}]'
    assert t.add.prepare((1,), {"b": 2}, retries=3).payload() == add + '[1],{"b":2},{"retries":3}]'
    opts = '{"retries":2,"timeout":5.0,"result_ttl":0.0}'
    for kwargs, text in (({}, "[1],{}," + opts), ({"x": 1}, '[1],{"x":1},' + opts)):
        made = with_options.template().call((1,), kwargs)
        assert made.payload() == '["tests.calls.with_options",' + text + "]"
        assert decode_payload(made.payload()) == {
            "task": "tests.calls.with_options", "args": [1], "kwargs": kwargs,
            "opts": {"retries": 2, "timeout": 5.0, "result_ttl": 0.0},
        }  # fmt: skip


def test_payload_is_compact_json_with_options() -> None:
    cb = t.record.prepare(("/tmp/x", "done"))
    payload = decode_payload(t.add.prepare((1, 2), retries=3, callback=cb).payload())
    assert payload["task"] == "tests.sample_tasks.add"
    assert payload["args"] == [1, 2]
    assert payload["opts"]["retries"] == 3
    assert payload["opts"]["callback"]["task"] == "tests.sample_tasks.record"
    assert TaskCall.from_dict(payload["opts"]["callback"]) == cb


def test_unserialisable_argument_is_refused_at_enqueue_time() -> None:
    with pytest.raises(SerializationError, match="never pickles"):
        t.add.prepare((object(), 1))
    with pytest.raises(SerializationError):
        t.add.prepare((float("nan"), 1))


@pytest.mark.parametrize(
    "options, message",
    [
        ({"priority": "urgent"}, "priority"),
        ({"delay": -1}, "delay"),
        ({"delay": "soon"}, "delay"),
        ({"timeout": 0}, "timeout"),
        ({"retries": -2}, "retries"),
        ({"retries": 1.5}, "retries"),
        ({"delay": 1, "eta": 2_000_000_000}, "not both"),
        ({"callback": "tests.sample_tasks.add"}, "prepared task"),
    ],
)
def test_bad_option_values(options: dict, message: str) -> None:
    with pytest.raises(InvalidOption, match=message):
        t.add.prepare((1, 2), **options)


def test_unknown_option_name_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="priorty"):
        t.add.prepare((1, 2), priorty="high")


@pytest.mark.parametrize("queue", ["", "a b", "q{x}", "a:b", "x" * 65, "é"])
def test_queue_names_that_break_keys_are_refused(queue: str) -> None:
    with pytest.raises(InvalidName):
        t.add.prepare((1, 2), queue=queue)


def test_explicit_id_is_checked() -> None:
    assert t.add.prepare((1,), id="job-1").resolve_id() == "job-1"
    with pytest.raises(InvalidName):
        t.add.prepare((1,), id="has space")


def test_eta_becomes_a_delay() -> None:
    now = 1_000_000.0
    call = t.add.prepare((1, 2), eta=now + 2.5)
    assert call.delay_ms(now) == 2500
    aware = datetime.now(timezone.utc) + timedelta(seconds=10)
    assert 9000 <= t.add.prepare((1, 2), eta=aware).delay_ms() <= 10000


def test_inline_call_runs_the_function() -> None:
    assert t.add(2, 3) == 5


@task(name="tests.calls.with_options", queue="q2", retries=2, timeout=5.0, result_ttl=0)
def with_options(*args: object, **kwargs: object) -> None:
    pass


TEMPLATE_ARGS = [
    ((1, 2), {}),
    (("héllo", 'q"uote\n'), {}),
    (("a\x7fb", 2), {}),
    (({"b": 1, "a": [2, {"d": 3, "c": 4}]}, 1.5, None, True), {}),
    ((), {"z": 1, "a": "ü"}),
    ((3,), {"nested": {"y": 2, "x": 1}}),
]


@pytest.mark.parametrize(("args", "kwargs"), TEMPLATE_ARGS)
def test_a_call_from_the_tasks_template_equals_a_prepared_one(args: tuple, kwargs: dict) -> None:
    """delay() fills a template built once per task: the call, its payload and its dedup id
    are those of prepare() (the canonical JSON shortcut for flat ASCII arguments included)."""
    for fn in (t.add, t.send, t.urgent, with_options):
        made = fn.template().call(args, dict(kwargs))
        try:
            prepared = fn.prepare(args, kwargs)
        except WrongArguments:  # not this function's arguments: the same call, unchecked
            prepared = fn.prepare().with_options(args=args, kwargs=kwargs)
        assert made == prepared and made.payload() == prepared.payload()
        assert made.resolve_id() == prepared.resolve_id()
        assert made.resolve_id() == task_id_for(made.queue, made.task, list(args), kwargs)
        assert made.delay_ms() == prepared.delay_ms() and made.priority == prepared.priority


def test_the_template_follows_the_tasks_options_and_refuses_what_prepare_refuses() -> None:
    old = t.add.queue
    try:
        t.add.queue = "elsewhere"
        assert t.add.template().call((1, 2), {}).queue == "elsewhere"
    finally:
        t.add.queue = old
    assert t.add.template().call((1, 2), {}).queue == old
    with pytest.raises(SerializationError):
        t.add.template().call((object(),), {})
    with pytest.raises(InvalidOption, match="ztq_queue is ZTQ's option"):
        t.add.template().call((), {"ztq_queue": "x"})


def test_the_prebuilt_json_encoders_write_what_json_writes() -> None:
    """core/client/calls.py builds its C encoders once: same text, same errors, as JSONEncoder."""
    from ztq.core.client.calls import _CANONICAL, _COMPACT

    def run(encode: Any, value: Any) -> tuple[str, str]:
        try:
            return "ok", encode(value)
        except Exception as exc:
            return type(exc).__name__, str(exc)

    loop: list[Any] = []
    loop.append(loop)
    values = [
        [1, 2.5, "é\u2028", None, True, {"b": 1, "a": [1e300, -0.0]}], {"x": {1: 2, "y": [[]]}},
        loop, [], {}, "top-level é", 5, [float("nan")], [object()], {(1, 2): 3},
        {1: "a", 2.5: "b", None: 1, False: 2}, [1, 2, 3],
    ]  # fmt: skip
    for value in values:
        for encoder in (_COMPACT, _CANONICAL):
            assert run(encoder.encode, value) == run(encoder.plain.encode, value), value


# -- arguments bound at the call: the fast path agrees with Signature.bind ----------------
def _plain(a, b): ...  # type: ignore[no-untyped-def]
def _defaults(a, b=1, c=2): ...  # type: ignore[no-untyped-def]
def _positional_only(a, /, b): ...  # type: ignore[no-untyped-def]
def _keyword_only(a, *, k): ...  # type: ignore[no-untyped-def]
def _keyword_default(a, *, k=1): ...  # type: ignore[no-untyped-def]
def _star(*args, **kwargs): ...  # type: ignore[no-untyped-def]
def _star_kwargs(a, b=2, **kw): ...  # type: ignore[no-untyped-def]
def _star_args(a, *rest): ...  # type: ignore[no-untyped-def]
def _none(): ...  # type: ignore[no-untyped-def]


@pytest.mark.parametrize(
    "fn",
    [
        _plain,
        _defaults,
        _positional_only,
        _keyword_only,
        _keyword_default,
        _star,
        _star_kwargs,
        _star_args,
        _none,
    ],  # fmt: skip
)
def test_the_argument_check_agrees_with_signature_bind(
    fn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the producer refuses is what ``inspect.Signature.bind`` (the worker's check)
    refuses, on every shape of call, whichever path the check takes (delay's fast path,
    enqueue's)."""
    import inspect

    from ztq.core.client import registry

    monkeypatch.setattr(registry, "send", lambda call: call)  # no Redis: the call is enough
    tf = task(name=f"tests.bind{fn.__name__}")(fn)
    sig = inspect.signature(fn)
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        (args, kwargs)
        for args in ((), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4))
        for kwargs in ({}, {"a": 1}, {"b": 2}, {"c": 3}, {"k": 4}, {"b": 2, "c": 3}, {"z": 0})
    ]
    for args, kwargs in calls:
        try:
            sig.bind(*args, **kwargs)
            fits = True
        except TypeError:
            fits = False
        for how in ("delay", "enqueue"):
            if fits:
                assert call(tf, how, args, kwargs).args == args
            else:
                with pytest.raises(WrongArguments, match=rf"^tests.bind{fn.__name__}\("):
                    call(tf, how, args, kwargs)


def call(tf: Any, how: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return tf.delay(*args, **kwargs) if how == "delay" else tf.enqueue(args, kwargs)


def test_a_typo_in_a_taskcall_option_suggests_the_name() -> None:
    with pytest.raises(UnknownOption, match="^unknown option 'retires' for TaskCall; did you"):
        TaskCall("m.f", retires=2)
    with pytest.raises(UnknownOption, match="'prority' for TaskCall; did you mean 'priority'"):
        TaskCall("m.f").with_options(prority="high")
    with pytest.raises(SerializationError):  # a TypeError of its own is not an option's
        TaskCall("m.f", (object(),))


def test_a_tasks_options_are_one_value_that_its_calls_start_from() -> None:
    """Issue 37: @task's keywords become one TaskOptions, checked once; a call is those
    options, changed by the ones it names; setting one option of a task checks it too."""
    from ztq.core.client.options import TaskOptions

    @task(queue="opts", priority="high", retries=2, expires=timedelta(seconds=30))
    def optioned(n: int) -> int:
        return n

    assert optioned.options == TaskOptions(queue="opts", priority="high", retries=2, expires=30)
    assert optioned.options.priority.value == "high" and optioned.options.expires == 30.0
    call = optioned.prepare((1,), retries=5)
    assert isinstance(call, TaskOptions)
    assert (call.queue, call.priority.value, call.retries, call.expires) == ("opts", "high", 5, 30)
    assert optioned.template().call((1,), {}) == optioned.prepare((1,))
    with pytest.raises(UnknownOption, match="'retires' for TaskOptions; did you mean 'retries'"):
        TaskOptions(retires=1)
    with pytest.raises(InvalidOption, match="retries must be an int >= 0"):
        TaskOptions(retries=-1)
    with pytest.raises(InvalidName):
        optioned.queue = "a b"
    assert optioned.queue == "opts"
    optioned.retries = 4
    assert optioned.options.retries == 4 and optioned.template().call((1,), {}).retries == 4
