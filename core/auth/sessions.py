"""Console sessions kept in Redis, so that a sign-out, an operator or a settings change can
end them (a signed cookie could only run out).

The browser holds a random token (``secrets.token_urlsafe(32)``) and nothing else. Redis
holds the session under a *handle*: an HMAC of the token with the console's secret. Reading
Redis therefore gives no token to replay, and changing the secret ends every session at
once. A session ends when it is ended (sign-out, the sessions page, a changed user), after
``idle`` seconds without a request, or ``absolute`` seconds after the sign-in, whichever
comes first; ``session.lua`` enforces both on every use.

Each record says who (``user``, ``role``), how (``via``: ``password`` or ``sso``), a
``grant`` that fingerprints what the settings said about the user at sign-in (so a changed
role or password ends the session), the client (``ip``, ``ua``), times, and a little data
of the console's own (flash messages).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from ztq.core.engine.features import sign_in
from ztq.core.engine.storage import Storage

ROLES = ("viewer", "operator")  # what a console user, an SSO user or an API token may be
TOKEN = re.compile(r"^[A-Za-z0-9_-]{43}$")  # what secrets.token_urlsafe(32) makes
UA_LIMIT, IP_LIMIT = 300, 64


@dataclass(frozen=True)
class SessionPolicy:
    idle: float = 3600.0  # seconds without a request before a session ends
    absolute: float = 12 * 3600.0  # seconds after the sign-in before it ends anyway
    touch_every: float = 10.0  # least seconds between two writes of 'seen'

    def args(self, mode: str, handle: str) -> list[object]:
        return [mode, handle, int(self.idle * 1000), int(self.absolute * 1000)]


@dataclass(frozen=True)
class SessionRecord:
    """One signed-in browser, as the sessions page shows it."""

    handle: str  # names the session in Redis and in forms; not a credential
    user: str
    role: str
    via: str  # "password" or "sso"
    grant: str = field(repr=False)  # fingerprint of the user's settings at sign-in
    ip: str
    ua: str
    created: float  # seconds since the epoch
    seen: float
    expires: float  # when it ends unless used again (idle) or at the latest (absolute)
    data: dict[str, Any] = field(default_factory=dict, repr=False)


def session_handle(secret: str, token: str) -> str:
    return hmac.new(secret.encode(), token.encode(), hashlib.sha256).hexdigest()


def csrf_token(secret: str, token: str, *, anonymous: bool = False) -> str:
    """The CSRF token of the session whose cookie holds ``token`` or, ``anonymous``, of a
    visitor not signed in whose CSRF cookie holds it: an HMAC with the secret, so a token
    planted in a cookie does not make a valid one, every sign-in gives a new one, and
    neither the cookie's token nor the session's handle can be had from it."""
    message = f"csrf\0{'anonymous' if anonymous else 'session'}\0{token}"
    return hmac.new(secret.encode(), message.encode(), hashlib.sha256).hexdigest()


def grant_of(*parts: str) -> str:
    """A short fingerprint of what allowed a sign-in (role + password hash, or SSO role)."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _record(handle: str, raw: dict[str, str], policy: SessionPolicy) -> SessionRecord:
    created, seen = int(raw.get("created", 0)) / 1000, int(raw.get("seen", 0)) / 1000
    try:
        data = json.loads(raw.get("data") or "{}")
    except ValueError:
        data = {}
    return SessionRecord(
        handle=handle,
        user=raw.get("user", ""),
        role=raw.get("role", ""),
        via=raw.get("via", ""),
        grant=raw.get("grant", ""),
        ip=raw.get("ip", ""),
        ua=raw.get("ua", ""),
        created=created,
        seen=seen,
        expires=min(seen + policy.idle, created + policy.absolute),
        data=data if isinstance(data, dict) else {},
    )


def open_session(
    storage: Storage,
    policy: SessionPolicy,
    secret: str,
    *,
    user: str,
    role: str,
    grant: str,
    via: str,
    ip: str,
    ua: str,
) -> tuple[str, SessionRecord]:
    """Start a session; the token for the cookie (shown nowhere else) and its record."""
    token = secrets.token_urlsafe(32)
    handle = session_handle(secret, token)
    fields = {"user": user, "role": role, "grant": grant, "via": via,
              "ip": ip[:IP_LIMIT], "ua": ua[:UA_LIMIT]}  # fmt: skip
    k = storage.keys
    args = policy.args("open", handle) + [x for pair in fields.items() for x in pair]
    created = int(storage.call("session", [k.session(handle), k.sessions], args))
    raw = {**fields, "created": str(created), "seen": str(created)}
    return token, _record(handle, raw, policy)


def load_session(
    storage: Storage, policy: SessionPolicy, secret: str, token: str, ip: str
) -> SessionRecord | None:
    """The live session of a cookie's token (its 'seen' refreshed), or None."""
    if not TOKEN.match(token or ""):
        return None  # not ours: no Redis call for made-up cookies
    handle = session_handle(secret, token)
    k = storage.keys
    args = policy.args("touch", handle) + [ip[:IP_LIMIT], int(policy.touch_every * 1000)]
    flat = storage.call("session", [k.session(handle), k.sessions], args)
    if not flat:
        return None
    raw = dict(zip(flat[::2], flat[1::2], strict=True))
    return _record(handle, {str(a): str(b) for a, b in raw.items()}, policy)


def save_session_data(storage: Storage, handle: str, data: dict[str, Any]) -> bool:
    """Store the console's data of a live session (False if it has ended meanwhile)."""
    k = storage.keys
    args = ["save", handle, 0, 0, json.dumps(data, separators=(",", ":"))]
    return bool(storage.call("session", [k.session(handle), k.sessions], args))


def end_session(storage: Storage, handle: str) -> bool:
    """End one session (sign-out, the sessions page); True if it was live."""
    k = storage.keys
    return bool(storage.call("session", [k.session(handle), k.sessions], ["end", handle, 0, 0]))


def list_sessions(storage: Storage, policy: SessionPolicy) -> list[SessionRecord]:
    """The live sessions, most recently active first."""
    records = [_record(h, raw, policy) for h, raw in sign_in.live_sessions(storage) if raw]
    return sorted(records, key=lambda r: r.seen, reverse=True)


def count_sessions(storage: Storage) -> int:
    """How many sessions are live (for /metrics)."""
    return sign_in.count_live_sessions(storage, int(time.time() * 1000))
