"""The thread executor's fetch sent ahead (issue 38): while quick tasks run, the next batch
is fetched with the acks of the last, and Redis runs both while the tasks run. What it must
not change: each task runs once, in queue order; a paused, stopping or slow executor holds
nothing it will not run now (what came ahead goes back to the head of the queue)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from ztq.worker.config import ThreadSpec, WorkerConfig
from ztq.worker.executors.threads import Executor
from ztq.worker.worker import Worker


@pytest.fixture
def executor(redis_url: str) -> Iterator[Executor]:
    """An executor of queue default stepped by the test (no thread of its own)."""
    spec = ThreadSpec("t", ("default",), "thread")
    cfg = WorkerConfig(
        redis_url=redis_url, name="inline", imports=("tests.sample_tasks",), threads=(spec,)
    )
    yield Executor(Worker(cfg, ztq.get_storage()), cfg.threads[0])


def running() -> int:
    storage = ztq.get_storage()
    return storage.client.zcard(storage.keys.running("default"))


def ran(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def step_until_ahead(ex: Executor) -> None:
    for _ in range(10):
        ex.step()
        if ex.ahead is not None:
            return
    raise AssertionError("no fetch went ahead")


def sixty_ahead(ex: Executor, out: Path) -> tuple[list[ztq.TaskHandle], int]:
    """60 quick tasks queued and stepped until a fetch went ahead: (their handles, how
    many ran by then)."""
    handles = [t.record.delay(str(out), str(i)) for i in range(60)]
    step_until_ahead(ex)
    return handles, len(ran(out))


def test_quick_tasks_fetch_the_next_batch_ahead_and_each_runs_once_in_order(
    executor: Executor, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    handles = [t.record.delay(str(out), str(i)) for i in range(60)]
    step_until_ahead(executor)
    # between two steps this thread runs nothing; what it holds is the batch that ran (its
    # acks go with the next fetch) and the next batch, leased to it already
    ahead = executor.batch // 2  # the batch grew after the fetch went ahead
    assert executor.current is None and ahead > 1
    assert running() == len(executor.pending.settled) + ahead
    while executor.step():
        pass
    assert ran(out) == [str(i) for i in range(60)]
    assert executor.ahead is None and running() == 0
    assert {ztq.ping(h) for h in handles} == {"done"}  # every ack written


@pytest.mark.slow
def test_a_pause_gives_back_what_came_ahead_to_the_head_of_the_queue(
    executor: Executor, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    handles, done = sixty_ahead(executor, out)
    executor.host.paused.set()
    assert executor.step() == 0
    assert executor.ahead is None and running() == 0
    assert [ztq.ping(h) for h in handles[done:]] == ["queued"] * (60 - done)
    executor.host.paused.clear()
    while executor.step():
        pass
    assert ran(out) == [str(i) for i in range(60)]


@pytest.mark.slow
def test_a_slow_batch_gives_back_what_came_ahead(executor: Executor, tmp_path: Path) -> None:
    out = tmp_path / "out"
    for i in range(7):
        t.record.delay(str(out), str(i))
    t.sleepy.delay(0.5)  # its batch averages more than QUICK a task: the batch drops to 1
    for i in range(7, 40):
        t.record.delay(str(out), str(i))
    dropped, before = 0, executor.batch
    while executor.step():
        if executor.batch == 1 and before > 1:
            dropped += 1
            assert executor.ahead is None  # given back: held only the ran ones' acks
            assert running() == len(executor.pending.settled)
        before = executor.batch
    assert dropped == 1
    assert ran(out) == [str(i) for i in range(40)]


def test_a_stopping_executor_gives_back_what_came_ahead(executor: Executor, tmp_path: Path) -> None:
    out = tmp_path / "out"
    handles, done = sixty_ahead(executor, out)
    executor.host.stopping.set()
    executor.shutdown()
    assert executor.ahead is None and running() == 0
    assert [ztq.ping(h) for h in handles[:done]] == ["done"] * done  # acks written at exit
    assert [ztq.ping(h) for h in handles[done:]] == ["queued"] * (60 - done)
