"""Coalesced enqueues (core/client/coalesce.py): concurrent ``delay()`` calls of one process
share round trips, each caller gets its own reply or its own error, arrival order is kept,
``transaction()`` keeps its batch, and the asyncio twin does the same for coroutines. On a
real Redis; a call in flight is held open (its script call waits for the test) so that the
callers that arrive meanwhile form one batch, deterministically."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import ztq.core as ztq
from ztq.core.client import enqueue
from ztq.core.client.coalesce import acoalescer, coalescer
from ztq.core.engine.storage import Storage

app = ztq.App("coalesce", prefix="co")


@pytest.fixture(autouse=True)
def coalesce_from_two_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The combiner is used from the second thread on, not from COALESCE_THREADS: these
    tests make a few threads meet in it."""
    monkeypatch.setattr(enqueue, "COALESCE_THREADS", 1)


@app.task(queue="co", unique=False)
def job(n: int, tag: str = "") -> None:
    pass


@app.task(queue="tight")
def bounded(n: int) -> None:
    pass


@app.task(queue="broken")
def wrong(n: int) -> None:
    pass


def until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.002)


@pytest.fixture
def storage(redis_url: str) -> Iterator[Storage]:
    app.connect(redis_url)
    yield app.storage()
    app.disconnect_all()


