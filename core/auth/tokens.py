"""Console API tokens: what scripts and Prometheus use instead of a person's password.

A token is ``ztq_<id>_<secret>``: ``id`` (12 hex digits) is public and names the token in
lists, logs and the console; ``secret`` is 32 random bytes, shown once by
``ztq token create`` and stored only as its SHA-256. A plain hash is enough here (unlike
passwords, which get scrypt): the secret is random and long, so there is nothing to guess
from its digest. Each token has a role (``viewer`` or ``operator``) and an expiry; Redis
deletes it when it expires, and ``ztq token revoke`` or the console's sessions page end it
sooner. ``used`` is written at most once a minute, so a scraper costs one read a request.

Tokens can also be declared in the settings (``ztq.console.tokens``: ``NAME ROLE ID SHA256``
lines, from :func:`static_token`): they live in the ini, not in Redis, so a Redis that
restarts empty does not turn every scrape into a 401. They never expire; removing the line
(and restarting the console) ends one.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass

from ztq.core.auth.sessions import ROLES
from ztq.core.engine.features import sign_in
from ztq.core.engine.storage import Storage
from ztq.core.errors import ZtqError

FORMAT = re.compile(r"^ztq_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
MAX_DAYS = 366
USED_EVERY = 60.0  # seconds between two writes of 'used'


class InvalidToken(ZtqError, ValueError):
    """A token request the console cannot honour (unknown role, lifetime out of range)."""


@dataclass(frozen=True)
class TokenInfo:
    id: str
    name: str
    role: str
    created: float  # seconds since the epoch
    expires: float
    used: float  # 0: never


@dataclass(frozen=True)
class StaticToken:
    """A token declared in the settings: its name, role and the SHA-256 of its secret."""

    name: str
    role: str
    digest: str


def static_token(name: str, role: str = "viewer") -> tuple[str, str]:
    """A new token to declare in the settings: (the token, shown once, for the scraper;
    the ``NAME ROLE ID SHA256`` line for ``ztq.console.tokens``, which holds no secret)."""
    if role not in ROLES:
        raise InvalidToken(f"role {role!r} must be one of {', '.join(ROLES)}")
    token_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    return f"ztq_{token_id}_{secret}", f"{name} {role} {token_id} {_digest(secret)}"


def check_static(tokens: dict[str, StaticToken], token: str) -> TokenInfo | None:
    """The declared token ``token`` spells, or None; no Redis involved."""
    match = FORMAT.match(token or "")
    found = tokens.get(match.group(1)) if match else None
    if match is None or found is None:
        return None
    if not hmac.compare_digest(found.digest, _digest(match.group(2))):
        return None
    return TokenInfo(match.group(1), found.name, found.role, 0.0, float("inf"), 0.0)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _info(token_id: str, raw: dict[str, str]) -> TokenInfo:
    return TokenInfo(
        id=token_id,
        name=raw.get("name", ""),
        role=raw.get("role", ""),
        created=int(raw.get("created", 0)) / 1000,
        expires=int(raw.get("expires", 0)) / 1000,
        used=int(raw.get("used", 0)) / 1000,
    )


def create_token(storage: Storage, name: str, role: str, days: float) -> tuple[str, TokenInfo]:
    """A new token (the only time its secret is seen) and what is stored about it."""
    if role not in ROLES:
        raise InvalidToken(f"role {role!r} must be one of {', '.join(ROLES)}")
    if not 0 < days <= MAX_DAYS:
        raise InvalidToken(f"a token lives more than 0 and at most {MAX_DAYS} days, not {days}")
    name = " ".join(name.split())[:80]
    if not name:
        raise InvalidToken("give the token a name that says who uses it (e.g. prometheus)")
    token_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    k = storage.keys
    args = ["create", token_id, int(days * 86400_000),
            "name", name, "role", role, "digest", _digest(secret)]  # fmt: skip
    expires = int(storage.call("token", [k.token(token_id), k.tokens], args))
    created = expires / 1000 - days * 86400
    return f"ztq_{token_id}_{secret}", TokenInfo(token_id, name, role, created, expires / 1000, 0)


def check_token(storage: Storage, token: str) -> TokenInfo | None:
    """The live token ``token`` spells, or None (malformed, unknown, expired, revoked)."""
    match = FORMAT.match(token or "")
    if not match:
        return None
    token_id, secret = match.groups()
    k = storage.keys
    raw = sign_in.token_record(storage, token_id)
    if not raw or not hmac.compare_digest(raw.get("digest", ""), _digest(secret)):
        return None
    info = _info(token_id, raw)
    now = time.time()
    if info.expires <= now:
        return None
    if now - info.used >= USED_EVERY:
        storage.call("token", [k.token(token_id), k.tokens], ["use", token_id, USED_EVERY * 1000])
    return info


def list_tokens(storage: Storage) -> list[TokenInfo]:
    """The live tokens, soonest to expire first."""
    live = sign_in.live_tokens(storage, int(time.time() * 1000))
    return [_info(i, raw) for i, raw in live if raw]


def revoke_token(storage: Storage, token_id: str) -> bool:
    """End a token now; True if it was live."""
    if not re.fullmatch(r"[0-9a-f]{12}", token_id or ""):
        return False
    k = storage.keys
    return bool(storage.call("token", [k.token(token_id), k.tokens], ["revoke", token_id]))


def count_tokens(storage: Storage) -> int:
    """How many tokens are live (for /metrics)."""
    return sign_in.count_live_tokens(storage, int(time.time() * 1000))
