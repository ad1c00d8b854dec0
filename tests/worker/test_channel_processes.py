"""Channels and broadcasts with real processes on a real redis-server.

- A 50 MB file to 3 subscriber processes, one of them killed with SIGKILL mid-stream and
  started again: every subscriber ends with every byte once, in order (SHA-256), Redis never
  holds more than the window, and its memory returns to where it was once all acknowledged.
- One broadcast with 3 worker processes serving the queue runs exactly 3 times, once per
  worker; a worker started afterwards does not run it, one asked to catch up does.

Every wait is on a line a process prints or on Redis (blocking reads), bounded in time;
every process is killed by its PID at the end.
"""

from __future__ import annotations

import hashlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

import ztq.core as ztq
from tests import channel_tasks as t

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
MB = 1024 * 1024


class Proc:
    """A child process whose output lines are read by a thread into a queue, so a test
    blocks on the next line (with a deadline) instead of sleeping."""

    def __init__(self, args: list[str], stream: str = "stdout") -> None:
        self.args = args
        out = subprocess.PIPE
        self.proc = subprocess.Popen(
            args, cwd=ROOT, stdout=out if stream == "stdout" else subprocess.DEVNULL,
            stderr=out if stream == "stderr" else subprocess.DEVNULL, text=True,
        )  # fmt: skip
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        pipe = self.proc.stdout if stream == "stdout" else self.proc.stderr
        threading.Thread(target=self._pump, args=(pipe,), daemon=True).start()

    def _pump(self, pipe: object) -> None:
        for line in pipe:  # type: ignore[attr-defined]
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def expect(self, predicate: Callable[[str], bool], timeout: float = 30.0) -> str:
        """The first line (from now) ``predicate`` accepts; fails after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                line = self.lines.get(timeout=max(0.0, left))
            except queue.Empty:
                raise AssertionError(f"{self.args[2:5]}: no such line in {timeout}s") from None
            if line is None:
                raise AssertionError(
                    f"{self.args[2:5]} exited ({self.proc.wait()}): {self.seen[-5:]}"
                )
            self.seen.append(line)
            if predicate(line):
                return line

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def rest(self) -> list[str]:
        """The lines it printed that were not read yet, once it has exited."""
        self.proc.wait(10)
        while (line := self.lines.get(timeout=10)) is not None:
            self.seen.append(line)
        return self.seen


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for p in started:
        p.kill()


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(MB):
            digest.update(block)
    return digest.hexdigest()


def memory(client: redis.Redis) -> int:
    """Redis's used_memory, asked on a new connection (the test's own connections keep
    the buffers their last big reply grew)."""
    client.connection_pool.disconnect()
    return int(client.info("memory")["used_memory"])


@dataclass
class Round:
    seconds: float
    killed_at: int  # bytes r2 had written when it was killed
    again: int  # chunks delivered to r2 again after its restart (skipped)
    base_mem: int
    end_mem: int
    base_stream: int
    peak_stream: int
    end_stream: int


def test_a_50mb_file_reaches_3_subscribers_one_killed_and_restarted(
    redis_url: str, procs: list[Proc], tmp_path: Path
) -> None:
    """Two rounds of the same: the first warms the server (a fresh redis-server allocates
    about 270 KB once, for good, the first time it handles values this big: measured 74 KB
    for one SET of 256 KiB, 99 KB through a script), the second is measured against the
    memory Redis used before it. Both check every byte of every copy."""
    size, chunk, window = 50 * MB, 256 * 1024, 16
    source = tmp_path / "payload.bin"
    with source.open("wb") as f:
        for i in range(50):
            f.write(hashlib.sha256(str(i).encode()).digest() * (MB // 32))
    assert source.stat().st_size == size
    want = sha256_of(source)
    storage = ztq.get_storage()
    client = storage.client
    names = ["r1", "r2", "r3"]
    files = ztq.channel("files")
    for name in names:  # before anything is sent: nothing is dropped for lack of readers
        files.subscribe(name)
    stream = storage.keys.messages("files")

    def receiver(name: str, folder: Path) -> Proc:
        args = [sys.executable, "-m", "tests.channel_receiver", redis_url, "files", name,
                str(folder / name)]  # fmt: skip
        p = Proc(args)
        procs.append(p)
        p.expect(lambda line: line == "ready")
        return p

    def one_round(folder: Path) -> Round:
        base_mem, base_stream = memory(client), int(client.memory_usage(stream, samples=0))
        rx = {name: receiver(name, folder) for name in names}
        started = time.monotonic()
        sender = threading.Thread(
            target=ztq.publish_file,
            args=(files, source),
            kwargs={"chunk_size": chunk, "window": window, "timeout": 60},
            daemon=True,
        )
        sender.start()

        # r2 dies once it has written 20 MB: SIGKILL, mid-stream, without a word
        written = 0
        while written < 20 * MB:
            line = rx["r2"].expect(lambda line: line.startswith("chunk"))
            assert line.endswith(" fresh"), line
            written += int(line.split()[2])
        rx["r2"].kill()
        # what it wrote (and said) between the line read last and the kill counts too
        fresh1 = [(int(x.split()[1]), int(x.split()[2])) for x in rx["r2"].rest()
                  if x.startswith("chunk") and x.endswith(" fresh")]  # fmt: skip
        # with r2 gone the sender fills the window and waits: once r1 and r3 have caught
        # up, Redis holds the window (what r2 still needs) and nothing moves
        deadline = time.monotonic() + 30
        raw = redis.Redis.from_url(redis_url)  # chunks are bytes: no decoding
        while True:
            held = int(client.xlen(stream))
            assert held <= window and sender.is_alive() and time.monotonic() < deadline
            others = [g for g in client.xinfo_groups(stream) if g["name"] != "r2"]
            if held == window and all(g["pending"] == g["lag"] == 0 for g in others):
                break
            last = raw.xinfo_stream(stream)["last-generated-id"]  # its entries are bytes
            raw.xread({stream: last}, count=1, block=200)  # the sender's next chunk
        raw.close()
        peak_stream = int(client.memory_usage(stream, samples=0))

        rx["r2"] = receiver("r2", folder)  # the same subscriber again: resumes
        ends = {n: p.expect(lambda line: line.startswith("file "), 120) for n, p in rx.items()}
        sender.join(60)
        assert not sender.is_alive()
        took = time.monotonic() - started

        for name in names:
            _, fname, fsize, fsha, ok, _dups = ends[name].split()
            assert (fname, int(fsize), fsha, ok) == ("payload.bin", size, want, "True"), name
            assert sha256_of(folder / name / "payload.bin") == want
        # every chunk applied once, in order: r1, r3 in one go; r2 across its two lives
        offsets = list(range(0, size, chunk))
        for name in ("r1", "r3"):
            fresh = [int(x.split()[1]) for x in rx[name].seen if x.endswith(" fresh")]
            assert fresh == offsets and not [x for x in rx[name].seen if x.endswith(" dup")]
        again = [x.split() for x in rx["r2"].seen if x.startswith("chunk")]
        fresh2 = [int(o) for _, o, _, k in again if k == "fresh"]
        dups2 = [int(o) for _, o, _, k in again if k == "dup"]
        first = [o for o, _ in fresh1]
        assert first + fresh2 == sorted(first + fresh2)  # in order, none twice
        # a chunk written just before the kill and not acknowledged comes back: skipped
        assert sorted(set(first) | set(fresh2) | set(dups2)) == offsets
        assert not set(first) & set(fresh2)

        # all acknowledged by all: trimmed, nobody lags
        for p in rx.values():
            assert p.proc.wait(10) == 0
        assert client.xlen(stream) == 0
        assert [s.lag for s in files.info().subscribers] == [0, 0, 0]
        end_stream = int(client.memory_usage(stream, samples=0))
        return Round(took, sum(n for _, n in fresh1), len(dups2), base_mem, memory(client),
                     base_stream, peak_stream, end_stream)  # fmt: skip

    warm = one_round(tmp_path / "round1")
    measured = one_round(tmp_path / "round2")
    for i, r in enumerate((warm, measured), 1):
        print(
            f"\nround {i}: 50 MB to 3 subscribers, r2 killed at {r.killed_at / MB:.0f} MB and "
            f"restarted ({r.again} chunk(s) delivered to it again, skipped): {r.seconds:.2f}s; "
            f"stream {r.base_stream} B before, {r.peak_stream / MB:.2f} MB at the window "
            f"({window} x {chunk // 1024} KiB), {r.end_stream} B after; used_memory "
            f"{r.base_mem} B before, {r.end_mem} B after ({r.end_mem - r.base_mem:+d} B)"
        )
    assert measured.peak_stream >= window * chunk
    # each group got to know its reader in round 1 (a consumer entry); nothing since
    assert measured.end_stream == measured.base_stream
    # back to the byte in most runs; in some, Redis keeps another buffer or two of 24 KB
    # it grew at a busy moment (no key holds it): far below one chunk. On a server earlier
    # tests used it may end lower: it let go of buffers of theirs meanwhile
    assert measured.end_mem - measured.base_mem <= 64 * 1024, measured


def worker(
    redis_url: str, name: str, procs: list[Proc], imports: str = "tests.channel_tasks"
) -> Proc:
    """A worker process serving queue web, up once it said it reads the broadcasts."""
    args = [sys.executable, "-m", "ztq.worker", "--redis", redis_url, "--name", name,
            "--import", imports, "--queue", "web:1", "--heartbeat", "0.2", "--lease", "1",
            "--grace", "2", "--log-level", "info"]  # fmt: skip
    p = Proc(args, stream="stderr")
    procs.append(p)
    p.expect(lambda line: "broadcasts: joined queue web" in line)
    return p


def test_a_broadcast_runs_once_on_each_of_3_worker_processes_and_not_on_a_later_one(
    redis_url: str, procs: list[Proc], tmp_path: Path
) -> None:
    out = tmp_path / "runs"
    pids = {name: worker(redis_url, name, procs).proc.pid for name in ("w1", "w2", "w3")}
    first = t.note.broadcast(str(out), "first")
    assert sorted(first.targets) == ["w1", "w2", "w3"]
    runs = first.wait(timeout=20)
    assert [(r.worker, r.state) for r in runs] == [("w1", "done"), ("w2", "done"), ("w3", "done")]
    assert {r.worker: r.result["pid"] for r in runs} == pids
    lines = out.read_text().splitlines()
    assert sorted(lines) == sorted(f"{pid} first" for pid in pids.values())

    late = worker(redis_url, "w4", procs)
    second = t.note.broadcast(str(out), "second")  # read after `first` if w4 were to run it
    assert [r.worker for r in second.wait(timeout=20)] == ["w1", "w2", "w3", "w4"]
    assert all(r.state == "done" for r in second.runs())
    assert [r.worker for r in first.runs()] == ["w1", "w2", "w3"]  # w4 never ran it
    lines = out.read_text().splitlines()
    assert f"{late.proc.pid} first" not in lines and f"{late.proc.pid} second" in lines
    assert sum(line.endswith(" first") for line in lines) == 3
    assert sum(line.endswith(" second") for line in lines) == 4

    # a worker whose app asks for the last hour of broadcasts runs both, in order
    catcher = worker(redis_url, "w5", procs, imports="tests.channel_catchup")
    third = t.note.broadcast(str(out), "third")
    assert "w5" in [r.worker for r in third.wait(timeout=20)]
    mine = [line.split()[1] for line in out.read_text().splitlines()
            if line.startswith(f"{catcher.proc.pid} ")]  # fmt: skip
    assert mine == ["first", "second", "third"]
    assert "w5" in [r.worker for r in first.runs()]
