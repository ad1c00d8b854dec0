"""Alerts: rules evaluated in rounds, state and history in Redis, messages to a webhook.

A round reads a snapshot (queue stats, workers: a few round trips), finds the rules'
conditions that hold (:mod:`ztq.core.alerts.rules`) and hands them to ``alerts.lua``, which
moves each alert between pending, firing and resolved in one step and returns the messages
to send, each reserved for this sender. So however many evaluators share a Redis (console
processes, ``ztq alerts --loop``, a cron job running ``ztq alerts``) and however often
they evaluate, an alert is announced once when it fires, reminded every ``repeat_minutes``
if asked, and closed once when it clears; a restart re-sends nothing. Evaluators that loop
also take a short lock per round (``SET NX PX``), so only one of them does the work.

A message that cannot be delivered is logged, kept on its alert (``error``, shown on the
page), recorded in the history (``failed``, at most every 10 minutes per alert) and tried
again next round; the rest of that round's messages wait too, so a webhook that is
down costs one bounded attempt per round. Delivery happens in the evaluator's thread,
never in a request.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ztq.core import settings as ztq_settings
from ztq.core.alerts import settings as alert_settings
from ztq.core.alerts import webhook as alert_webhook
from ztq.core.alerts.rules import Hit, Rule, Snapshot, evaluate, window_minutes
from ztq.core.engine.features import alert_state
from ztq.core.engine.keys import QUEUE_NAME, split_shard
from ztq.core.engine.storage import Storage
from ztq.core.monitor import queues as monitor
from ztq.core.monitor.workers import list_workers

log = logging.getLogger(__name__)

HISTORY_MAXLEN = 2000
SEP = "\t"  # between rule and subject in the state hash's fields
_ENTRY = re.compile(r"^\d{1,16}-\d{1,16}$")


@dataclass(frozen=True)
class AlertSettings:
    """The ``alerts.*`` settings, resolved (flag > environment > ini > default)."""

    rules: tuple[Rule, ...] = ()
    webhook: str = field(default="", repr=False)
    every: float = 30.0
    repeat_minutes: float = 0.0
    timeout: float = 5.0
    attempts: int = 3
    lost_after: float = 30.0  # the console's: when a worker counts as lost

    @property
    def webhook_shown(self) -> str:
        return alert_webhook.shown(self.webhook) if self.webhook else ""


def resolve_settings(
    flags: Mapping[str, Any] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    ini: Mapping[str, ztq_settings.IniValue] | None = None,
) -> AlertSettings:
    names = (*alert_settings.ALERTS, "console.lost_after")
    got = ztq_settings.resolve(alert_settings.TABLE, names, flags=flags, environ=environ, ini=ini)
    return AlertSettings(
        rules=got["alerts.rules"].value,
        webhook=got["alerts.webhook"].value,
        every=got["alerts.every"].value,
        repeat_minutes=got["alerts.repeat_minutes"].value,
        timeout=got["alerts.timeout"].value,
        attempts=got["alerts.attempts"].value,
        lost_after=got["console.lost_after"].value,
    )


def from_app_settings(
    settings: Mapping[str, Any],
    path: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> AlertSettings:
    """The console's alert settings, from its Pyramid settings (``[app:main]``)."""
    ini = ztq_settings.app_values(settings, alert_settings.TABLE, Path(path) if path else None)
    return resolve_settings(environ=environ, ini=ini)


# -- state -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Alert:
    """One alert as Redis holds it (see ``scripts/alerts.lua``); times in ms."""

    rule: str
    subject: str
    status: str  # pending (its `for` runs), firing, resolved (its resolve message is due)
    since: int
    fired: int = 0
    resolved: int = 0
    notified: int = 0  # the last firing or reminder delivered; 0: none yet
    value: float | None = None
    threshold: float | None = None
    text: str = ""
    error: str = ""  # why the last delivery failed, until one succeeds
    failed: int = 0  # when it failed

    @classmethod
    def from_json(cls, raw: str) -> Alert | None:
        try:
            d = json.loads(raw)
            return cls(str(d["rule"]), str(d["subject"]), str(d["status"]), int(d["since"]),
                       int(d.get("fired") or 0), int(d.get("resolved") or 0),
                       int(d.get("notified") or 0), d.get("value"), d.get("threshold"),
                       str(d.get("text") or ""), str(d.get("error") or ""),
                       int(d.get("failed") or 0))  # fmt: skip
        except (ValueError, KeyError, TypeError):
            return None

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


