"""What ``make run`` shows in its terminal: the summary, the login, one status line.

The counts come from the console's read models (``ztq.core.monitor.queues.queue_stats``,
``ztq.core.monitor.workers.list_workers``), never from Redis directly. On a terminal the status
line is rewritten in place (carriage return); elsewhere (a pipe, a file) each status is one
plain line, so a log of the demo stays short.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TextIO

from ztq.core.engine.storage import Storage, safe_url
from ztq.core.monitor.queues import queue_stats
from ztq.core.monitor.workers import list_workers


def mask_url(url: str) -> str:
    """``url`` with its passwords replaced by ``***`` (:func:`ztq.core.engine.storage.safe_url`:
    the one before ``@`` and ``password`` / ``sentinel_password`` parameters)."""
    return safe_url(url)


@dataclass(frozen=True)
class Status:
    """Counts at one look: the first four now, ``done``/``failed`` since the previous look."""

    queued: int
    delayed: int
    running: int
    errors: int
    done: int
    failed: int
    workers: int

    def line(self, seconds: float, now: float | None = None) -> str:
        clock = time.strftime("%H:%M:%S", time.localtime(now))
        return (
            f"  {clock}  queued {self.queued}  delayed {self.delayed}  running {self.running}"
            f"  | last {seconds:.0f}s: done {self.done}  failed {self.failed}"
            f"  | errors {self.errors}  workers {self.workers}"
        )


class Tally:
    """Reads a :class:`Status` every ``every`` seconds.

    ``done`` and ``failed`` are the growth of the per-minute counters that workers keep for
    the console's throughput charts, summed over the minutes since the previous look. The
    first look only sets the baseline (a shared Redis may hold hours of counts).
    """

    def __init__(self, every: float) -> None:
        self.minutes = math.ceil(every / 60) + 1  # the previous look's minute is always read
        self._seen: dict[tuple[str, int], tuple[int, int]] | None = None

    def look(self, storage: Storage, now: float = 0.0) -> Status:
        stats = queue_stats(storage, minutes=self.minutes, now=now)
        seen: dict[tuple[str, int], tuple[int, int]] = {}
        done = failed = 0
        for qs in stats:
            for minute, d, f in qs.throughput:
                seen[(qs.name, minute)] = (d, f)
                if self._seen is not None:
                    old_d, old_f = self._seen.get((qs.name, minute), (0, 0))
                    done += max(0, d - old_d)
                    failed += max(0, f - old_f)
        self._seen = seen
        alive = sum(1 for w in list_workers(storage) if w.status not in ("lost", "stopped"))
        return Status(
            queued=sum(qs.pending for qs in stats),
            delayed=sum(qs.delayed for qs in stats),
            running=sum(qs.running for qs in stats),
            errors=sum(qs.errors for qs in stats),
            done=done,
            failed=failed,
            workers=alive,
        )


class Screen:
    """Writes blocks of lines and a status line that a terminal rewrites in place."""

    def __init__(self, out: TextIO, tty: bool) -> None:
        self.out: TextIO | None = out
        self.tty = tty
        self._open = False  # a status line without its newline is on the screen

    def block(self, *lines: str) -> None:
        text = "\n" if self._open else ""
        self._open = False
        self._write(text + "".join(line + "\n" for line in lines))

    def status(self, line: str) -> None:
        if self.tty:
            self._write("\r" + line + "\x1b[K")  # erase what a longer line left behind
            self._open = True
        else:
            self._write(line + "\n")

    def _write(self, text: str) -> None:
        if self.out is None:
            return
        try:
            self.out.write(text)
            self.out.flush()
        except (OSError, ValueError):  # the terminal closed (SIGHUP) or a reader left a pipe
            self.out = None  # the demo still stops what it started

    def typed_enter(self) -> None:
        """The terminal echoed the user's Enter: the cursor is on a fresh line already."""
        self._open = False
