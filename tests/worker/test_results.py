"""Results: get()/wait() block on the queue's history stream (no polling) and return the
result, None included, or raise TaskFailed / ResultTimeout / NotFound; per-task result_ttl;
callbacks that receive their parent's result (real Redis, in-process worker)."""

from __future__ import annotations

from pathlib import Path

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from ztq.core import TaskHandle
from ztq.core.errors import NotFound, ResultTimeout, TaskFailed


@ztq.task(name="tests.results.short_lived", result_ttl=0)
def short_lived() -> int:
    return 5


@ztq.task(name="tests.results.kept_a_minute", result_ttl=60)
def kept_a_minute() -> int:
    return 6


def test_get_returns_the_result_and_none_is_a_result(start_worker) -> None:
    start_worker()
    assert t.add.delay(2, 3).get(timeout=10) == 5
    h = t.noop.delay("x")
    assert h.get(timeout=10) is None and h.ready()


def test_a_failure_raises_the_remote_error_after_the_retries(start_worker, tmp_path: Path) -> None:
    start_worker()
    with pytest.raises(TaskFailed) as caught:
        t.boom.delay("kaput").get(timeout=10)
    err = caught.value
    assert (err.error_type, err.message) == ("ValueError", "kaput")
    assert "Traceback" in err.traceback and "kaput" in err.traceback
    flaky = t.flaky.enqueue((str(tmp_path / "n"), 2), retries=3)
    assert flaky.wait(timeout=15) == "ok"  # the retries in between are waited for


@pytest.mark.slow
def test_not_finished_times_out_and_an_unknown_id_is_not_found(start_worker) -> None:
    start_worker(grace=0.5)  # the 30 s run is not waited for at the end
    h = t.sleepy.delay(30, "")
    with pytest.raises(ResultTimeout, match="had not finished after 0.3s"):
        h.get(timeout=0.3)
    assert not h.ready()
    with pytest.raises(NotFound, match="no task 0000"):
        TaskHandle("0" * 32, "default").get(timeout=1)


@pytest.mark.slow
def test_waiting_blocks_instead_of_polling(start_worker) -> None:
    start_worker()
    storage = ztq.get_storage()
    h = t.sleepy.delay(1.0, "")
    storage.client.config_resetstat()
    assert h.get(timeout=10) == "slept"
    stats = storage.client.info("commandstats")
    reads = stats.get("cmdstat_xread", {}).get("calls", 0)
    assert 1 <= reads <= 3  # woken by the run's history entry, not a loop of reads


def test_result_ttl_per_task(start_worker) -> None:
    start_worker()
    gone = short_lived.delay()
    assert gone.get(timeout=10) is None  # finished; its record was not kept
    assert gone.record() is None
    kept = kept_a_minute.delay()
    assert kept.get(timeout=10) == 6
    storage = ztq.get_storage()
    expiry = storage.client.zscore(storage.keys.done("default"), kept.id)
    assert 59_000 <= expiry - kept.record().get("ended") <= 60_000
    other = t.add.enqueue((7, 7), result_ttl=5)  # an option of one call
    assert other.get(timeout=10) == 14
    expiry = storage.client.zscore(storage.keys.done("default"), other.id)
    assert 4_000 <= expiry - other.record().get("ended") <= 5_000


def test_a_chain_of_callbacks_carries_the_results(start_worker) -> None:
    start_worker()
    last = t.add.prepare((100,), pass_result=True)
    middle = t.add.prepare((10,), pass_result=True, callback=last)
    first = t.add.enqueue((1, 2), callback=middle)
    assert first.get(timeout=10) == 3
    assert TaskHandle(t.add.prepare((3, 10)).resolve_id(), "default").get(timeout=10) == 13
    assert TaskHandle(t.add.prepare((13, 100)).resolve_id(), "default").get(timeout=10) == 113


def test_a_result_not_kept_is_none_even_when_it_finished_before_the_wait(start_worker) -> None:
    from tests.worker.conftest import wait_for

    start_worker()
    h = short_lived.delay()
    wait_for(lambda: ztq.get_storage().waits.finished_lately("default", h.id) == "done")
    assert h.record() is None  # dropped at its ack (result_ttl 0) before anyone waited
    assert h.get(timeout=5) is None


@ztq.task(name="tests.results.returns_a_set", retries=3)
def returns_a_set() -> set[int]:
    return {1, 2}


def test_a_result_json_cannot_encode_fails_the_run_with_a_clear_error(start_worker) -> None:
    start_worker()
    h = returns_a_set.delay()
    with pytest.raises(TaskFailed) as caught:
        h.get(timeout=10)
    assert caught.value.error_type == "SerializationError"
    assert "'tests.results.returns_a_set' returned set" in caught.value.message
    assert h.record().get("attempts") == 1  # not retried: it would return a set again