_ORDER = {"firing": 0, "resolved": 1, "pending": 2}


def current(storage: Storage) -> list[Alert]:
    """Every alert Redis holds: firing first, then oldest first."""
    alerts = [a for a in map(Alert.from_json, alert_state.alert_records(storage)) if a is not None]
    return sorted(alerts, key=lambda a: (_ORDER.get(a.status, 3), a.since, a.rule, a.subject))


def firing_count(storage: Storage) -> int:
    """How many alerts fire now (for ``/metrics``: one HVALS of a small hash)."""
    return sum(1 for a in current(storage) if a.status == "firing")


def history(storage: Storage, cursor: str | None = None, limit: int = 50) -> monitor.Page:
    """Firing, resolved, sent and failed events, newest first, paged by entry id."""
    limit = monitor.clamp(limit)
    top = f"({cursor}" if cursor and _ENTRY.match(cursor) else "+"
    entries = alert_state.alert_log(storage, top, limit + 1)
    rows = [{**f, "_id": i, "_at": int(i.split("-")[0])} for i, f in entries[:limit]]
    last = entries[limit - 1][0] if len(entries) > limit else None  # the last row's id
    return monitor.Page(rows, last, len(rows))


def delivery_problem(alerts: list[Alert]) -> Alert | None:
    """The alert whose message failed most recently and is still undelivered, if any."""
    return max((a for a in alerts if a.error), key=lambda a: a.failed, default=None)


# -- a round -----------------------------------------------------------------------------------
def snapshot(storage: Storage, rules: tuple[Rule, ...], lost_after: float, now: float) -> Snapshot:
    """What the rules need, and only that (2 to 4 round trips)."""
    snap = Snapshot(now=now, lost_after=lost_after)
    by_queue = [r for r in rules if r.kind != "worker_lost"]
    if by_queue:
        names = {split_shard(q)[0] for q in storage.queues.names()}  # a sharded queue is one
        names |= {r.pattern for r in by_queue if not r.is_glob}
        names = {n for n in names if QUEUE_NAME.match(n)}
        minutes = window_minutes(rules)
        snap.queues = monitor.folded_stats(storage, sorted(names), minutes=minutes, now=now)
    if any(r.kind in ("no_worker", "worker_lost") for r in rules):
        snap.workers = list_workers(storage, lost_after)
        for w in snap.workers:
            w.now = now
            if w.status in ("lost", "stopped"):
                continue
            threads = w.data.get("threads")
            for q, n in (threads if isinstance(threads, dict) else {}).items():
                if isinstance(n, int):
                    snap.threads[str(q)] = snap.threads.get(str(q), 0) + n
    return snap


@dataclass
class Round:
    """What one round saw and did."""

    at: float
    hits: list[Hit]
    alerts: list[Alert]  # the state after the round
    sent: list[tuple[str, Alert]] = field(default_factory=list)  # (firing|reminder|resolved, _)
    failed: list[tuple[str, Alert, str]] = field(default_factory=list)  # (which, alert, detail)

    @property
    def firing(self) -> list[Alert]:
        return [a for a in self.alerts if a.status == "firing"]

    def as_dict(self) -> dict[str, Any]:
        return {
            "at": int(self.at * 1000),
            "firing": [a.as_dict() for a in self.firing],
            "pending": [a.as_dict() for a in self.alerts if a.status == "pending"],
            "sent": [{"message": w, **a.as_dict()} for w, a in self.sent],
            "failed": [{"message": w, "error": d, **a.as_dict()} for w, a, d in self.failed],
        }


