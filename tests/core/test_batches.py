"""Batches on real Redis (7, 6.2, Cluster): creation, counters, callbacks exactly once,
redo, chords, nesting, replays, waits (docs/batches.md)."""

from __future__ import annotations

import asyncio
import threading

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from ztq.core.client.batch import batch_status, callback_id, relay
from ztq.core.engine.connection import make_client
from ztq.core.engine.storage import Finished, Storage

W = "worker-b"


def run_all(storage: Storage, queue: str = "default", *, fail: set[str] = frozenset(),
            results: dict[str, str] | None = None) -> int:  # fmt: skip
    """Lease every ready task of ``queue``; ack it (its result from ``results``) or fail it
    into the error list when its id is in ``fail``; then relay. Returns how many ran."""
    n = 0
    while leases := storage.leases.fetch(queue, W, "t0", 30_000, 100):
        for lease in leases:
            n += 1
            if lease.id in fail:
                storage.leases.fail(queue, W, lease.id, lease.token, "x", "Boom: no", "")
            else:
                res = (results or {}).get(lease.id, "")
                storage.leases.ack(queue, W, [Finished(lease.id, lease.token, "x", res)])
    relay(storage, [queue])
    return n


def callbacks(storage: Storage, queue: str = "cb") -> list[str]:
    """The ids of the callbacks enqueued in ``queue`` (ready), in order."""
    return [lease.id for lease in storage.leases.fetch(queue, W, "t9", 30_000, 100)]


def test_counters_and_on_complete_once_with_failures(storage: Storage) -> None:
    done = t.record.prepare(("/dev/null", "complete"), queue="cb")
    ok = t.record.prepare(("/dev/null", "success"), queue="cb")
    with ztq.batch(on_complete=done, on_success=ok, description="thumbs") as b:
        handles = [t.add.delay(i, i) for i in range(5)]
    assert len(b.handles) == 5 and b.total == 5
    s = b.status()
    assert (s.total, s.pending, s.running, s.done, s.failed, s.state) == (5, 5, 0, 0, 0, "open")
    assert s.description == "thumbs"
    run_all(storage, fail={handles[1].id, handles[3].id})
    s = b.status()
    assert (s.done, s.failed, s.pending, s.state) == (3, 2, 0, "complete")
    assert callbacks(storage) == [callback_id(b.id, "complete")]
    relay(storage, ["default"])  # again: nothing fires twice
    assert callbacks(storage) == []
    # redo the failed members: their later acks move them from failed to done
    assert storage.tasks.requeue("default", "error", [handles[1].id, handles[3].id]) == 2
    run_all(storage)
    s = b.status()
    assert (s.done, s.failed, s.state) == (5, 0, "success")
    assert callbacks(storage) == [callback_id(b.id, "success")]


def test_member_ids_include_the_batch(storage: Storage) -> None:
    outside = t.add.delay(1, 1)
    with ztq.batch() as a:
        x = t.add.delay(1, 1)
        y = t.add.delay(1, 1)  # identical within the batch: one member
    with ztq.batch() as b:
        z = t.add.delay(1, 1)
    assert x.id == y.id and len({outside.id, x.id, z.id}) == 3
    assert a.total == 1 and b.total == 1
    assert storage.batches.task_batch("default", x.id) == a.id
    assert storage.batches.task_batch("default", outside.id) == ""


def test_an_exception_writes_nothing(storage: Storage) -> None:
    with pytest.raises(RuntimeError), ztq.batch() as b:
        t.add.delay(1, 2)
        raise RuntimeError("no")
    assert storage.batches.batch_record(b.id) is None
    assert storage.queues.pending_count("default") == 0


def test_on_success_after_redo_and_pass_results_in_order(storage: Storage) -> None:
    chord = t.noop.prepare((), queue="cb")
    with ztq.batch(on_success=chord, pass_results=True) as b:
        hs = [t.add.delay(i, 10) for i in range(4)]
    results = {h.id: str(i + 10) for i, h in enumerate(hs)}
    run_all(storage, fail={hs[2].id}, results=results)
    assert callbacks(storage) == []  # one failed: no success yet
    storage.tasks.requeue("default", "error", [hs[2].id])
    run_all(storage, results=results)
    [lease] = storage.leases.fetch("cb", W, "t9", 30_000, 10)
    assert lease.id == callback_id(b.id, "success")
    assert lease.payload.startswith('["tests.sample_tasks.noop",[[10,11,12,13]]')


