"""Failover under load on a real Redis Sentinel setup (master, replica, three sentinels).

A ``ztq worker`` process drains two queues (a thread pool and an async pool) while a
producer thread keeps enqueueing and a console (WebTest) keeps reading, all through one
``redis+sentinel://`` URL. The master is then SIGKILLed (or demoted by ``SENTINEL
FAILOVER``); the sentinels promote the replica and nobody is restarted. Counted and printed
(``pytest -s``): tasks lost (acknowledged by the old master, never replicated: possible
with asynchronous replication), tasks that ran twice, and the pauses. Asserted: only what
is guaranteed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from webtest import TestApp

import ztq.core as ztq
from tests import sample_tasks as t
from tests.async_tasks import slow_note
from tests.console.conftest import PASSWORD, SECRET, login
from tests.redis_sentinel import SERVICE, LocalSentinel
from tests.worker.conftest import wait_for
from ztq.console import main
from ztq.core.auth.passwords import hash_password
from ztq.core.errors import ZtqError

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
LEASE, HEARTBEAT = 1.5, 0.3
MASTER_PASSWORD, SENTINEL_PASSWORD = "data-p@ss", "sentinel-p@ss"


@pytest.fixture
def sentinel(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalSentinel]:
    monkeypatch.delenv("ZTQ_REDIS_URL")  # the console reads its URL from its settings
    setup = LocalSentinel(password=MASTER_PASSWORD, sentinel_password=SENTINEL_PASSWORD)
    setup.start()
    try:
        yield setup
    finally:
        setup.stop()


@pytest.fixture
def worker(sentinel: LocalSentinel, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    log = open(tmp_path / "worker.log", "ab")  # noqa: SIM115 - closed with the process
    args = [sys.executable, "-m", "ztq.worker", "--redis", sentinel.url, "--name", "survivor",
            "--import", "tests.sample_tasks", "--import", "tests.async_tasks",
            "--queue", "default:2", "--queue", "crawl:8:async", "--lease", str(LEASE),
            "--heartbeat", str(HEARTBEAT), "--grace", "2"]  # fmt: skip
    proc = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=log)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        log.close()


@dataclass
class Load:
    """A producer and a console reader running until ``stop``; what each saw, and when."""

    out: Path
    console: TestApp
    stop: threading.Event = field(default_factory=threading.Event)
    acked: dict[str, float] = field(default_factory=dict)  # value -> when Redis said yes
    handles: dict[str, Any] = field(default_factory=dict)
    refused: list[float] = field(default_factory=list)  # enqueues that raised
    pages: list[tuple[float, int]] = field(default_factory=list)  # console: (when, status)
    progress: list[tuple[float, int]] = field(default_factory=list)  # (when, lines run)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Load:
        for target in (self._produce, self._read_console, self._watch):
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self.threads.append(thread)
        return self

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)

    def _produce(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            value = str(n)
            try:  # one task for the thread pool, one for the async pool (its own client)
                if n % 2:
                    self.handles[value] = t.record.delay(str(self.out), value)
                else:
                    self.handles[value] = slow_note.delay(str(self.out), value, 0.0)
                self.acked[value] = time.monotonic()
            except ZtqError:
                self.refused.append(time.monotonic())
            time.sleep(0.004)

    def _read_console(self) -> None:
        while not self.stop.is_set():
            status = self.console.get("/api/queues", expect_errors=True).status_int
            self.pages.append((time.monotonic(), status))
            time.sleep(0.05)

    def _watch(self) -> None:
        last = -1
        while not self.stop.is_set():
            lines = self.ran_lines()
            if len(lines) != last:
                last = len(lines)
                self.progress.append((time.monotonic(), last))
            time.sleep(0.005)

    def ran_lines(self) -> list[str]:
        return self.out.read_text().split() if self.out.exists() else []


def longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest time between two events in [start, end] (the edges count as events)."""
    points = [start, *(x for x in times if start <= x <= end), end]
    return max(b - a for a, b in zip(points, points[1:], strict=False))


def console_app(url: str) -> TestApp:
    users = f"ann operator {hash_password(PASSWORD, n=1024)}"
    wsgi = main({}, **{"ztq.redis_url": url, "ztq.console.secret": SECRET,
                       "ztq.console.users": users})  # fmt: skip
    return login(TestApp(wsgi), "ann")


