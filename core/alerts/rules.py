"""Alert rules: their one-line syntax, and which of them hold on a snapshot of Redis.

One rule a line (``;`` separates rules too, for the environment variable)::

    error_rate QUEUE > N in WINDOW [for DURATION]     failed runs of the window above N
    error_rate QUEUE > N% in WINDOW [for DURATION]    failed / (done + failed) above N %
    oldest_wait QUEUE > DURATION [for DURATION]        the oldest ready task waits longer
    no_worker QUEUE [for DURATION]                     tasks wait, no live worker serves it
    worker_lost [WORKER] [for DURATION]                a worker stopped sending heartbeats

QUEUE and WORKER are a name or a glob (``*``, ``mail-*``); WORKER defaults to ``*``.
DURATION is a number with ``s``, ``m`` or ``h`` (a bare number is seconds); WINDOW is whole
minutes from 1 to 120 (the per-minute counters live 2 hours). ``for`` holds an alert back
until its condition has held that long. Evaluation is a pure function of a
:class:`Snapshot`, so tests give it one and a ``now``.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the settings import this module: keep it light
    from ztq.core.engine.workers import WorkerInfo
    from ztq.core.monitor.queues import QueueStats

KINDS = ("error_rate", "oldest_wait", "no_worker", "worker_lost")
SHAPES = {
    "error_rate": "error_rate QUEUE > N in 5m (or > N% in 5m)",
    "oldest_wait": "oldest_wait QUEUE > 300s",
    "no_worker": "no_worker QUEUE",
    "worker_lost": "worker_lost [WORKER]",
}
MAX_WINDOW = 120  # minutes: the per-minute counters expire after 2 hours
PATTERN = re.compile(r"^[A-Za-z0-9_.:\-*?\[\]!]{1,64}$")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smh]?)$")
_UNIT = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class Rule:
    """One parsed rule; ``text`` (the line with its spaces normalised) is its identity."""

    text: str
    kind: str
    pattern: str = "*"  # queue or worker name / glob
    threshold: float = 0.0  # count, percent or seconds, by kind
    percent: bool = False  # error_rate: a ratio of done + failed
    window: int = 0  # error_rate: minutes
    hold: float = 0.0  # seconds the condition must hold before the alert fires ("for")

    def matches(self, name: str) -> bool:
        return fnmatch.fnmatchcase(name, self.pattern)

    @property
    def is_glob(self) -> bool:
        return any(c in self.pattern for c in "*?[")


@dataclass(frozen=True)
class Hit:
    """A rule whose condition holds now for one subject (a queue or a worker)."""

    rule: Rule
    subject: str
    value: float
    threshold: float
    text: str  # what is wrong, in a sentence (the webhook's and the page's)


@dataclass
class Snapshot:
    """What the rules look at, read in a few round trips (see ``ztq.core.alerts.alerter``)."""

    now: float  # seconds since the epoch
    queues: list[QueueStats] = field(default_factory=list)
    threads: dict[str, int] = field(default_factory=dict)  # threads of live workers, by queue
    workers: list[WorkerInfo] = field(default_factory=list)
    lost_after: float = 30.0


# -- parsing -----------------------------------------------------------------------------------
def duration(text: str) -> float:
    """``300s``, ``5m``, ``1.5h`` or ``300`` (seconds) -> seconds; ValueError otherwise."""
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a duration such as 30s, 5m or 2h")
    return float(m.group(1)) * _UNIT[m.group(2)]


def _runs(n: float, word: str) -> str:
    return f"{n:g} {word}" if n == 1 else f"{n:g} {word}s"


def _human(seconds: float) -> str:
    """``45 s``, ``5 min``, ``7.5 min``, ``3 h``: one decimal at most."""
    for unit, size in (("h", 3600), ("min", 60)):
        if seconds >= 2 * size or (size == 60 and seconds >= 60 and seconds % 60 == 0):
            return f"{seconds / size:.1f}".rstrip("0").rstrip(".") + f" {unit}"
    return f"{seconds:g} s"


def parse_rule(line: str) -> Rule:
    """One rule; ValueError with a reason (the caller adds which line) otherwise."""
    words = line.split()
    text = " ".join(words)
    hold = 0.0
    if len(words) >= 2 and words[-2] == "for":
        hold = duration(words[-1])
        words = words[:-2]
    kind, rest = words[0], words[1:]
    if kind not in KINDS:
        raise ValueError(f"unknown rule {kind!r}; known: {', '.join(KINDS)}")
    shape = SHAPES[kind]
    if kind == "worker_lost" and not rest:
        rest = ["*"]
    if not rest or not PATTERN.match(rest[0]):
        name = "worker" if kind == "worker_lost" else "queue"
        found = repr(rest[0]) if rest else "nothing"
        raise ValueError(f"expected a {name} name or glob after {kind}, found {found}: "
                         f"write '{shape}'")  # fmt: skip
    pattern, rest = rest[0], rest[1:]
    if kind in ("no_worker", "worker_lost"):
        if rest:
            raise ValueError(f"unexpected {' '.join(rest)!r}: write '{shape} [for 1m]'")
        return Rule(text, kind, pattern, hold=hold)
    if len(rest) < 2 or rest[0] != ">":
        raise ValueError(f"expected '> THRESHOLD' after the queue: write '{shape}'")
    limit = rest[1]
    if kind == "oldest_wait":
        if len(rest) != 2:
            raise ValueError(f"unexpected {' '.join(rest[2:])!r}: write '{shape} [for 1m]'")
        return Rule(text, kind, pattern, duration(limit), hold=hold)
    if len(rest) != 4 or rest[2] != "in":
        raise ValueError(f"expected '> N in WINDOW': write '{shape}'")
    percent = limit.endswith("%")
    try:
        threshold = float(limit[:-1] if percent else limit)
    except ValueError:
        raise ValueError(f"the threshold must be a number, not {limit!r}") from None
    if not 0 <= threshold < (100 if percent else 1e9):
        raise ValueError(f"the threshold {limit!r} is out of range")
    window = duration(rest[3])
    if window % 60 or not 60 <= window <= MAX_WINDOW * 60:
        raise ValueError(f"the window must be whole minutes from 1m to {MAX_WINDOW}m, "
                         f"not {rest[3]!r}")  # fmt: skip
    return Rule(text, kind, pattern, threshold, percent, int(window // 60), hold)


def parse_rules(raw: Any) -> tuple[Rule, ...]:
    """The rules of ``ztq.alerts.rules`` (a text, or a list of lines from ``--rule``).

    Blank lines and ``#`` comments are skipped. A bad rule is a ValueError naming its
    number and quoting it, so the settings layer can say which file line it is in.
    """
    if isinstance(raw, (list, tuple)):
        if all(isinstance(r, Rule) for r in raw):
            return tuple(raw)
        raw = "\n".join(str(r) for r in raw)
    rules: list[Rule] = []
    lines = [s.strip() for s in re.split(r"[\n;]", str(raw))]
    for number, line in enumerate((s for s in lines if s and not s.startswith("#")), 1):
        try:
            rule = parse_rule(line)
        except ValueError as exc:
            raise ValueError(f"rule {number} ({line!r}): {exc}") from None
        if any(r.text == rule.text for r in rules):
            raise ValueError(f"rule {number} ({line!r}) is listed twice")
        rules.append(rule)
    return tuple(rules)


# -- evaluating --------------------------------------------------------------------------------
def window_minutes(rules: Sequence[Rule]) -> int:
    """How many minutes of counters the rules need (0: none)."""
    return max((r.window for r in rules if r.kind == "error_rate"), default=0)


def _queue_hits(rule: Rule, s: QueueStats, snap: Snapshot) -> Hit | None:
    if rule.kind == "error_rate":
        minutes = s.throughput[-rule.window :]
        done, failed = sum(d for _, d, _ in minutes), sum(f for _, _, f in minutes)
        span = f"in the last {rule.window} min"
        if rule.percent:
            total = done + failed
            value = round(100.0 * failed / total, 1) if total else 0.0
            text = (f"queue {s.name}: {value:g}% of {_runs(total, 'run')} failed {span} "
                    f"(more than {rule.threshold:g}%)")  # fmt: skip
        else:
            value = failed
            text = (f"queue {s.name}: {_runs(failed, 'failed run')} {span} "
                    f"(more than {rule.threshold:g})")  # fmt: skip
        return Hit(rule, s.name, value, rule.threshold, text) if value > rule.threshold else None
    if rule.kind == "oldest_wait":
        if not s.pending or not s.head_enqueued:
            return None
        waited = round(max(0.0, snap.now - s.head_enqueued / 1000), 1)
        text = (f"queue {s.name}: the oldest ready task has waited {_human(round(waited))} "
                f"(more than {_human(rule.threshold)})")  # fmt: skip
        return Hit(rule, s.name, waited, rule.threshold, text) if waited > rule.threshold else None
    waiting = s.pending + s.delayed  # no_worker: as `ztq check` sees it
    if not waiting or s.paused or snap.threads.get(s.name, 0) > 0:
        return None
    verb = "waits" if waiting == 1 else "wait"
    text = f"queue {s.name}: {_runs(waiting, 'task')} {verb} and no live worker serves it"
    return Hit(rule, s.name, waiting, 0, text)


def evaluate(rules: Sequence[Rule], snap: Snapshot) -> list[Hit]:
    """The rules' conditions that hold in ``snap``, one hit per rule and subject."""
    hits: list[Hit] = []
    for rule in rules:
        if rule.kind == "worker_lost":
            for w in snap.workers:
                if w.status == "lost" and rule.matches(w.id):
                    age = round(w.age, 1)
                    text = f"worker {w.id} is lost: no heartbeat for {_human(round(age))}"
                    hits.append(Hit(rule, w.id, age, snap.lost_after, text))
            continue
        for s in snap.queues:
            if rule.matches(s.name):
                hit = _queue_hits(rule, s, snap)
                if hit is not None:
                    hits.append(hit)
    return hits
