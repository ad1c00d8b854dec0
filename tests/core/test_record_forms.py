"""The stored forms of a task record, on real Redis: the short ones ztq writes for a task
that waits as it was enqueued, and the long ones of earlier versions, read alike."""

from __future__ import annotations

import json
import time

import ztq.core as ztq
from tests import sample_tasks as t
from ztq.core.engine.record import decode_payload, payload_list, split_record, stored_record
from ztq.core.engine.storage import Finished, Storage

W = "worker-a"


def raw(storage: Storage, queue: str, task_id: str) -> str:
    return str(storage.client.hget(storage.keys.tasks(queue), task_id))


def test_a_task_waiting_as_enqueued_is_its_time_and_a_payload_list(storage: Storage) -> None:
    before = int(time.time() * 1000)
    h = t.add.delay(1, 2)
    meta, payload = raw(storage, "default", h.id).split("\n")
    assert meta.isdigit() and before - 1000 <= int(meta) <= int(time.time() * 1000) + 1000
    assert payload == '["tests.sample_tasks.add",[1,2]]'
    assert ztq.ping(h) == "queued" and h.record().get("enqueued") == int(meta)
    # the same task enqueued again finds it waiting: one task
    assert t.add.delay(1, 2).outcome == "exists"
    # run first: still a fresh waiting task, at the head
    first = t.add.enqueue((3, 4), first=True)
    assert raw(storage, "default", first.id).split("\n")[0].isdigit()
    [lease, _] = storage.leases.fetch("default", W, "t0", 30_000, 10)
    assert lease.id == first.id and decode_payload(lease.payload)["args"] == [3, 4]


def test_any_other_meta_stays_json(storage: Storage) -> None:
    """A priority, a due time, a lease, attempts: the meta line is JSON again, and the
    enqueue time it started with is kept through every move."""
    high = t.urgent.delay(1)
    later = t.add.enqueue((5, 6), delay=60)
    assert json.loads(raw(storage, "default", high.id).split("\n")[0])["prio"] == "high"
    assert json.loads(raw(storage, "default", later.id).split("\n")[0])["state"] == "delayed"
    h = t.add.delay(1, 2)
    enqueued = h.record().get("enqueued")
    leases = storage.leases.fetch("default", W, "t0", 30_000, 10)
    lease = next(x for x in leases if x.id == h.id)
    running = json.loads(raw(storage, "default", h.id).split("\n")[0])
    assert running["state"] == "running" and running["enqueued"] == enqueued
    # back in the queue after a lease: queued, but with its attempts (no bare time)
    assert storage.leases.release("default", W, [(x.id, x.token) for x in leases]) == len(leases)
    meta, _ = split_record(raw(storage, "default", h.id))
    assert meta["state"] == "queued" and meta["attempts"] == 1 and meta["enqueued"] == enqueued
    assert not raw(storage, "default", h.id).split("\n")[0].isdigit()
    assert lease.token >= 1


def test_a_record_in_the_long_forms_is_fetched_run_and_deduplicated(storage: Storage) -> None:
    """Records written by an earlier version (meta JSON with the state, payload object)
    wait in the same queue as new ones and move the same way."""
    old_id = t.add.prepare((7, 8)).resolve_id()
    long_record = (
        '{"state":"queued","enqueued":1700000000000}\n'
        '{"task":"tests.sample_tasks.add","args":[7,8]}'
    )
    storage.client.hset(storage.keys.tasks("default"), old_id, long_record)
    storage.client.rpush(storage.keys.ready("default", "normal"), old_id)
    assert t.add.delay(7, 8).outcome == "exists"  # the load reads the long meta
    assert ztq.ping(old_id) == "queued"
    new = t.add.delay(9, 10)
    leases = storage.leases.fetch("default", W, "t0", 30_000, 10)
    assert [x.id for x in leases] == [old_id, new.id]
    assert [decode_payload(x.payload)["args"] for x in leases] == [[7, 8], [9, 10]]
    assert json.loads(raw(storage, "default", old_id).split("\n")[0])["enqueued"] == 1700000000000
    finished = [Finished(x.id, x.token, t.add.name, "15") for x in leases]
    assert storage.leases.ack("default", W, finished) == []
    assert ztq.ping(old_id) == "done" and ztq.ping(new.id) == "done"


def test_fills_write_records_as_the_scripts_do(storage: Storage) -> None:
    """``stored_record`` and ``payload_list`` (the benchmarks' fills) give the text
    ``save`` in _lib.lua and ``TaskCall.payload`` give."""
    h = t.add.delay(1, 2)
    text = raw(storage, "default", h.id)
    meta, payload = split_record(text)
    assert payload == json.dumps(payload_list(t.add.name, [1, 2]), separators=(",", ":"))
    assert stored_record(meta, payload) == text
    for meta in (
        {"state": "queued", "enqueued": 5, "prio": "high"},
        {"state": "queued", "enqueued": 1.5},
        {"state": "running", "enqueued": 5},
    ):
        assert split_record(stored_record(meta, payload))[0] == meta  # JSON: as it was
        assert not stored_record(meta, payload).split("\n")[0].isdigit()
    assert payload_list("a.b", [], None, {"retries": 1}) == ["a.b", [], {}, {"retries": 1}]