class Alerter:
    """Evaluates the rules against one Redis; :meth:`evaluate` is one round (tests call it
    with a ``now``), :meth:`step` a round under the lock, :meth:`start` a daemon thread."""

    def __init__(self, storage: Storage, cfg: AlertSettings, *, name: str = "") -> None:
        self.storage = storage
        self.cfg = cfg
        self.name = name or f"{socket.gethostname()}.{os.getpid()}"
        self.per_message = alert_webhook.per_message(cfg.timeout, cfg.attempts)
        self.claim = max(60.0, 3 * self.per_message)  # a reservation outlives its sender
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rounds = threading.Condition()
        self.rounds = 0  # rounds tried by step() (evaluated, skipped or failed)
        self.last_at = 0.0
        self.last_outcome = ""  # 'evaluated', 'skipped' (another evaluator) or 'error'
        self.last_error = ""

    # -- one round ---------------------------------------------------------------------------
    def evaluate(self, now: float | None = None) -> Round:
        """One round without the lock (``ztq alerts`` run once, tests). ``now`` (seconds)
        replaces the clocks of the client and of Redis, for tests."""
        at = time.time() if now is None else now
        redis_now = 0 if now is None else int(now * 1000)
        snap = snapshot(self.storage, self.cfg.rules, self.cfg.lost_after, at)
        hits = evaluate(self.cfg.rules, snap)
        k = self.storage.keys
        args: list[Any] = [
            "round", redis_now, HISTORY_MAXLEN, int(bool(self.cfg.webhook)),
            int(self.cfg.repeat_minutes * 60_000), int(self.claim * 1000),
        ]  # fmt: skip
        for h in hits:
            args += [h.rule.text, h.subject, h.value, h.threshold, int(h.rule.hold * 1000), h.text]
        reply = self.storage.call("alerts", [k.alerts, k.alerts_log], args)
        result = Round(at, hits, [])
        started = time.monotonic()
        down = ""
        for i in range(0, len(reply), 3):
            field_, which, state = str(reply[i]), str(reply[i + 1]), json.loads(reply[i + 2])
            alert = Alert.from_json(reply[i + 2])
            late = time.monotonic() - started + self.per_message > self.claim - 5
            if down or late or alert is None:
                outcome, detail = "skipped", ""
            else:
                ok, detail = alert_webhook.deliver(
                    self.cfg.webhook, alert_webhook.message(which, state),
                    timeout=self.cfg.timeout, attempts=self.cfg.attempts, pause=self._stop.wait,
                )  # fmt: skip
                outcome = "ok" if ok else "failed"
                if ok:
                    result.sent.append((which, alert))
                else:
                    down = detail
                    result.failed.append((which, alert, detail))
                    subject = field_.replace(SEP, " / ")
                    log.warning("alert webhook %s failed for %s %s: %s",
                                self.cfg.webhook_shown, which, subject, detail)  # fmt: skip
            self.storage.call(
                "alerts", [k.alerts, k.alerts_log],
                ["sent", redis_now, HISTORY_MAXLEN, field_, which, outcome, detail],
            )  # fmt: skip
        result.alerts = current(self.storage)
        return result

    def step(self, now: float | None = None) -> Round | None:
        """A round if no other evaluator took one in the last ``every`` seconds (the lock
        expires just before this evaluator's next round); None otherwise."""
        lock_ms = max(50, int(self.cfg.every * 900))
        took = alert_state.take_round_lock(self.storage, self.name, lock_ms)
        return self.evaluate(now) if took else None

    # -- the loop ----------------------------------------------------------------------------
    def tick(self) -> Round | None:
        """:meth:`step`, never raising: the outcome is kept for the page and logged."""
        result = None
        try:
            result = self.step()
            self.last_outcome = "evaluated" if result is not None else "skipped"
            self.last_error = ""
        except Exception as exc:  # a bad round must not end the loop (Redis away, a bug)
            log.warning("alert round failed: %s", exc, exc_info=not isinstance(exc, OSError))
            self.last_outcome, self.last_error = "error", str(exc)[:300]
        with self._rounds:
            self.last_at = time.time()
            self.rounds += 1
            self._rounds.notify_all()
        return result

    def run(self, on_round: Callable[[Round | None], Any] | None = None) -> None:
        """Evaluate every ``every`` seconds until :meth:`stop`; ``on_round`` gets each
        round's result (None when another evaluator held the lock or the round failed)."""
        while not self._stop.is_set():
            started = time.monotonic()
            result = self.tick()
            if on_round is not None:
                on_round(result)
            self._stop.wait(max(0.0, self.cfg.every - (time.monotonic() - started)))

    def start(self) -> Alerter:
        """Evaluate in a daemon thread until :meth:`stop`."""
        self._thread = threading.Thread(target=self.run, name="ztq-alerts", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def wait_rounds(self, count: int, timeout: float) -> bool:
        """Block until :attr:`rounds` reaches ``count`` (tests wait on this, not on sleeps)."""
        with self._rounds:
            return self._rounds.wait_for(lambda: self.rounds >= count, timeout)
