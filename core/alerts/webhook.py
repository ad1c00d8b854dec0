"""Alert messages and their delivery: a JSON POST to a webhook, bounded in time.

The body has a Slack-compatible ``text`` (Slack, Mattermost, Rocket.Chat and Teams'
incoming webhooks show it as is) and the structured fields a receiver can route on:
``rule``, ``kind``, ``subject``, ``status`` (``firing`` / ``resolved``), ``reminder``,
``value``, ``threshold``, ``since`` (ISO 8601, UTC) and ``since_ms``.

Each attempt waits at most ``timeout`` seconds for the connection and for each read of the
answer; a 2xx answer is a delivery. Network errors, timeouts, 429 and 5xx answers are
tried again, up to ``attempts`` times with a short pause in between; other 4xx answers
are not (the request itself is wrong). Nothing here raises: the caller gets (ok, detail).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

BACKOFF = 0.5  # seconds before the second attempt; the pause grows by as much each time
USER_AGENT = "ztq-alerts/1"


def iso(ms: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000)) if ms else ""


def message(which: str, state: dict[str, Any]) -> dict[str, Any]:
    """The JSON body for one notification: ``which`` is firing, reminder or resolved."""
    status = "resolved" if which == "resolved" else "firing"
    label = {"firing": "FIRING", "reminder": "STILL FIRING", "resolved": "RESOLVED"}[which]
    since = float(state.get("since") or 0)
    text = str(state.get("text") or "")
    if which == "resolved":
        text = f"{text} - over" if text else "over"
    rule = str(state.get("rule", ""))
    return {
        "text": f"[{label}] {rule}: {text} (since {iso(since) or '?'})",
        "rule": rule,
        "kind": rule.split(" ", 1)[0],
        "subject": str(state.get("subject", "")),
        "status": status,
        "reminder": which == "reminder",
        "value": state.get("value"),
        "threshold": state.get("threshold"),
        "since": iso(since),
        "since_ms": int(since),
    }


def shown(url: str) -> str:
    """The webhook as pages and logs may show it: scheme and host only (a Slack webhook's
    path is its secret)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return f"{parts.scheme}://{host}/…" if host else ""


def per_message(timeout: float, attempts: int) -> float:
    """The longest one message may take to deliver or fail (seconds)."""
    return attempts * timeout + BACKOFF * attempts * (attempts - 1) / 2


def _post(url: str, body: bytes, timeout: float) -> tuple[bool, bool, str]:
    """One attempt: (delivered, worth another try, detail)."""
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": USER_AGENT},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            status = int(response.status)
            return 200 <= status < 300, status >= 500, f"HTTP {status}"
    except urllib.error.HTTPError as exc:
        return False, exc.code == 429 or exc.code >= 500, f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return False, True, f"{type(reason).__name__}: {reason}"[:300]


def deliver(
    url: str,
    body: dict[str, Any],
    *,
    timeout: float,
    attempts: int,
    pause: Callable[[float], Any] = time.sleep,
) -> tuple[bool, str]:
    """POST ``body`` as JSON; (True, 'HTTP 200') or (False, what went wrong last).

    ``pause`` waits between attempts; a thread passes its stop event's ``wait`` so that a
    shutdown does not wait for the retries (a true return ends them).
    """
    data = json.dumps(body, ensure_ascii=False).encode("utf-8")
    detail = "not sent"
    for attempt in range(1, attempts + 1):
        ok, again, detail = _post(url, data, timeout)
        if ok or not again:
            return ok, detail
        if attempt < attempts and pause(BACKOFF * attempt):
            break
    return False, f"{detail} (after {attempt} attempt{'s' if attempt > 1 else ''})"
