"""Queue-wide limits kept in Redis (``ztq:{q}:config``) and enforced by the scripts for every
producer and worker: ``max_running`` (tasks running at once), ``max_pending`` (tasks
waiting in the ready lists) with its policy when full (``when_full``), and ``rate_limit``
(tasks started per second, minute or hour, :class:`Rate`). See docs/queue-controls.md.

The scripts decide (``enqueue.lua`` answers ``full`` or ``overflow``, ``fetch.lua`` takes no
more than ``max_running`` leaves); this module checks what is stored and turns a ``full``
answer into :class:`QueueFull` or a bounded wait for room (``when_full = block``).
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ztq.core.errors import InvalidOption, QueueFull

WHEN_FULL: Final = ("raise", "block", "buffer")
DEFAULT_BLOCK_TIMEOUT: Final = 30.0  # seconds a blocked producer waits for room at most
MAX_BLOCK_TIMEOUT: Final = 3600.0
POLL: Final = 1.0  # longest wait on the room tokens (hints) before asking again
RATE_UNITS: Final = {"s": 1.0, "m": 60.0, "h": 3600.0}
RATE_FORMS: Final = (
    "'N/s', 'N/m' or 'N/h' (N a whole number >= 1), optionally followed by ' burst B' "
    "(B >= 1), e.g. '20/s' or '100/m burst 10'"
)
MIN_BURST_CAP: Final = 1000  # a burst may always be this big, whatever the rate
_RATE = re.compile(r"\s*([0-9]{1,9})\s*/\s*([smh])\s*(?:burst\s+([0-9]{1,9})\s*)?")


@dataclass(frozen=True)
class Rate:
    """A rate limit: at most ``count`` starts per ``unit`` (s, m, h), fleet-wide, with
    ``burst`` starts at once after a quiet spell. Enforced by GCRA on Redis's clock
    (``_lib.lua``): over any window of ``w`` seconds at most ``w * per_second + burst``
    tasks start (:meth:`bound`)."""

    count: int
    unit: str
    burst: int = 1

    @classmethod
    def parse(cls, value: object, name: str = "rate_limit") -> Rate:
        """``"20/s"``, ``"100/m"``, ``"5/h burst 3"``; anything else: :class:`InvalidOption`."""
        got = _RATE.fullmatch(value) if isinstance(value, str) else None
        if got is None or int(got[1]) < 1 or (got[3] is not None and int(got[3]) < 1):
            raise InvalidOption(f"{name} must be {RATE_FORMS}, or None to lift it; not {value!r}")
        count, unit, burst = int(got[1]), got[2], int(got[3] or 1)
        most = max(MIN_BURST_CAP, int(count * 3600 / RATE_UNITS[unit]))
        if burst > most:  # issue 39: '5/s burst 1000000' lifted the limit without a word
            raise InvalidOption(
                f"{name} {value!r}: a burst of {burst} lets {burst} tasks start at once, more "
                f"than an hour of {count}/{unit}; a burst is at most an hour's starts (or "
                f"{MIN_BURST_CAP}): {most} here, or lift the limit with None"
            )
        return cls(count, unit, burst)

    @property
    def spec(self) -> str:
        """What the config stores as ``rate_limit`` (the burst apart, as ``rate_burst``)."""
        return f"{self.count}/{self.unit}"

    @property
    def per_second(self) -> float:
        return self.count / RATE_UNITS[self.unit]

    def bound(self, window: float) -> int:
        """The most starts any window of ``window`` seconds sees."""
        return math.floor(window * self.per_second + 1e-9) + self.burst

    def __str__(self) -> str:
        return self.spec + (f" burst {self.burst}" if self.burst > 1 else "")


class Keep:
    """Marks a setting :func:`fields` leaves as it is."""

    def __repr__(self) -> str:
        return "KEEP"


KEEP: Final = Keep()


@dataclass(frozen=True)
class QueueLimits:
    """The limits in force on one queue (None: no limit)."""

    max_running: int | None = None
    max_pending: int | None = None
    when_full: str = "raise"
    block_timeout: float = DEFAULT_BLOCK_TIMEOUT
    rate_limit: Rate | None = None
    task_rates: tuple[tuple[str, Rate], ...] = ()  # the tasks' own (``@task(rate_limit=)``)
    key_concurrency: int | None = None  # leases at once per task key (_keyed.lua)

    @classmethod
    def from_hash(cls, raw: Mapping[Any, Any]) -> QueueLimits:
        """Read the config hash (bytes or str keys); a value that does not parse is ignored."""
        got = {(k.decode() if isinstance(k, bytes) else str(k)): v for k, v in raw.items()}
        text = {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in got.items()}

        def count(name: str) -> int | None:
            value = text.get(name, "")
            return int(value) if value.isdigit() and int(value) > 0 else None

        when = text.get("when_full", "raise")
        try:
            timeout = float(text.get("block_timeout", DEFAULT_BLOCK_TIMEOUT))
        except ValueError:
            timeout = DEFAULT_BLOCK_TIMEOUT
        try:
            parsed = Rate.parse(text["rate_limit"])
            rate: Rate | None = Rate(parsed.count, parsed.unit, count("rate_burst") or 1)
        except (KeyError, InvalidOption):
            rate = None
        tasks = []
        for field, spec in sorted(text.items()):
            if field.startswith("rate:") and len(spec.split()) == 2:
                with contextlib.suppress(InvalidOption):
                    r = Rate.parse(spec.split()[0])
                    tasks.append((field[5:], Rate(r.count, r.unit, max(1, int(spec.split()[1])))))
        return cls(
            count("max_running"),
            count("max_pending"),
            when if when in WHEN_FULL else "raise",
            timeout if math.isfinite(timeout) and timeout > 0 else DEFAULT_BLOCK_TIMEOUT,
            rate,
            tuple(tasks),
            count("key_concurrency"),
        )

    def as_dict(self) -> dict[str, Any]:
        """The settings that differ from "no limit" (what ``ztq queue show`` prints)."""
        out: dict[str, Any] = {}
        if self.max_running is not None:
            out["max_running"] = self.max_running
        if self.max_pending is not None:
            out |= {"max_pending": self.max_pending, "when_full": self.when_full}
            if self.when_full == "block":
                out["block_timeout"] = self.block_timeout
        if self.rate_limit is not None:
            out["rate_limit"] = str(self.rate_limit)
        if self.task_rates:
            out["task_rates"] = {name: str(rate) for name, rate in self.task_rates}
        if self.key_concurrency is not None:
            out["key_concurrency"] = self.key_concurrency
        return out

    def describe(self) -> str:
        """``at most 2 running at once; at most 100 waiting, then the overflow buffer; at most
        20/s started`` (the rate part only when there is a rate limit)."""
        running = f"at most {self.max_running} running at once" if self.max_running else (
            "no running limit")  # fmt: skip
        rate = f"; at most {self.rate_limit} started" if self.rate_limit else ""
        if self.task_rates:
            rate += "; tasks: " + ", ".join(f"{n} at most {r}" for n, r in self.task_rates)
        if self.key_concurrency:
            rate += f"; at most {self.key_concurrency} running per key"
        if self.max_pending is None:
            return f"{running}; no pending limit{rate}"
        wait = f"then producers wait up to {self.block_timeout:g}s"
        then = {"raise": "then QueueFull", "buffer": "then the overflow buffer", "block": wait}
        return f"{running}; at most {self.max_pending} waiting, {then[self.when_full]}{rate}"

    def rate_held(self, pending: int, state: Mapping[str, str], now: int) -> int:
        """The tasks the rate limits hold back at ``now`` (Redis ms; ``state``: the queue's
        rate hash, see _lib.lua): of the ``pending`` ready ones, all but the tokens there
        are; and the tasks their own rate limit holds in ``delayed``, one per token reserved
        ahead (a held task deleted still counts until its token's time)."""
        held = 0
        if self.rate_limit is not None and pending > 0:
            t = 1000 * RATE_UNITS[self.rate_limit.unit] / self.rate_limit.count
            tat = max(float(state.get("tat") or 0), now)
            tokens = max(0, math.floor((now + (self.rate_limit.burst - 1) * t - tat) / t) + 1)
            held = max(0, pending - tokens)
        for name, rate in self.task_rates:
            t = 1000 * RATE_UNITS[rate.unit] / rate.count
            last = float(state.get(f"t:{name}") or 0) - t - (rate.burst - 1) * t
            held += max(0, math.ceil((last - now) / t - 1e-9))
        return held


def _limit(name: str, value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidOption(f"{name} must be an int >= 1 or None, not {value!r}")
    return str(value)


def fields(
    *,
    max_running: int | None | Keep = KEEP,
    max_pending: int | None | Keep = KEEP,
    when_full: str | Keep = KEEP,
    block_timeout: float | Keep = KEEP,
    rate_limit: str | None | Keep = KEEP,
    key_concurrency: int | None | Keep = KEEP,
) -> list[str]:
    """The configure script's ARGV (field, value, ...; '' clears) for the settings given."""
    out: list[str] = []
    if not isinstance(key_concurrency, Keep):
        out += ["key_concurrency", _limit("key_concurrency", key_concurrency)]
    if not isinstance(max_running, Keep):
        out += ["max_running", _limit("max_running", max_running)]
    if not isinstance(max_pending, Keep):
        out += ["max_pending", _limit("max_pending", max_pending)]
    if not isinstance(when_full, Keep):
        if when_full not in WHEN_FULL:
            raise InvalidOption(
                f"when_full must be 'raise', 'block' or 'buffer', not {when_full!r}"
            )
        out += ["when_full", when_full]
    if not isinstance(block_timeout, Keep):
        ok = isinstance(block_timeout, (int, float)) and not isinstance(block_timeout, bool)
        if not ok or not 0 < float(block_timeout) <= MAX_BLOCK_TIMEOUT:
            raise InvalidOption(
                f"block_timeout must be seconds in (0, {MAX_BLOCK_TIMEOUT:g}], "
                f"not {block_timeout!r}"
            )
        out += ["block_timeout", repr(float(block_timeout))]
    if rate_limit is None:
        out += ["rate_limit", "", "rate_burst", ""]
    elif not isinstance(rate_limit, Keep):
        rate = Rate.parse(rate_limit)
        out += ["rate_limit", rate.spec, "rate_burst", str(rate.burst) if rate.burst > 1 else ""]
    if not out:
        raise InvalidOption("configure_queue: give at least one setting to change")
    return out


def full_error(queue: str, limits: QueueLimits, waited: float = 0.0) -> QueueFull:
    how = f" after waiting {waited:.1f}s for room" if waited else ""
    return QueueFull(queue, limits.max_pending, f"queue {queue} is full: it holds "
                     f"{limits.max_pending} tasks waiting to run (max_pending){how}")  # fmt: skip


class RoomWait:
    """A producer's wait for room in a full queue: raise at once (``raise``), or wait up to
    the queue's ``block_timeout`` (``block``), retrying each time a fetch makes room."""

    def __init__(self, queue: str, limits: QueueLimits, can_block: bool = True) -> None:
        self.queue, self.limits = queue, limits
        self.started = time.monotonic()
        self.blocking = can_block and limits.when_full == "block"

    def next_wait(self) -> float:
        """Seconds to wait for a room token before trying again; raises QueueFull when the
        queue does not block or the time is up."""
        if not self.blocking:
            raise full_error(self.queue, self.limits)
        waited = time.monotonic() - self.started
        left = self.limits.block_timeout - waited
        if left <= 0:
            raise full_error(self.queue, self.limits, waited)
        return min(left, POLL)


# -- per-key limits and fair turns (docs/queue-controls.md; scripts/_keyed.lua) -------------
KEY_MAX: Final = 128  # characters of a task's key
_KEY_BAD = re.compile(r"[\x00-\x1f\x7f]")
PER_KEY: Final = " per key"  # ``rate_limit="5/s per key"``: the rate of each key


def check_key(value: object) -> str:
    """A task's key as the scripts store it: a str of 1 to 128 characters without control
    characters (it names Redis keys and is shown on pages); else one-line InvalidOption."""
    if not isinstance(value, str) or not 0 < len(value) <= KEY_MAX or _KEY_BAD.search(value):
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        raise InvalidOption(
            f"key must be a str of 1 to {KEY_MAX} characters without control characters, "
            f"not {shown}"
        )
    return value


def check_keyed(key: object, concurrency: object, rate: object) -> None:
    """Refuse a key that is no key (:func:`check_key`; None: no key), a per-key concurrency
    that is no int >= 1 or a per-key rate that is no rate."""
    if key is not None:
        check_key(key)
    if concurrency is not None:
        _limit("concurrency", concurrency)
    if rate is not None:
        Rate.parse(rate, "key_rate")


def per_key_rate(spec: str | None) -> str | None:
    """``"5/s per key"`` -> ``"5/s"`` (a task's ``rate_limit`` meant for each key); None for
    a rate of the task as a whole."""
    if isinstance(spec, str) and spec.rstrip().endswith(PER_KEY):
        return str(Rate.parse(spec.rstrip()[: -len(PER_KEY)], "rate_limit"))
    return None


def keyed_level(level: str, key: str, concurrency: int | None, rate: str | None) -> str:
    """The enqueue script's priority field of a keyed task: ``level TAB concurrency TAB
    'N/u B' TAB key`` (_keyed.lua, KEYED.parse); the plain level stays the bare word, so a
    task without a key costs the script nothing more."""
    spec = ""
    if rate is not None:
        r = Rate.parse(rate, "key_rate")
        spec = f"{r.spec} {r.burst}"
    return f"{level}\t{concurrency or ''}\t{spec}\t{key}"
