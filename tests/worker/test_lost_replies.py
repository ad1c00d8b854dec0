"""A worker whose fetch or ack reply is lost (issue 28, point 4): the tasks it had fetched
run at once, once each (not after their lease ran out, with ``attempts`` 2), and no ack of a
task that ended done is reported refused. Redis is reached through the proxy of
``tests/core/test_lost_replies.py``, which drops one chosen reply after Redis applied it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from tests.proxy import ReplyDropper
from tests.worker.conftest import wait_for
from ztq.core.engine.record import split_record


@pytest.mark.parametrize("script", ["fetch", "ack"])
def test_a_lost_reply_costs_the_worker_nothing(
    proxy: ReplyDropper,
    start_worker: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
    script: str,
) -> None:
    handles = [t.add.delay(i, i) for i in range(6)]  # waiting: the first fetch takes a batch
    proxy.arm(script)
    with caplog.at_level(logging.WARNING):
        start_worker({"default": 1})
        wait_for(lambda: all(ztq.ping(h) == "done" for h in handles), timeout=20)
    assert proxy.dropped == 1
    storage = ztq.get_storage()
    for h in handles:
        meta = split_record(storage.client.hget(storage.keys.tasks("default"), h.id))[0]
        assert meta["attempts"] == 1, (h.id, meta)  # leased once, run once
    ended = [f["id"] for _, f in storage.client.xrange(storage.keys.history("default"))]
    assert sorted(i for i in ended if i in {h.id for h in handles}) == sorted(h.id for h in handles)
    assert "refused" not in caplog.text and "expired" not in caplog.text