def run_failover(
    sentinel: LocalSentinel,
    worker: subprocess.Popen[bytes],
    tmp_path: Path,
    disrupt: Callable[[], None],
    label: str,
) -> None:
    ztq.connect(sentinel.url)
    try:
        _run_failover(sentinel, worker, tmp_path, disrupt, label)
    except BaseException:
        lines = (tmp_path / "worker.log").read_text(errors="replace").splitlines()
        print(f"\n{label}: worker log (last 40 lines)", *lines[-40:], sep="\n")
        raise
    finally:
        ztq.disconnect_all()


def _run_failover(
    sentinel: LocalSentinel,
    worker: subprocess.Popen[bytes],
    tmp_path: Path,
    disrupt: Callable[[], None],
    label: str,
) -> None:
    load = Load(tmp_path / "ran", console_app(sentinel.url))
    try:
        load.start()
        wait_for(lambda: len(load.ran_lines()) >= 200, timeout=20)  # the worker is busy
        old = sentinel.master_port()
        hit = time.monotonic()
        disrupt()
        new = sentinel.wait_for_failover(old)
        promoted = time.monotonic()
        # keep the load on until the worker and the console have worked on the new master
        # a copy first (list() of a dict's values holds the GIL): the producer thread adds
        # to the dict while this looks, and iterating it then raised "changed size"
        wait_for(lambda: any(v > promoted + 2 for v in list(load.acked.values())), timeout=20)
        wait_for(lambda: any(at > promoted and s == 200 for at, s in load.pages), timeout=20)
        wait_for(lambda: load.progress[-1][0] > promoted + 2, timeout=20)
    finally:
        load.finish()
    end = max(load.acked.values())
    storage = ztq.get_storage()
    # the tasks acknowledged after the promotion all run (the worker follows the new master)
    after = [v for v, at in load.acked.items() if at > promoted]
    wait_for(lambda: set(after) <= set(load.ran_lines()), timeout=30, every=0.1)
    for queue in ("default", "crawl"):
        wait_for(lambda q=queue: storage.queues.pending_count(q) == 0, timeout=30, every=0.1)
        wait_for(lambda q=queue: storage.client.zcard(storage.keys.running(q)) == 0, timeout=30)
    ran = Counter(load.ran_lines())
    gone = [v for v in load.acked if ran[v] == 0 and ztq.ping(load.handles[v]) != "queued"]
    twice = sorted((v for v, c in ran.items() if c > 1), key=int)
    unacked_ran = sum(1 for v in ran if v not in load.acked)
    ack_pause = longest_gap(list(load.acked.values()), hit - 1, end)
    work_pause = longest_gap([at for at, _ in load.progress], hit - 1, end)
    down = [at for at, status in load.pages if status != 200 and at >= hit]
    console_out = (max(down) - min(down)) if down else 0.0
    print(
        f"\n{label}: master {old} -> {new}; promoted {promoted - hit:.2f}s after the hit; "
        f"enqueued {len(load.acked)} acked, {len(load.refused)} refused "
        f"({unacked_ran} of those ran all the same); lost {len(gone)} {gone[:10]}; "
        f"ran twice {len(twice)} {twice[:10]}; pause without progress {work_pause:.2f}s; "
        f"longest enqueue pause {ack_pause:.2f}s; console errors for {console_out:.2f}s "
        f"({len(down)} failed reads)"
    )
    assert worker.poll() is None, "the worker exited"
    assert all(load.acked[v] < hit for v in gone), "lost a task the new master acknowledged"
    assert load.pages[-1][1] == 200
    storage.client.hdel(storage.keys.workers, "survivor")  # its heartbeat reaches the new master
    wait_for(lambda: storage.client.hexists(storage.keys.workers, "survivor"), timeout=10)
    assert sentinel.master_port() == new


def test_worker_and_console_follow_a_failover_after_the_master_is_killed(
    sentinel: LocalSentinel, worker: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    run_failover(sentinel, worker, tmp_path, sentinel.kill_master, "SIGKILL of the master")


def test_worker_and_console_follow_a_master_demoted_by_sentinel_failover(
    sentinel: LocalSentinel, worker: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    """The old master lives on as a replica: connections to it answer READONLY."""

    def demote() -> None:
        client = sentinel.sentinels[0].client()
        client.execute_command("SENTINEL", "FAILOVER", SERVICE)
        client.close()

    run_failover(sentinel, worker, tmp_path, demote, "SENTINEL FAILOVER (demotion)")
