"""A bound on payloads (issue 39): a 60 MB argument was accepted (5.2 s, Redis 270 MB at
its peak, kept an hour with the finished record). Over ``max_payload`` an enqueue is refused
before anything is written; over a quarter of it one WARNING a minute per task."""

from __future__ import annotations

import logging

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from ztq.core.engine.record import _warned
from ztq.core.errors import ConfigError, PayloadError

MB = 1024 * 1024


@pytest.mark.slow
def test_a_payload_over_max_payload_is_refused_and_nothing_is_written(redis_url: str) -> None:
    storage = ztq.get_storage()
    before = storage.client.dbsize()
    with pytest.raises(PayloadError) as info:
        t.add.delay("x" * (5 * MB), 1)
    assert "over max_payload (4.0 MB, 4194304 bytes)" in str(info.value)
    assert "ZTQ_MAX_PAYLOAD" in str(info.value)
    with pytest.raises(PayloadError), ztq.transaction():  # refused at the line, not at commit
        t.add.delay(1, 2)
        t.add.delay("é" * (3 * MB), 2)  # 3 M characters, 6 MB of UTF-8: bytes are counted
    assert storage.client.dbsize() == before  # the transaction's first task is not written
    assert t.add.delay("x" * (3 * MB), 1).id  # under the default: accepted


def test_the_limit_is_the_apps_then_the_environment(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = ztq.App("small", redis_url=redis_url, max_payload=256 * 1024)
    small = app.task(queue="default", name="small.echo")(lambda text: text)
    with pytest.raises(PayloadError, match=r"over max_payload \(0.2 MB, 262144 bytes\)"):
        small.delay("x" * 300_000)
    monkeypatch.setenv("ZTQ_MAX_PAYLOAD", "300000")
    env_app = ztq.App("env", redis_url=redis_url)
    echo = env_app.task(queue="default", name="env.echo")(lambda text: text)
    with pytest.raises(PayloadError, match="300000 bytes"):
        echo.delay("x" * 400_000)
    with pytest.raises(ConfigError, match="max_payload must be a whole number between 262144"):
        ztq.App("bad", max_payload=1000)


def test_a_big_payload_under_the_limit_logs_one_warning_a_minute(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    _warned.pop(t.add.name, None)
    with caplog.at_level(logging.WARNING, logger="ztq.core.engine.record"):
        for n in range(3):
            t.add.delay("x" * (1 * MB + 10), n)
        t.add.delay("small", 9)
    warned = [r.getMessage() for r in caplog.records if "over a quarter" in r.getMessage()]
    assert len(warned) == 1
    assert warned[0].startswith("the payload of tests.sample_tasks.add is 1.0 MB (1048")