def test_replayed_and_stale_ends_change_nothing(storage: Storage) -> None:
    done = t.noop.prepare((), queue="cb")
    with ztq.batch(on_complete=done) as b:
        h = t.add.delay(1, 2)
    [lease] = storage.leases.fetch("default", W, "t0", 30_000, 1)
    storage.leases.ack("default", W, [Finished(h.id, lease.token, "x", "")])
    member = f"default:{h.id}"
    # the relay crashed after applying, before removing: the entry is applied again
    [entry] = [e for e in storage.client.lrange(storage.keys.batch_out("default"), 0, -1)]
    assert storage.batches.batch_end(b.id, member, "done", lease.token) == "applied"
    assert storage.batches.batch_end(b.id, member, "done", lease.token) == "stale"
    assert storage.batches.batch_end(b.id, member, "failed", lease.token - 1) == "stale"
    relay(storage, ["default"])
    relay(storage, ["default"])
    assert storage.client.llen(storage.keys.batch_out("default")) == 0
    s = b.status()
    assert (s.done, s.failed, s.state) == (1, 0, "success")
    # the callback ran and its record is gone (result TTL 0) ...
    [cb] = storage.leases.fetch("cb", W, "t9", 30_000, 10)
    assert cb.id == callback_id(b.id, "complete")
    storage.leases.ack("cb", W, [Finished(cb.id, cb.token, "x", "")], result_ttl_ms=0)
    assert storage.tasks.record("cb", cb.id) is None
    # ... then its send is replayed (its outbox entry back): the once-guard refuses it
    storage.client.rpush(storage.keys.batch_send, f"cb\t{b.id}\tcomplete")
    relay(storage)
    assert callbacks(storage) == []
    assert entry


def test_deleting_a_pending_member_counts_as_failed(storage: Storage) -> None:
    with ztq.batch(on_complete=t.noop.prepare((), queue="cb")) as b:
        a, c = t.add.delay(1, 1), t.add.delay(2, 2)
    assert a.cancel()
    run_all(storage)
    s = b.status()
    assert (s.done, s.failed, s.state) == (1, 1, "complete")
    assert callbacks(storage) == [callback_id(b.id, "complete")]
    assert c.id


def test_empty_batch_completes_at_once(storage: Storage) -> None:
    with ztq.batch(on_success=t.noop.prepare((), queue="cb")) as b:
        pass
    assert b.status().state == "success"
    assert callbacks(storage) == [callback_id(b.id, "success")]


def test_nested_batch_completes_before_its_parent(storage: Storage) -> None:
    import ztq.core.client.batch as cb

    with ztq.batch(on_complete=t.noop.prepare(("parent",), queue="cb")) as parent:
        m = t.add.delay(1, 1)
    # the member runs and opens a child batch (as a running task would)
    [lease] = storage.leases.fetch("default", W, "t0", 30_000, 1)
    saved = cb.run_locator
    cb.run_locator = lambda: (storage, "default", m.id)
    try:
        with ztq.batch(on_complete=t.noop.prepare(("child",), queue="cb")) as child:
            k = t.add.delay(
                5,
                5,
            )
    finally:
        cb.run_locator = saved
    assert child.parent == parent.id and parent.status().total == 2
    storage.leases.ack("default", W, [Finished(m.id, lease.token, "x", "")])
    relay(storage, ["default"])
    assert parent.status().state == "open"  # waits for the child
    run_all(storage)
    assert child.status().state == "success" and parent.status().state == "success"
    assert callbacks(storage) == [callback_id(child.id, "complete"),
                                  callback_id(parent.id, "complete")]  # fmt: skip
    assert k.id


def test_async_producers(storage: Storage) -> None:
    async def produce() -> ztq.Batch:
        async with ztq.batch(description="async") as b:
            for i in range(3):
                await t.add.adelay(i, 0)
            t.add.delay(9, 9)  # a sync enqueue in the same block
        return b

    b = asyncio.run(produce())
    assert b.total == 4 and b.status().pending == 4
    run_all(storage)
    assert b.status().state == "success"


def test_wait_blocks_on_the_event(storage: Storage) -> None:
    with ztq.batch() as b:
        t.add.delay(1, 2)
    with pytest.raises(ztq.ResultTimeout):
        b.wait(timeout=0.2)
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(b.wait(timeout=10)))
    waiter.start()
    run_all(storage)
    waiter.join(10)
    assert got and got[0].state == "success"  # type: ignore[attr-defined]


def test_unknown_batch(storage: Storage) -> None:
    with pytest.raises(ztq.NotFound):
        batch_status(storage, "nope")


def test_bad_options() -> None:
    with pytest.raises(ztq.InvalidOption):
        ztq.batch(on_complete="zip")  # type: ignore[arg-type]
    with pytest.raises(ztq.InvalidOption):
        ztq.batch(ttl=0)
    with pytest.raises(TypeError):
        ztq.default_app().batch(on_finish=None)


def test_a_batch_inside_a_batch_block_is_refused(storage: Storage) -> None:
    with pytest.raises(ztq.ConfigError, match="inside a member task"), ztq.batch(), ztq.batch():
        pass


