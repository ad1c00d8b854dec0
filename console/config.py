"""The console's settings, read in one place: the ini section, then environment overrides.

| setting | environment | default |
|---|---|---|
| ``ztq.redis_url`` | ``ZTQ_REDIS_URL`` | ``redis://127.0.0.1:6379/0`` |
| ``ztq.prefix`` | ``ZTQ_PREFIX`` | ``ztq`` |
| ``ztq.console.secret`` | ``ZTQ_CONSOLE_SECRET`` | none: the console refuses to start |
| ``ztq.console.users`` | ``ZTQ_CONSOLE_USERS`` | none: the console refuses to start |
| ``ztq.console.secure_cookies`` | ``ZTQ_CONSOLE_SECURE_COOKIES`` | ``false`` (true behind HTTPS) |
| ``ztq.console.session_hours`` | | ``12`` |
| ``ztq.console.lost_after`` | | ``30`` seconds without a heartbeat |
| ``ztq.console.page_size`` | | ``50`` |
| ``ztq.console.bulk_batch`` | | ``500`` tasks per script call of a bulk action |
| ``ztq.console.bulk_seconds`` | | ``0.5``: time a bulk request works before showing progress |

``ztq.console.users`` holds one user a line, ``NAME ROLE HASH`` (``ZTQ_CONSOLE_USERS`` may
separate users with ``;`` too); ROLE is ``viewer`` or ``operator``; HASH comes from
``ztq hash-password``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ztq.core.errors import ConfigError
from ztq.core.passwords import is_valid_hash

ROLES = ("viewer", "operator")
USER_NAME = re.compile(r"^[A-Za-z0-9_.@\-]{1,64}$")
ENV = {
    "ztq.redis_url": "ZTQ_REDIS_URL",
    "ztq.prefix": "ZTQ_PREFIX",
    "ztq.console.secret": "ZTQ_CONSOLE_SECRET",
    "ztq.console.users": "ZTQ_CONSOLE_USERS",
    "ztq.console.secure_cookies": "ZTQ_CONSOLE_SECURE_COOKIES",
}
# Secrets that appear in docs, samples and tutorials: refusing them keeps a copied example
# config from signing sessions with a secret everybody knows.
KNOWN_DEFAULTS = {
    "changeme",
    "change-me",
    "change_me",
    "changethis",
    "secret",
    "seekrit",
    "itsaseekreet",
    "sosecret",
    "supersecret",
    "password",
    "development",
    "dev",
    "test",
    "ztq",
    "console",
    "default",
    "replace-me",
    "your-secret-here",
}
MIN_SECRET = 16


@dataclass(frozen=True)
class User:
    name: str
    role: str
    hash: str = field(repr=False)

    @property
    def can_operate(self) -> bool:
        return self.role == "operator"


@dataclass(frozen=True)
class ConsoleSettings:
    redis_url: str
    prefix: str
    secret: str = field(repr=False)
    users: dict[str, User] = field(repr=False)
    secure_cookies: bool = False
    session_seconds: int = 12 * 3600
    lost_after: float = 30.0
    page_size: int = 50
    bulk_batch: int = 500
    bulk_seconds: float = 0.5


def _bool(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def _number(
    settings: Mapping[str, Any], key: str, default: float, low: float, high: float
) -> float:
    raw = settings.get(key)
    if raw in (None, ""):
        return default
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{key} must be a number, not {raw!r}") from None
    if not low <= value <= high:
        raise ConfigError(f"{key} must be between {low:g} and {high:g}, not {raw!r}")
    return value


def check_secret(secret: str) -> str:
    """The secret if it is usable; a :class:`ConfigError` that says what to do otherwise."""
    secret = (secret or "").strip()
    how = (
        "set ztq.console.secret in the ini or ZTQ_CONSOLE_SECRET to a long random string, "
        'e.g. python -c "import secrets; print(secrets.token_urlsafe(32))"'
    )
    if not secret:
        raise ConfigError(f"the console has no secret to sign sessions: {how}")
    if secret.lower() in KNOWN_DEFAULTS or secret.lower().startswith(("change", "replace")):
        raise ConfigError(f"ztq.console.secret is a well-known default: {how}")
    if len(secret) < MIN_SECRET:
        raise ConfigError(f"ztq.console.secret is shorter than {MIN_SECRET} characters: {how}")
    return secret


def parse_users(text: str) -> dict[str, User]:
    """Parse ``NAME ROLE HASH`` lines; blank lines and ``#`` comments are skipped."""
    users: dict[str, User] = {}
    for number, line in enumerate(re.split(r"[\n;]", text or ""), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        where = f"ztq.console.users entry {number}"
        if len(parts) != 3:
            raise ConfigError(f"{where} must be 'NAME ROLE HASH', found {len(parts)} fields")
        name, role, hashed = parts
        if not USER_NAME.match(name):
            raise ConfigError(f"{where}: user name {name!r} is not allowed")
        if role not in ROLES:
            raise ConfigError(f"{where}: role {role!r} must be one of {', '.join(ROLES)}")
        if not is_valid_hash(hashed):
            raise ConfigError(f"{where}: the hash of {name!r} is not from 'ztq hash-password'")
        if name in users:
            raise ConfigError(f"{where}: user {name!r} is listed twice")
        users[name] = User(name, role, hashed)
    return users


def load(settings: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> ConsoleSettings:
    """Merge ``settings`` (the ini) with environment overrides and validate everything."""
    environ = os.environ if environ is None else environ
    merged = dict(settings)
    for key, var in ENV.items():
        if environ.get(var):
            merged[key] = environ[var]
    secret = check_secret(str(merged.get("ztq.console.secret") or ""))
    users = parse_users(str(merged.get("ztq.console.users") or ""))
    if not users:
        raise ConfigError(
            "the console has no users: add 'NAME ROLE HASH' lines to ztq.console.users "
            "(or ZTQ_CONSOLE_USERS); ROLE is viewer or operator, HASH from 'ztq hash-password'"
        )
    return ConsoleSettings(
        redis_url=str(merged.get("ztq.redis_url") or "redis://127.0.0.1:6379/0"),
        prefix=str(merged.get("ztq.prefix") or "ztq"),
        secret=secret,
        users=users,
        secure_cookies=_bool(merged.get("ztq.console.secure_cookies", False)),
        session_seconds=int(_number(merged, "ztq.console.session_hours", 12, 0.1, 24 * 30) * 3600),
        lost_after=_number(merged, "ztq.console.lost_after", 30.0, 1.0, 86400.0),
        page_size=int(_number(merged, "ztq.console.page_size", 50, 5, 500)),
        bulk_batch=int(_number(merged, "ztq.console.bulk_batch", 500, 1, 10_000)),
        bulk_seconds=_number(merged, "ztq.console.bulk_seconds", 0.5, 0, 30),
    )
