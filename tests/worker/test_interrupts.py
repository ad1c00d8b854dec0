"""Interrupts (soft timeout, kill) land in the run they were aimed at, never in the next."""

from __future__ import annotations

import threading
import time

from ztq.worker.execute import Interruptible, SoftTimeout


def test_an_interrupt_aimed_at_an_ended_run_does_not_hit_the_next() -> None:
    guard = Interruptible()
    inside = threading.Event()
    landed: list[str] = []

    def next_run() -> None:  # the executor started the next task of its batch
        guard.enter("run-2")
        try:
            inside.set()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # Python code: an interrupt lands at once
                pass
        except SoftTimeout:
            landed.append("run-2")
        finally:
            guard.leave()

    th = threading.Thread(target=next_run)
    th.start()
    assert inside.wait(5)
    assert guard.interrupt(th, SoftTimeout, "run-1") is False  # the watchdog looked at run-1
    assert guard.interrupt(th, SoftTimeout, "run-2") is True
    th.join(10)
    assert landed == ["run-2"] and not th.is_alive()
