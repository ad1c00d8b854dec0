"""The autoscaler in real worker processes on the private Redis: it grows a queue served on
demand (``mail = 0..4``) when tasks wait, never past its maximum, and back to 0 when idle;
a CPU ceiling holds it; set-threads pins a queue and ``autoscale`` gives it back. Each
test waits on the worker log (``autoscale`` events) and the heartbeats, never on sleeps."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import ztq.core as ztq
from tests.worker.conftest import stop_process, wait_for
from ztq.core.client.calls import TaskCall
from ztq.core.engine.workers import autoscale_of, get_worker, send_command
from ztq.core.monitor import queues as monitor
from ztq.core.monitor import streams

pytestmark = pytest.mark.slow  # real worker processes

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SLEEPY = "tests.sample_tasks.sleepy"


@pytest.fixture
def worker_process(redis_url: str, tmp_path: Path) -> Iterator[Callable[..., str]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(queues: str, *flags: str, name: str = "scaler") -> str:
        ini = tmp_path / f"{name}.ini"
        ini.write_text(f"[server]\nredis = {redis_url}\nname = {name}\nheartbeat = 0.3\n"
                       "lease = 2\nidle_wait = 0.3\nautoscale_idle_beats = 2\n"
                       f"modules = tests.sample_tasks\n\n[queues]\n{queues}\n")  # fmt: skip
        # no CPU ceiling (other tests load the machine) but where a test gives one
        env = {**os.environ, "PYTHONPATH": str(ROOT), "ZTQ_REDIS_URL": redis_url,
               "ZTQ_AUTOSCALE_CPU_MAX": "100"}  # fmt: skip
        proc = subprocess.Popen([str(BIN / "ztq"), "worker", "-c", str(ini), *flags], cwd=ROOT,
                                env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)  # fmt: skip
        procs.append(proc)
        wait_for(lambda: beat(name) is not None and proc.poll() is None, timeout=30)
        return name

    yield start
    for proc in procs:
        stop_process(proc)


def beat(name: str) -> dict[str, Any] | None:
    info = get_worker(ztq.get_storage(), name)
    return None if info is None or info.status != "running" else info.data


def threads(name: str, queue: str = "mail") -> int:
    data = beat(name) or {}
    return int(data.get("threads", {}).get(queue, 0))


def decisions() -> list[dict[str, Any]]:
    """The autoscale events of the worker log, oldest first."""
    rows = streams.stream_page(ztq.get_storage(), "events", limit=500).rows
    return [dict(e) for e in reversed(rows) if e.get("kind") == "autoscale"]


def enqueue(n: int, seconds: float) -> None:
    with ztq.transaction():
        for _ in range(n):
            TaskCall(SLEEPY, (seconds, ""), {}, queue="mail", unique=False).enqueue()


def left() -> int:
    """Tasks of mail not finished: ready, delayed or running."""
    [s] = monitor.queue_stats(ztq.get_storage(), ["mail"], minutes=0)
    return sum(s.ready.values()) + s.delayed + s.running


def beats_pass(name: str, n: int) -> None:
    """Wait until ``n`` more heartbeats of the worker came (each reports a new time)."""
    seen: set[float] = set()

    def more() -> bool:
        info = get_worker(ztq.get_storage(), name)
        if info is not None:
            seen.add(info.reported)
        return len(seen) > n

    wait_for(more, timeout=30, every=0.05)


def test_grows_when_tasks_wait_never_past_max_and_back_to_zero(worker_process) -> None:
    name = worker_process("mail = 0..4")
    assert autoscale_of(beat(name) or {}) == {
        "mail": {"min": 0, "max": 4, "pool": "thread", "pinned": False, "last": {}}
    }
    assert threads(name) == 0
    enqueue(60, 0.1)
    peak = 0

    def drained() -> bool:
        nonlocal peak
        peak = max(peak, threads(name))
        return left() == 0

    wait_for(drained, timeout=60, every=0.05)
    assert 2 <= peak <= 4
    grown = decisions()
    assert grown[0]["after"] == "1" and grown[0]["before"] == "0"  # served on demand
    assert grown[0]["message"].startswith("mail 0 → 1 threads: ")
    assert " waiting, CPU " in grown[0]["message"]
    wait_for(lambda: any(d["after"] == "0" for d in decisions()[1:]), timeout=30)
    wait_for(lambda: threads(name) == 0, timeout=10)
    steps = decisions()
    assert all(int(d["after"]) <= 4 for d in steps)
    assert max(int(d["after"]) for d in steps) == 4 == peak
    assert steps[-1]["why"] == "shrink" and "idle" in steps[-1]["message"]
    assert "mail" in autoscale_of(beat(name) or {})  # still served on demand
    last = autoscale_of(beat(name) or {})["mail"]["last"]
    assert last["message"] == steps[-1]["message"] and last["why"] == "shrink"


def test_a_cpu_ceiling_holds_it(worker_process) -> None:
    """A ceiling of 0 % is always reached: the queue stays at 0 threads, said once."""
    name = worker_process("mail = 0..4", "--autoscale-cpu-max", "0")
    enqueue(5, 0.01)
    wait_for(lambda: any(d["why"] == "hold_cpu" for d in decisions()), timeout=30)
    beats_pass(name, 5)
    assert threads(name) == 0 and left() == 5
    [held] = decisions()
    assert held["message"].startswith("mail held at 0 threads: 5 waiting, CPU ")
    assert held["message"].endswith("≥ 0%")


def test_set_threads_pins_and_autoscale_unpins(worker_process) -> None:
    name = worker_process("mail = 1..4")
    storage = ztq.get_storage()
    send_command(storage, name, "set_threads", queue="mail", threads=2, by="test")
    wait_for(lambda: (autoscale_of(beat(name) or {}).get("mail") or {}).get("pinned"))
    wait_for(lambda: threads(name) == 2)  # a heartbeat may fall between the pin and the resize
    enqueue(200, 0.05)
    beats_pass(name, 6)  # tasks wait: an autoscaled queue would have grown by now
    assert threads(name) == 2 and decisions() == [] and left() > 0
    send_command(storage, name, "autoscale", queue="mail", by="test")
    wait_for(lambda: decisions() and int(decisions()[0]["after"]) > 2, timeout=30)
    assert not autoscale_of(beat(name) or {})["mail"]["pinned"]
    assert decisions()[0]["why"] == "grow"
