"""Channels on real Redis: subscribers each read every message at their own pace, resume
after a restart, and a message leaves Redis once every subscriber acknowledged it; the cap
holds; files arrive whole. The script-level cases run on Redis 7, Redis 6.2 and Cluster."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest

import ztq.core as ztq
from ztq.core.engine.storage import Storage
from ztq.core.messaging.channels import Message
from ztq.core.messaging.files import FileReceiver, publish_file


def held(storage: Storage, name: str) -> int:
    return int(storage.client.xlen(storage.keys.messages(name)))


@pytest.mark.slow
def test_every_subscriber_reads_every_message_and_acks_trim(storage: Storage) -> None:
    orders = ztq.channel("orders")
    assert orders.publish({"n": -1}) is None  # nobody subscribes: dropped, not kept
    fast, slow = orders.subscribe("fast"), orders.subscribe("slow")
    ids = [orders.publish({"n": i}) for i in range(10)]
    assert all(ids) and held(storage, "orders") == 10

    got = fast.read(count=100)
    assert [m.data for m in got] == [{"n": i} for i in range(10)]
    assert [m.id for m in got] == ids and {m.kind for m in got} == {"json"}
    assert fast.ack(*got) == 10
    assert held(storage, "orders") == 10  # slow still needs them all

    first = slow.read(count=4)
    assert [m.data["n"] for m in first] == [0, 1, 2, 3]
    slow.ack(*first)
    assert held(storage, "orders") == 6  # trimmed below what slow needs next
    rest = slow.read(count=100)
    slow.ack(*rest)
    assert [m.data["n"] for m in rest] == list(range(4, 10))
    assert held(storage, "orders") == 0
    info = orders.info()
    assert (info.published, info.dropped, info.held) == (10, 1, 0)
    assert [(s.name, s.pending, s.lag) for s in info.subscribers] in (
        [("fast", 0, 0), ("slow", 0, 0)],
        [("fast", 0, None), ("slow", 0, None)],  # Redis 6.2 does not count the lag
    )


def test_a_restarted_subscriber_resumes_with_what_it_did_not_acknowledge(
    storage: Storage,
) -> None:
    ch = ztq.channel("logs")
    before = ch.subscribe("shipper")
    for i in range(6):
        ch.publish(f"line {i}")
    read = before.read(count=4)
    before.ack(*read[:2])  # then it dies with lines 2 and 3 read, not acknowledged
    after = ztq.channel("logs").subscribe("shipper")  # a new process: same subscriber
    again = after.read(count=10)
    assert [m.data for m in again] == ["line 2", "line 3"]  # its own unacknowledged first
    after.ack(*again)
    new = after.read(count=10)
    assert [m.data for m in new] == ["line 4", "line 5"]
    after.ack(*new)
    assert after.read(count=10) == [] and held(storage, "logs") == 0


def test_subscribers_start_at_new_messages_or_all_held(storage: Storage) -> None:
    ch = ztq.channel("news")
    keeper = ch.subscribe("keeper")
    ch.publish("old")
    late = ch.subscribe("late")  # from the next message on
    whole = ch.subscribe("whole", start="all")  # every message still held
    ch.publish("new")
    got = late.read()
    assert [m.data for m in got] == ["new"]
    assert [m.data for m in whole.read()] == ["old", "new"]
    assert [m.data for m in keeper.read()] == ["old", "new"]
    late.ack(*got)
    assert ch.subscribe("late", start="all").read() == []  # subscribing again keeps its place


def test_a_full_channel_refuses_then_waits_for_room(storage: Storage) -> None:
    ch = ztq.channel("tight", cap=3)
    sub = ch.subscribe("only")
    for i in range(3):
        ch.publish(i)
    with pytest.raises(ztq.ChannelFull, match="slowest: only"):
        ch.publish(3)
    got = sub.read(count=1)
    done = threading.Event()

    def publish_waiting() -> None:
        ch.publish(3, timeout=10)  # blocks on the room list until the ack below
        done.set()

    th = threading.Thread(target=publish_waiting)
    th.start()
    assert not done.wait(0.3)  # the channel is still full
    sub.ack(*got)  # makes room and pushes a wake-up token
    assert done.wait(10)
    th.join(10)
    assert [m.data for m in sub.read(count=10)] == [1, 2, 3]
    assert held(storage, "tight") == 3


def test_unsubscribing_releases_what_only_that_subscriber_needed(storage: Storage) -> None:
    ch = ztq.channel("metrics")
    a, b = ch.subscribe("a"), ch.subscribe("b")
    for i in range(5):
        ch.publish(i)
    a.ack(*a.read(count=10))
    assert held(storage, "metrics") == 5
    assert ch.unsubscribe("b") and not ch.unsubscribe("b")
    assert held(storage, "metrics") == 0
    with pytest.raises(ztq.NotFound, match="no subscriber 'b'"):
        b.read()
    ch.delete()
    assert not storage.client.exists(*ch.keys(storage))
    assert "metrics" not in storage.client.smembers(storage.keys.channels)


def test_a_reader_takes_over_what_a_dead_reader_left(storage: Storage) -> None:
    ch = ztq.channel("jobs")
    dead = ch.subscribe("pool", consumer="box-1")
    alive = ch.subscribe("pool", consumer="box-2")
    for i in range(4):
        ch.publish(i)
    assert [m.data for m in dead.read(count=2)] == [0, 1]  # then box-1 dies
    mine = alive.read(count=10)
    assert [m.data for m in mine] == [2, 3]
    alive.ack(*mine)
    assert held(storage, "jobs") == 4  # 0 and 1 wait for box-1
    assert alive.claim(idle=60) == []  # box-1 may only be slow
    taken = alive.claim(idle=0)
    assert [m.data for m in taken] == [0, 1]
    alive.ack(*taken)
    assert held(storage, "jobs") == 0


@pytest.mark.slow
def test_a_file_reaches_every_subscriber_whole(storage: Storage, tmp_path: Path) -> None:
    data = os.urandom(1_000_003)
    (tmp_path / "blob.bin").write_bytes(data)
    ch = ztq.channel("assets")
    subs = [ch.subscribe(f"mirror-{i}") for i in range(2)]
    got: dict[int, ztq.ReceivedFile] = {}

    def receive(i: int) -> None:
        got[i] = ztq.receive_file(subs[i], tmp_path / f"m{i}", timeout=20)

    threads = [threading.Thread(target=receive, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    sent = publish_file(ch, tmp_path / "blob.bin", chunk_size=65536, window=4)
    for th in threads:
        th.join(20)
    want = hashlib.sha256(data).hexdigest()
    assert (sent.size, sent.sha256, sent.chunks) == (len(data), want, 16)
    for i in range(2):
        assert got[i].ok and got[i].sha256 == want and got[i].name == "blob.bin"
        assert (tmp_path / f"m{i}" / "blob.bin").read_bytes() == data
        assert not list((tmp_path / f"m{i}").glob(".ztq-*"))  # no part left behind
    assert held(storage, "assets") == 0


def test_a_file_to_nobody_is_not_sent(storage: Storage, tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 10)
    sent = publish_file("void", tmp_path / "f")
    assert not sent.delivered and held(storage, "void") == 0


def chunk(file_id: str, offset: int, data: bytes) -> Message:
    return Message(f"1-{offset}", "file-chunk", data, file_id, offset)


def test_the_receiver_skips_redeliveries_and_redoes_a_torn_chunk(tmp_path: Path) -> None:
    """What a receiver killed at any instant finds when it starts again."""
    fid = "ab" * 16
    body = b"0123456789" * 3
    rx = FileReceiver(tmp_path)
    begin = {"name": "../../etc/passwd", "size": 30, "chunk": 10, "chunks": 3}
    assert rx.feed(Message("1-0", "file-begin", begin, fid)) is None
    rx.feed(chunk(fid, 0, body[:10]))
    rx.feed(chunk(fid, 10, body[10:20]))
    part = tmp_path / f".ztq-{fid}.part"
    with part.open("r+b") as f:  # killed in the middle of writing the second chunk
        f.truncate(14)
    again = FileReceiver(tmp_path)  # the new process
    again.feed(Message("1-0", "file-begin", begin, fid))  # delivered again: no reset
    again.feed(chunk(fid, 0, body[:10]))  # written before: skipped
    again.feed(chunk(fid, 10, body[10:20]))  # cut short: written again
    with pytest.raises(ztq.TransferFailed, match="only 20 bytes"):
        again.feed(chunk(fid, 25, b"x"))  # a gap never passes silently
    again.feed(chunk(fid, 20, body[20:]))
    end = {"size": 30, "sha256": hashlib.sha256(body).hexdigest()}
    done = again.feed(Message("1-9", "file-end", end, fid))
    assert done is not None and done.ok and done.duplicates == 1
    assert done.path == tmp_path / "passwd" and done.path.read_bytes() == body


def test_a_file_whose_hash_differs_is_kept_apart(tmp_path: Path) -> None:
    fid = "cd" * 16
    rx = FileReceiver(tmp_path)
    rx.feed(Message("1-0", "file-begin", {"name": "a.txt"}, fid))
    rx.feed(chunk(fid, 0, b"hello"))
    done = rx.feed(Message("1-2", "file-end", {"size": 5, "sha256": "0" * 64}, fid))
    assert done is not None and not done.ok and "SHA-256" in done.error
    assert done.path.name == "a.txt.failed" and not (tmp_path / "a.txt").exists()


def test_the_broadcast_scripts_keep_one_slot_on_every_server(storage: Storage) -> None:
    """Broadcasts without a worker: a listener joins, a broadcast goes out, the run is
    recorded, the listener leaves (Redis 7, Redis 6.2, Cluster)."""
    from tests import sample_tasks as t
    from ztq.core.messaging.broadcast import listen_op, read_runs, record_run

    newest, _ = storage.call(*listen_op(storage, "default", "join", "box-1", 60_000))
    assert newest == "0-0"
    h = t.noop.broadcast()
    assert h.targets == ("box-1",) and h.queue == "default"
    storage.call(*listen_op(storage, "default", "join", "box-1", 60_000))  # restarted: lost
    assert [r.state for r in h.runs()] == ["lost"]
    storage.call(*listen_op(storage, "default", "leave", "box-1", 0))
    storage.call(*listen_op(storage, "default", "join", "box-2", 60_000))
    h2 = t.noop.broadcast(1)
    assert record_run(storage, "default", h2.id, "box-2", "running")
    assert [(r.worker, r.state) for r in h2.runs()] == [("box-2", "running")]
    assert record_run(storage, "default", h2.id, "box-2", "done", "", "[1]")
    [run] = read_runs(storage, "default", h2.id)[0]
    assert (run.state, run.result, run.ended is not None) == ("done", [1], True)
    assert not record_run(storage, "default", "f" * 32, "box-2", "done")  # expired: logged
    assert storage.client.xlen(storage.keys.broadcast_runs("default")) == 3


def test_a_file_stops_when_its_last_subscriber_leaves(storage: Storage, tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(bytes(300))  # a beginning, 3 chunks, an end: 5 messages
    ch = ztq.channel("leaving")
    ch.subscribe("only")
    got: list[ztq.SentFile] = []
    sender = threading.Thread(
        target=lambda: got.append(
            publish_file(ch, tmp_path / "f", chunk_size=100, window=2, timeout=10)
        )
    )
    sender.start()
    key, last = storage.keys.messages("leaving"), "0-0"
    while held(storage, "leaving") < 2:  # the window is full: the sender waits for room
        for _, entries in storage.client.xread({key: last}, block=5000) or []:
            last = entries[-1][0]
    assert ch.unsubscribe("only")  # then the subscriber goes
    sender.join(15)
    assert got and not got[0].delivered  # the rest was not sent to nobody
    assert held(storage, "leaving") == 0
    assert int(storage.client.hget(storage.keys.channel_meta("leaving"), "dropped")) == 1
