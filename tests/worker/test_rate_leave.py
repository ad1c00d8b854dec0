"""A thread serving two queues that registered for one queue's next rate-limit token and
then ran the other queue's task leaves the registration, and an idle executor takes the
token at once (the tokens went unused until an idle wait ended: docs/queue-controls.md)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from tests.worker.conftest import wait_for
from ztq.worker.config import ThreadSpec
from ztq.worker.worker import Worker


@pytest.mark.slow
def test_a_token_is_not_left_unused_while_the_registered_thread_runs_other_work(
    start_worker: Callable[..., Worker], tmp_path: Path
) -> None:
    ztq.configure_queue("limited", rate_limit="4/s")
    handles = [t.add.enqueue((i, 0), queue="limited") for i in range(5)]
    busy = t.sleepy.enqueue((4.0, str(tmp_path / "busy")), queue="other")
    # one thread serves both: it takes the burst's token, registers for the next one, then
    # runs the other queue's long task
    start_worker(threads=[ThreadSpec("mixed", ("limited", "other"))], idle_wait=8.0)
    wait_for(lambda: busy.state.value == "running", timeout=10, every=0.02)
    began = time.monotonic()
    start_worker(threads=[ThreadSpec("only", ("limited",))], idle_wait=8.0)
    wait_for(lambda: all(h.state.value == "done" for h in handles), timeout=30, every=0.05)
    took = time.monotonic() - began
    # 4 tasks left at 4/s: about 1 s; with the token left to the busy thread they waited
    # for it (4 s) or for the other thread's idle wait (8 s)
    assert took < 3.0, took
    busy.get(timeout=10)
