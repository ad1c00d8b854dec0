"""A process slot's hard timeout counts from when its child takes the task, not from when
the task was sent: a fresh child (after a kill, a hard timeout, a crash) may still be
importing the app then — seconds on a loaded machine — and a task with a short timeout was
killed as HardTimeout before it had started. A child that never takes its task is still
bounded (START_LIMIT)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from ztq.worker.executors import process_slot
from ztq.worker.executors.process_slot import ProcessSlot, SlotTask

NAP = "tests.slow_import_tasks.nap"


def job(seconds: float, timeout: float) -> SlotTask:
    payload = json.dumps({"task": NAP, "args": [seconds], "kwargs": {}, "opts": {}})
    return SlotTask(payload, "slow", "a" * 32, 1, "w", NAP, None, timeout)


@pytest.fixture
def slot(redis_url: str) -> Iterator[ProcessSlot]:
    s = ProcessSlot(("tests.slow_import_tasks",), redis_url, "ztq")  # imports for 2.5 s
    yield s
    s.close()


def test_a_child_still_importing_gets_the_soft_timeout_not_the_hard_one(
    slot: ProcessSlot, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(process_slot, "HARD_GRACE", 1.0)  # 0.3 + 1.0 s < the 2.5 s import
    out = slot.run(job(60, 0.3))
    assert (out.error_type, out.message) == ("SoftTimeout", "the task ran past its timeout")
    assert slot.run(job(0, 0.3)).ok  # the same child serves the next task


def test_a_child_that_never_takes_its_task_is_restarted(
    slot: ProcessSlot, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(process_slot, "START_LIMIT", 1.0)
    first = slot.pid
    out = slot.run(job(0, 0.3))
    assert out.error_type == "ChildDied" and "did not take the task in 1s" in out.message
    assert slot.pid != first
