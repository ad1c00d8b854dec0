"""Bad input on the core side: unreachable Redis, bad URLs, corrupt records."""

from __future__ import annotations

import time

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from ztq.core.engine.record import TaskRecord
from ztq.core.errors import ConfigError, ConnectionFailed
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
    assert other.record("default", h.id) is not None
    assert ztq.get_storage().record("default", h.id) is None
