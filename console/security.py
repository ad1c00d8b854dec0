"""Who may do what: login sessions, HTTP Basic for scripts, roles, CSRF, security headers.

- A signed session cookie (``ztq.console.secret``) carries the user name after ``/login``;
  the role is looked up in the configured users on every request, so removing a user or
  changing a role takes effect at once.
- ``GET``/``HEAD`` under ``/api/`` and ``/metrics`` also accept HTTP Basic credentials of
  the same users, for scripts and scrapers; nothing else does.
- Roles: ``viewer`` has the ``view`` permission, ``operator`` also ``operate``. Every view
  needs ``view`` unless it says otherwise (the default permission).
- Every unsafe request needs the CSRF token (``CookieCSRFStoragePolicy``), also for
  Basic-authenticated clients: state changes always need a session and a token.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import threading
import time
from collections import OrderedDict
from typing import Any

from pyramid.authentication import SessionAuthenticationHelper
from pyramid.authorization import ALL_PERMISSIONS, ACLHelper, Allow, Authenticated, Everyone
from pyramid.config import Configurator
from pyramid.csrf import CookieCSRFStoragePolicy
from pyramid.events import NewResponse
from pyramid.session import SignedCookieSessionFactory

from ztq.console.config import ConsoleSettings, User
from ztq.core.passwords import dummy_hash, verify_password

VIEW = "view"
OPERATE = "operate"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
}
_IDENTITY = "ztq.identity"


class Root:
    """The one context of the console: viewers view, operators also operate."""

    __acl__ = [
        (Allow, "role:operator", ALL_PERMISSIONS),
        (Allow, "role:viewer", VIEW),
    ]

    def __init__(self, request: Any) -> None:
        self.request = request


def basic_allowed(request: Any) -> bool:
    path = request.path_info
    return request.method in ("GET", "HEAD") and (path.startswith("/api/") or path == "/metrics")


class _VerifyCache:
    """Remembers recent successful Basic logins for a minute, so a scraper polling every few
    seconds does not pay for scrypt each time. Keys are salted digests, never passwords."""

    def __init__(self, size: int = 64, ttl: float = 60.0) -> None:
        self.size, self.ttl = size, ttl
        self._items: OrderedDict[bytes, float] = OrderedDict()
        self._lock = threading.Lock()
        self._salt = hashlib.sha256(repr(id(self)).encode()).digest()

    def _key(self, user: User, password: str) -> bytes:
        data = b"\0".join([self._salt, user.name.encode(), user.hash.encode(), password.encode()])
        return hashlib.sha256(data).digest()

    def check(self, user: User, password: str, now: float) -> bool:
        key = self._key(user, password)
        with self._lock:
            at = self._items.get(key)
            if at is not None and now - at < self.ttl:
                return True
        if not verify_password(password, user.hash):
            return False
        with self._lock:
            self._items[key] = now
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return True


class ConsolePolicy:
    """The Pyramid security policy of the console (sessions + Basic on read-only API)."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self.users = settings.users
        self.session = SessionAuthenticationHelper(prefix="ztq.")
        self.acl = ACLHelper()
        self.cache = _VerifyCache()

    def identity(self, request: Any) -> User | None:
        if _IDENTITY not in request.environ:
            request.environ[_IDENTITY] = self._identify(request)
        return request.environ[_IDENTITY]  # type: ignore[no-any-return]

    def _identify(self, request: Any) -> User | None:
        name = self.session.authenticated_userid(request)
        if name is not None:
            return self.users.get(name)
        if basic_allowed(request):
            return self._basic(request)
        return None

    def _basic(self, request: Any) -> User | None:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "basic" or not token:
            return None
        try:
            name, sep, password = base64.b64decode(token.strip()).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return None
        if not sep:
            return None
        user = self.users.get(name)
        if user is None:
            verify_password(password, dummy_hash())  # same cost as a known name
            return None
        return user if self.cache.check(user, password, time.monotonic()) else None

    def authenticated_userid(self, request: Any) -> str | None:
        user = self.identity(request)
        return None if user is None else user.name

    def permits(self, request: Any, context: Any, permission: str) -> Any:
        principals = [Everyone]
        user = self.identity(request)
        if user is not None:
            principals += [Authenticated, f"user:{user.name}", f"role:{user.role}"]
        return self.acl.permits(context, principals, permission)

    def remember(self, request: Any, userid: str, **kw: Any) -> list[tuple[str, str]]:
        request.environ.pop(_IDENTITY, None)
        return self.session.remember(request, userid, **kw)  # type: ignore[no-any-return]

    def forget(self, request: Any, **kw: Any) -> list[tuple[str, str]]:
        request.environ.pop(_IDENTITY, None)
        return self.session.forget(request, **kw)  # type: ignore[no-any-return]


def check_login(request: Any, name: str, password: str) -> User | None:
    """The user if ``name`` and ``password`` match a configured user (constant cost)."""
    user = request.registry.ztq_settings.users.get(name)
    if user is None:
        verify_password(password or "x", dummy_hash())
        return None
    return user if verify_password(password, user.hash) else None


def _add_headers(event: NewResponse) -> None:
    response = event.response
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)
    if not event.request.path_info.startswith("/static/"):
        response.headers["Cache-Control"] = "no-store"


def includeme(config: Configurator) -> None:
    cfg: ConsoleSettings = config.registry.ztq_settings
    config.set_session_factory(
        SignedCookieSessionFactory(
            cfg.secret,
            cookie_name="ztq_session",
            secure=cfg.secure_cookies,
            httponly=True,
            samesite="Lax",
            timeout=cfg.session_seconds,
            reissue_time=min(300, cfg.session_seconds // 10),
            hashalg="sha512",
            salt="ztq.console.session",
        )
    )
    config.set_csrf_storage_policy(
        CookieCSRFStoragePolicy(
            cookie_name="ztq_csrf", secure=cfg.secure_cookies, httponly=True, samesite="Lax"
        )
    )
    config.set_default_csrf_options(require_csrf=True)
    config.set_security_policy(ConsolePolicy(cfg))
    config.set_root_factory(Root)
    config.set_default_permission(VIEW)
    config.add_subscriber(_add_headers, NewResponse)

    def user(request: Any) -> User | None:
        return request.identity  # type: ignore[no-any-return]

    def can_operate(request: Any) -> bool:
        return bool(request.has_permission(OPERATE))

    config.add_request_method(user, "user", reify=True)
    config.add_request_method(can_operate, "can_operate", reify=True)
