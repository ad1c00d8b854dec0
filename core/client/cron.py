"""Cron: tasks enqueued on a crontab schedule by every worker, once per tick in all.

Each app keeps its entries (:class:`CronSchedule`); each worker of the app fires them through
a :class:`CronTable`;
the enqueue script records the last tick per entry in the queue's ``cronlast`` hash, so
however many workers fire the same tick, one task is enqueued.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from croniter import croniter

from ztq.core.client.calls import TaskCall
from ztq.core.client.enqueue import send
from ztq.core.errors import InvalidOption, QueueFull, WrongArguments

log = logging.getLogger(__name__)
DEFAULT_GRACE = 60.0  # seconds: a tick missed by more than this (worker down) is skipped


@dataclass
class CronEntry:
    name: str
    call: TaskCall
    spec: str
    grace: float = DEFAULT_GRACE
    next_fire: float | None = None

    def next_after(self, when: float) -> float:
        return float(croniter(self.spec, when).get_next(float))

    def last_at_or_before(self, when: float) -> float:
        it = croniter(self.spec, when + 0.001)
        return float(it.get_prev(float))

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "spec": self.spec,
            "task": self.call.task,
            "queue": self.call.queue,
            "args": list(self.call.args),
            "kwargs": self.call.kwargs,
            "next": int((self.next_fire or self.next_after(time.time())) * 1000),
        }


def check_cron_call(name: str, spec: str, call: TaskCall, tf: Any) -> None:
    """Refuse a cron entry whose call does not bind to its task's signature (``tf``): a tick
    gives the entry's arguments and nothing else, so each tick would fail (issue 39)."""
    try:
        tf.check_arguments(tuple(call.args), dict(call.kwargs))
    except WrongArguments as exc:
        raise WrongArguments(
            f"cron entry {name!r} ({spec}) would fail on every tick: {exc}; a tick gives the "
            f"entry's arguments only: add_cron({call.task.rsplit('.', 1)[-1]}.prepare(args), "
            f"{spec!r}), or give the function defaults"
        ) from None


class CronSchedule:
    """The cron entries of one app (``app.add_cron`` / ``@app.task(cron=...)``)."""

    def __init__(self) -> None:
        self._entries: dict[str, CronEntry] = {}
        self._lock = threading.Lock()

    def add(
        self, call: Any, spec: str, *, name: str | None = None, grace: float = DEFAULT_GRACE
    ) -> CronEntry:
        """Schedule ``call`` (a prepared task, or a task function to call without arguments)."""
        if not isinstance(call, TaskCall):
            prepare = getattr(call, "prepare", None)
            if prepare is None:
                raise InvalidOption(f"add_cron needs a task or a prepared call, not {call!r}")
            call = prepare()
        if not isinstance(spec, str) or not croniter.is_valid(spec):
            raise InvalidOption(f"cron spec {spec!r} is not a valid crontab expression")
        entry = CronEntry(name or call.task, call, spec, grace)
        with self._lock:
            self._entries[entry.name] = entry
        return entry

    def remove(self, name: str) -> None:
        with self._lock:
            self._entries.pop(name, None)

    def entries(self) -> list[CronEntry]:
        with self._lock:
            return list(self._entries.values())


class CronTable:
    """The firing side, run by workers: which ticks are due, and when to look again."""

    def __init__(self, entries: list[CronEntry]) -> None:
        self.entries = entries

    def tick(
        self, now: float | None = None, skip: set[str] | frozenset[str] = frozenset()
    ) -> tuple[list[tuple[CronEntry, float]], float | None]:
        """Ticks to enqueue now as (entry, tick time), and the time of the next one.

        Entries named in ``skip`` (disabled by an operator) let their ticks pass unfired.
        """
        now = time.time() if now is None else now
        due: list[tuple[CronEntry, float]] = []
        for entry in self.entries:
            if entry.next_fire is None:
                last = entry.last_at_or_before(now)
                entry.next_fire = last if now - last <= entry.grace else entry.next_after(now)
            while entry.next_fire <= now:
                if now - entry.next_fire <= entry.grace and entry.name not in skip:
                    due.append((entry, entry.next_fire))
                entry.next_fire = entry.next_after(entry.next_fire)
        upcoming = min((e.next_fire for e in self.entries if e.next_fire), default=None)
        return due, upcoming

    def due_now(self, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        return any(e.next_fire is None or e.next_fire <= now for e in self.entries)

    def fire(
        self, now: float | None = None, skip: set[str] | frozenset[str] = frozenset()
    ) -> tuple[list[Any], float | None]:
        """Enqueue the due ticks (dedup per tick in Redis); returns handles and next time.

        A tick whose queue is full (``max_pending``) is not fired, whatever the queue's
        ``when_full`` says (the cron thread never blocks): logged, and the other entries fire."""
        due, upcoming = self.tick(now, skip)
        handles = []
        for entry, at in due:
            try:
                handles.append(send(entry.call, cron=(entry.name, int(at * 1000))))
            except QueueFull as exc:
                log.warning("cron %s: tick not fired: %s", entry.name, exc)
        return handles, upcoming