@pytest.mark.slow
def test_a_reader_never_sees_a_batch_half_made(storage: Storage) -> None:
    """On a single Redis the record and every member are one MULTI/EXEC: a reader that
    finds the record finds all its members (on Cluster the record comes first: documented)."""
    if storage.is_cluster:  # the record first, then the members: a reader sees all pending
        with ztq.batch() as b:
            for i in range(300):
                t.add.delay(i, 0)
        s = b.status()
        assert (s.total, s.pending, s.running, s.done, s.failed) == (300, 300, 0, 0, 0)
        assert storage.client.hlen(storage.keys.tasks("default")) == 300
        return
    seen: list[tuple[int, int]] = []
    stop = threading.Event()
    reader = make_client(storage.url)  # its own connection (the same data in memory://)
    keys = storage.keys

    def watch(batch_id: str) -> None:
        while not stop.is_set():  # reads as often as it can while the batch is written
            total = reader.hget(keys.batch(batch_id), "total")  # the record first
            members = reader.hlen(keys.tasks("default"))  # then the members
            if total is not None:
                seen.append((int(total), members))

    b = ztq.Batch()
    watcher = threading.Thread(target=watch, args=(b.id,))
    watcher.start()
    try:
        with b:
            for i in range(3000):
                t.add.delay(i, 0)
    finally:
        stop.set()
        watcher.join(10)
    watch_once = [(int(reader.hget(keys.batch(b.id), "total")), reader.hlen(keys.tasks("default")))]
    reader.close()
    seen += watch_once  # the reader's view once written, whether or not it met the write
    assert b.total == 3000
    assert all(members == total for total, members in seen), seen[:3]


def test_an_expired_member_counts_as_failed(storage: Storage) -> None:
    """A member not started by its expiry ends as expired in the fetch that meets it, and
    its batch counts it failed: complete, not successful (it is in no error list)."""
    from tests.core.test_expiry import age

    with ztq.batch(on_complete=t.noop.prepare((), queue="cb"),
                   on_success=t.noop.prepare((1,), queue="cb")) as b:  # fmt: skip
        late = t.add.enqueue((1, 1), expires=60)
        t.add.delay(2, 2)
    age(storage, late.id, "default")
    assert run_all(storage) == 1  # the other one; the expired one never ran
    assert ztq.ping(late) == "expired"
    s = b.status()
    assert (s.done, s.failed, s.state) == (1, 1, "complete")
    assert callbacks(storage) == [callback_id(b.id, "complete")]


def test_a_callback_its_full_queue_refused_is_sent_later(storage: Storage) -> None:
    """The once-guard is set only when the callback was written: a full queue refuses it,
    the entry stays in the outbox, and the next relay sends it (it was lost for good)."""
    ztq.configure_queue("cb", max_pending=1)
    try:
        t.noop.enqueue((), queue="cb")  # the queue is full
        with ztq.batch(on_complete=t.noop.prepare((9,), queue="cb")) as b:
            t.add.delay(1, 1)
        run_all(storage)
        assert b.status().state == "success"
        assert [lease.id for lease in storage.leases.fetch("cb", W, "t9", 30_000, 5)] != [
            callback_id(b.id, "complete")
        ]
        relay(storage, ["default"])
        assert callbacks(storage) == [callback_id(b.id, "complete")]
        relay(storage, ["default"])
        assert callbacks(storage) == []  # once
    finally:
        ztq.configure_queue("cb", max_pending=None)


def test_a_results_hash_written_after_the_end_goes_with_the_batch(storage: Storage) -> None:
    with ztq.batch(on_complete=t.noop.prepare((), queue="cb"), pass_results=True,
                   ttl=60) as b:  # fmt: skip
        h = t.add.delay(1, 1)
    run_all(storage, fail={h.id})
    assert b.status().state == "complete"
    assert storage.tasks.requeue("default", "error", [h.id]) == 1
    run_all(storage, results={h.id: "2"})
    results = storage.keys.batch_results(b.id)
    ttl = storage.client.pttl(results)
    assert storage.client.exists(results) and 0 < ttl <= 60_000


def test_wait_on_a_batch_that_expired_raises(storage: Storage) -> None:
    with ztq.batch(ttl=60) as b:
        t.add.delay(1, 1)
    storage.client.delete(storage.keys.batch(b.id))  # its ttl passed
    with pytest.raises(ztq.NotFound):
        b.wait(timeout=30)


def test_an_explicit_id_in_a_batch_is_refused(storage: Storage) -> None:
    t.add.enqueue((1, 1), id="job-1")
    with pytest.raises(ztq.InvalidOption), ztq.batch():
        t.add.enqueue((1, 1), id="job-1")


def test_an_enqueue_after_the_block_from_a_spawned_task_is_refused(storage: Storage) -> None:
    """An asyncio task spawned in the block keeps its context, so its late enqueue went to
    the block's buffer, already written: lost without a word. It is refused now."""

    async def main() -> BaseException | None:
        started = asyncio.Event()
        late: asyncio.Task[None] | None = None

        async def spawned() -> None:
            started.set()
            await asyncio.sleep(0.05)
            await t.add.adelay(7, 7)

        async with ztq.batch():
            await t.add.adelay(1, 1)
            late = asyncio.get_running_loop().create_task(spawned())
            await started.wait()
        try:
            await late
        except ztq.ConfigError as exc:
            return exc
        return None

    err = asyncio.run(main())
    assert err is not None and "after its transaction or batch block ended" in str(err)