class Held:
    """Holds the next lone call on ``storage`` in flight until :meth:`release`: the calls
    that arrive meanwhile queue up and go out together as the next batch."""

    def __init__(self, storage: Storage, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered, self.gate = threading.Event(), threading.Event()
        real = storage.call

        def held(*args: Any) -> Any:
            if not self.entered.is_set():
                self.entered.set()
                assert self.gate.wait(10)
            return real(*args)

        monkeypatch.setattr(storage, "call", held)
        self.coalescer = coalescer(storage)

    def queued(self, n: int) -> None:
        until(lambda: len(self.coalescer._waiting) >= n)

    def release(self) -> None:
        self.gate.set()


def run(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """``fn()`` in a thread; the dict gets its ``result`` or its ``error``."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["result"] = fn()
        except BaseException as exc:
            out["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, out


def ready_args(storage: Storage, queue: str) -> list[list[Any]]:
    """The arguments of the tasks in a queue's normal ready list, in order."""
    client = redis.Redis.from_url(storage.url, decode_responses=True)
    ids = client.lrange(storage.keys.ready(queue, "normal"), 0, -1)
    out = []
    for task_id in ids:
        rec = storage.tasks.record(queue, task_id)
        assert rec is not None
        out.append(rec.args)
    client.close()
    return out


@pytest.mark.slow
def test_callers_in_one_batch_get_their_own_reply_or_error(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three callers queue behind a call in flight and go out as one batch: one gets its
    handle, one its queue's QueueFull, one the script error of its broken queue. A fourth,
    whose argument cannot be encoded, fails in its own thread without joining."""
    app.configure_queue("tight", max_pending=1)
    bounded.delay(0)  # the queue is full now
    client = redis.Redis.from_url(storage.url)
    client.set(storage.keys.tasks("broken"), "not a hash")  # its script call fails: WRONGTYPE
    client.close()
    held = Held(storage, monkeypatch)
    first, first_out = run(lambda: job.delay(-1))
    assert held.entered.wait(10)
    threads = []
    for fn in (lambda: job.delay(1), lambda: bounded.delay(1), lambda: wrong.delay(1)):
        threads.append(run(fn))
        held.queued(len(threads))  # in this order
    bad, bad_out = run(lambda: job.delay(object()))
    bad.join(10)
    assert isinstance(bad_out["error"], ztq.SerializationError)
    batches = held.coalescer.batches
    held.release()
    for thread, _ in [(first, first_out), *threads]:
        thread.join(10)
    assert held.coalescer.batches == batches + 1  # the three went out together
    (_, ok), (_, full), (_, broken) = threads
    assert first_out["result"].outcome == "added"
    assert ok["result"].outcome == "added" and ok["result"].state == ztq.TaskState.QUEUED
    assert isinstance(full["error"], ztq.QueueFull) and full["error"].queue == "tight"
    assert isinstance(broken["error"], redis.ResponseError) and "WRONGTYPE" in str(broken["error"])
    assert storage.queues.pending_count("tight") == 1  # the refused one wrote nothing
    assert [a for a in ready_args(storage, "co")] == [[-1], [1]]


def test_a_batch_is_written_in_arrival_order(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = Held(storage, monkeypatch)
    first, _ = run(lambda: job.delay(0))
    assert held.entered.wait(10)
    threads = []
    for n in range(1, 7):
        threads.append(run(lambda n=n: job.delay(n))[0])
        held.queued(n)
    held.release()
    for thread in [first, *threads]:
        thread.join(10)
    assert ready_args(storage, "co") == [[n] for n in range(7)]


def test_a_batch_is_one_script_call_per_queue(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six callers of two queues queued behind a call in flight: their batch is one script
    call per queue (what a call costs Redis beside its tasks is paid once per queue and
    round trip), each caller still gets its own reply, in arrival order."""
    client = redis.Redis.from_url(storage.url, decode_responses=True)
    held = Held(storage, monkeypatch)
    first, _ = run(lambda: job.delay(0))
    assert held.entered.wait(10)
    threads = []
    for n in range(1, 7):
        fn = (lambda n=n: job.delay(n)) if n % 2 else (lambda n=n: bounded.delay(n))
        threads.append(run(fn))
        held.queued(n)
    client.config_resetstat()
    held.release()
    for thread, _ in [(first, {}), *threads]:
        thread.join(10)
    # each enqueue script run reads Redis's clock once (a call that found no function and
    # was sent again ran once)
    assert client.info("commandstats")["cmdstat_time"]["calls"] == 3  # the first, one per queue
    assert [out["result"].outcome for _, out in threads] == ["added"] * 6
    assert [out["result"].queue for _, out in threads] == ["co", "tight"] * 3
    assert ready_args(storage, "co") == [[0], [1], [3], [5]]
    assert ready_args(storage, "tight") == [[2], [4], [6]]
    client.close()


@pytest.mark.slow
def test_each_threads_enqueues_keep_their_order_under_load(storage: Storage) -> None:
    """8 threads, 150 enqueues each, no worker: calls are coalesced (more than one batch of
    several), and each thread's tasks are in the queue in the order it made them."""
    shared = coalescer(storage)
    before = shared.batches
    start = threading.Barrier(8)

    def producer(tag: str) -> None:
        start.wait()
        for n in range(150):
            job.delay(n, tag)

    threads = [run(lambda t=str(t): producer(t))[0] for t in range(8)]
    for thread in threads:
        thread.join(30)
    seen: dict[str, list[int]] = {}
    for n, tag in ready_args(storage, "co"):
        seen.setdefault(tag, []).append(n)
    assert seen == {str(t): list(range(150)) for t in range(8)}
    assert shared.batches > before


@pytest.mark.slow
def test_a_transaction_is_not_split_by_coalesced_callers(storage: Storage) -> None:
    """While 6 threads enqueue one by one (coalesced), transactions of 5 tasks are written
    as one script call each: their tasks sit together in the queue, and a transaction left
    by an exception writes nothing."""
    stop = threading.Event()
    made: list[int] = []

    def producer() -> None:
        while not stop.is_set():
            job.delay(0, "single")
            made.append(1)

    threads = [run(producer)[0] for _ in range(6)]
    try:
        for t in range(30):
            seen = len(made)
            until(lambda seen=seen: len(made) > seen)  # single enqueues go on meanwhile
            with ztq.transaction():
                for n in range(5):
                    job.delay(n, f"txn{t}")
            with pytest.raises(KeyError), ztq.transaction():
                job.delay(99, "dropped")
                raise KeyError
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    tags = [tag for _, tag in ready_args(storage, "co")]
    assert "dropped" not in tags
    for t in range(30):
        at = tags.index(f"txn{t}")
        assert tags[at : at + 5] == [f"txn{t}"] * 5
    assert tags.count("single") >= 30


def test_coroutines_of_one_loop_share_round_trips(storage: Storage) -> None:
    """100 concurrent ``adelay`` in one event loop: fewer round trips than calls, every
    task written, each in the order the coroutines called; one with a broken queue gets
    its own error and the others their handles."""
    client = redis.Redis.from_url(storage.url)
    client.set(storage.keys.tasks("broken"), "not a hash")
    client.close()

    async def go() -> tuple[list[Any], int, int]:
        shared = await enqueue.astorage(app)
        await shared.queues.register_queue("broken")
        await job.adelay(-1)  # the queues are known now: the calls below join in order
        before = acoalescer(shared).batches
        calls = [job.adelay(n) for n in range(50)]
        calls += [wrong.adelay(1)]
        calls += [job.adelay(n) for n in range(50, 100)]
        got = await asyncio.gather(*calls, return_exceptions=True)
        return got, before, acoalescer(shared).batches

    got, before, after = asyncio.run(go())
    assert after > before
    errors = [g for g in got if isinstance(g, BaseException)]
    assert len(errors) == 1 and "WRONGTYPE" in str(errors[0])
    assert got[50] is errors[0]
    assert all(isinstance(h, ztq.TaskHandle) and h.outcome == "added" for i, h in
               enumerate(got) if i != 50)  # fmt: skip
    assert ready_args(storage, "co") == [[n] for n in range(-1, 100)]


def test_an_interrupted_caller_leaves_the_queue_and_blocks_no_one(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller interrupted while queued (Ctrl-C in the main thread) leaves: its call is not
    sent and raises; the callers behind it are answered."""
    from ztq.core.client import coalesce

    class Interrupted(coalesce._Slot):
        def __init__(self, op: Any) -> None:
            super().__init__(op)
            if ",[-2]" in op[2][1]:  # job.delay(-2) (its payload): its wait is interrupted
                gate = self.gate

                class Gate:
                    def acquire(self) -> bool:
                        raise KeyboardInterrupt

                    def release(self) -> None:
                        gate.release()

                self.gate = Gate()  # type: ignore[assignment]

    monkeypatch.setattr(coalesce, "_Slot", Interrupted)
    held = Held(storage, monkeypatch)
    first, _ = run(lambda: job.delay(0))
    assert held.entered.wait(10)
    interrupted, out = run(lambda: job.delay(-2))
    interrupted.join(10)
    assert isinstance(out["error"], KeyboardInterrupt)
    after, after_out = run(lambda: job.delay(1))
    held.queued(1)
    held.release()
    for thread in (first, after):
        thread.join(10)
    assert after_out["result"].outcome == "added"
    assert ready_args(storage, "co") == [[0], [1]]


def test_a_process_of_few_threads_sends_each_enqueue_alone(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Below COALESCE_THREADS threads, concurrent delay() calls skip the combiner (each goes
    alone on its own connection, which costs less CPU there): it is never made."""
    # above the threads this process runs now (earlier tests may leave some) and these 4
    monkeypatch.setattr(enqueue, "COALESCE_THREADS", threading.active_count() + 8)
    threads = [run(lambda i=i: [job.delay(i * 100 + n) for n in range(20)])[0] for i in range(4)]
    for thread in threads:
        thread.join(30)
    assert storage.coalescer is None
    assert len(ready_args(storage, "co")) == 80
