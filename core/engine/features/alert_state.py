"""Alerts in Redis (docs/alerts.md): the alerts hash, the alerts log and the evaluators'
lock, as read by ``ztq.core.alerts``.

A round's changes (firing, resolved, sent, failed) are ``alerts.lua``; what is here reads
the hash and the log and takes the lock that lets one evaluator in all run a round.
"""

from __future__ import annotations

from ztq.core.engine.transport import Transport


def alert_records(storage: Transport) -> list[str]:
    """Every alert's JSON record (the values of the alerts hash)."""
    with storage.guard():
        return list(storage.client.hvals(storage.keys.alerts))


def alert_log(storage: Transport, top: str, count: int) -> list[tuple[str, dict[str, str]]]:
    """Up to ``count`` entries of the alerts log, newest first, from ``top`` (``+``, or an
    exclusive ``(id``)."""
    with storage.guard():
        return list(storage.client.xrevrange(storage.keys.alerts_log, top, "-", count=count))


def take_round_lock(storage: Transport, owner: str, ms: int) -> bool:
    """Take the evaluators' lock for ``ms`` unless another holds it; True if taken."""
    with storage.guard():
        return bool(storage.client.set(storage.keys.alerts_lock, owner, nx=True, px=ms))
