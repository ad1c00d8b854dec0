"""Who may do what: sessions, SSO behind a proxy, API tokens and Basic for scripts, roles,
CSRF, security headers.

- A sign-in opens a session kept in Redis (:mod:`ztq.console.session`); the cookie holds
  only a random token. Every request checks the record against the settings: a user who
  was removed, or whose role or password changed, loses the session at once (audited).
- With ``ztq.console.sso_header`` set, a request from a trusted proxy that carries the
  header is that user, with the highest role ``sso_roles`` gives their groups; the header
  from any other address is refused (403), never silently ignored. An SSO session is good
  only while the proxy keeps sending the header; a changed user or role opens a new one.
- ``GET``/``HEAD`` under ``/api/`` and ``/metrics`` also accept an API token
  (``Authorization: Bearer ztq_...``, see :mod:`ztq.core.auth.tokens`) or HTTP Basic credentials
  of a user; Basic goes through the same throttle as the sign-in form. Nothing else does.
- Roles: ``viewer`` has the ``view`` permission, ``operator`` also ``operate``. Every view
  needs ``view`` unless it says otherwise (the default permission).
- Every unsafe request needs the CSRF token of its session
  (:class:`~ztq.console.session.SessionCSRF`): state changes always need a session and a token.
- Every response, errors included, carries :data:`HEADERS`, and a redirect's ``Location`` is
  a path, never a URL built from the request's ``Host`` (:func:`execution_policy`). A path or
  query string that is not UTF-8 is answered 404 or 400 before anything else runs.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import unquote_to_bytes, urlsplit, urlunsplit

from pyramid.authorization import ALL_PERMISSIONS, ACLHelper, Allow, Authenticated, Everyone
from pyramid.config import Configurator
from pyramid.response import Response
from pyramid.router import default_execution_policy

from ztq.console.config import ConsoleSettings, User
from ztq.console.session import SessionCSRF, is_from_proxy
from ztq.core.auth.logins import login_failed, login_succeeded, login_wait
from ztq.core.auth.passwords import dummy_hash, verify_password
from ztq.core.auth.sessions import end_session, grant_of
from ztq.core.auth.tokens import check_static, check_token
from ztq.core.monitor.streams import write_audit

log = logging.getLogger("ztq.console")

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
        self._salt = secrets.token_bytes(16)

    def _key(self, user: User, password: str) -> bytes:
        data = b"\0".join([self._salt, user.name.encode(), user.hash.encode(), password.encode()])
        return hashlib.sha256(data).digest()

    def known(self, user: User, password: str, now: float) -> bool:
        """True if these credentials were verified less than ``ttl`` seconds ago."""
        with self._lock:
            at = self._items.get(self._key(user, password))
        return at is not None and now - at < self.ttl

    def check(self, user: User, password: str, now: float) -> bool:
        key = self._key(user, password)
        if self.known(user, password, now):
            return True
        if not verify_password(password, user.hash):
            return False
        with self._lock:
            self._items[key] = now
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return True


class IdentityRefused(Exception):
    """A request whose credentials the console refuses outright (403), such as an SSO header
    from an address that is not a trusted proxy."""


class LoginThrottled(Exception):
    """Basic credentials while the user name or the client address is locked (429)."""

    def __init__(self, wait: float) -> None:
        super().__init__(f"too many failed sign-ins: try again in {wait:.0f} s")
        self.wait = wait


SSO_USER = re.compile(r"^[^\x00-\x1f\x7f]{1,254}$")


def user_grant(user: User) -> str:
    """What a password session depends on: a changed role or password ends it."""
    return grant_of("password", user.role, user.hash)


def stale_session(users: dict[str, User], record: Any) -> str:
    """Why a password session no longer matches the settings ('' while it does): the user
    was removed, or their role or password changed. Such a session ends at once."""
    if record.via != "password":
        return ""
    user = users.get(record.user)
    if user is None:
        return "removed"
    return "" if user_grant(user) == record.grant else "changed (role or password)"


def end_stale(storage: Any, record: Any, why: str) -> None:
    if end_session(storage, record.handle):
        write_audit(storage, record.user, "session ended",
                    detail=f"the user was {why} in the settings; from {record.ip}")  # fmt: skip


class ConsolePolicy:
    """The Pyramid security policy of the console."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self.users = settings.users
        self.tokens = settings.tokens  # declared in the settings: no Redis needed
        self.sso = settings.sso
        self.acl = ACLHelper()
        self.cache = _VerifyCache()

    def identity(self, request: Any) -> User | None:
        """The signed-in user (cached per request). The first call may raise
        :class:`ConnectionFailed`, :class:`IdentityRefused` or :class:`LoginThrottled`, which
        their exception views answer; later calls of the same request then see None."""
        if _IDENTITY not in request.environ:
            request.environ[_IDENTITY] = None
            request.environ[_IDENTITY] = self._identify(request)
        return request.environ[_IDENTITY]  # type: ignore[no-any-return]

    def _identify(self, request: Any) -> User | None:
        if self.sso is not None and self.sso.header in request.headers:
            return self._sso(request)
        session = request.session
        if session.error is not None:
            raise session.error
        record = session.record
        if record is not None:
            why = stale_session(self.users, record)
            if record.via == "password" and not why:
                return self.users[record.user]
            if why:
                end_stale(request.home_storage, record, why)
            session.invalidate()  # an SSO session without the proxy's header ends too
            return None
        if basic_allowed(request):
            return self._machine(request)
        return None

    def _sso(self, request: Any) -> User:
        assert self.sso is not None
        addr = request.remote_addr or "?"
        if not request.is_from_proxy:
            log.warning("refused an SSO header (%s) from %s: not a trusted proxy", self.sso.header,
                        addr)  # fmt: skip
            raise IdentityRefused(
                f"the {self.sso.header} header is only accepted from the trusted proxies"
            )
        name = request.headers[self.sso.header].strip()
        if not SSO_USER.match(name):
            raise IdentityRefused(f"the proxy sent no usable user name in {self.sso.header}")
        groups = [g.strip() for g in request.headers.get(self.sso.groups_header, "").split(",")]
        role = self.sso.role_of([g for g in groups if g])
        if role is None:
            raise IdentityRefused(f"{name}: none of your groups gives access to this console")
        grant = grant_of("sso", role)
        session = request.session
        if session.error is not None:
            raise session.error
        record = session.record
        if record is None and basic_allowed(request):
            return User(name, role, "")  # a script through the proxy: no session to keep
        if record is None or (record.via, record.user, record.grant) != ("sso", name, grant):
            session.start(user=name, role=role, grant=grant, via="sso")
            write_audit(request.home_storage, name, "signed in",
                        detail=f"SSO as {role} from {request.client_addr}")  # fmt: skip
        return User(name, role, "")

    def _machine(self, request: Any) -> User | None:
        """An API token or Basic credentials (read-only API and /metrics only)."""
        scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            info = check_static(self.tokens, credentials.strip()) or check_token(
                request.home_storage, credentials.strip()
            )
            return None if info is None else User(f"token:{info.id}", info.role, "")
        if scheme.lower() == "basic" and credentials:
            return self._basic(request, credentials)
        return None

    def _basic(self, request: Any, credentials: str) -> User | None:
        try:
            raw = base64.b64decode(credentials.strip()).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return None
        name, sep, password = raw.partition(":")
        if not sep:
            return None
        user = self.users.get(name)
        now = time.monotonic()
        storage, policy, addr = (
            request.home_storage,
            request.registry.ztq_settings.login,
            request.client_addr,
        )
        wait, _ = login_wait(storage, policy, name, addr)  # a lock first, remembered or not
        if wait > 0:
            raise LoginThrottled(wait)
        if user is not None and self.cache.known(user, password, now):
            return user  # checked within the last minute: no scrypt
        if user is None or not self.cache.check(user, password, now):
            if user is None:
                verify_password(password, dummy_hash())  # same cost as a known name
            locks = login_failed(storage, policy, name, addr)
            if max(locks):
                write_audit(storage, name, "login locked", detail="Basic, " + locks.describe(addr))
            return None
        if login_succeeded(storage, policy, name, addr):
            write_audit(storage, name, "login unlocked", detail=f"address {addr}: Basic")
        return user

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
        """Sign ``userid`` in with a password: a new session (the cookie is set with the
        response)."""
        user = self.users[userid]
        request.session.start(user=user.name, role=user.role, grant=user_grant(user),
                              via="password")  # fmt: skip
        request.environ[_IDENTITY] = user
        return []

    def forget(self, request: Any, **kw: Any) -> list[tuple[str, str]]:
        request.session.invalidate()
        request.environ[_IDENTITY] = None
        return []


def check_login(request: Any, name: str, password: str) -> User | None:
    """The user if ``name`` and ``password`` match a configured user (constant cost)."""
    user = request.registry.ztq_settings.users.get(name)
    if user is None:
        verify_password(password or "x", dummy_hash())
        return None
    return user if verify_password(password, user.hash) else None


def _undecodable(environ: dict[str, Any]) -> int:
    """404 if the path is not UTF-8 once unquoted, 400 if the query string is not, else 0.
    (WSGI hands both over as latin-1 text; WebOb would fail on them later, with a 500.)"""
    for part, status in (("PATH_INFO", 404), ("QUERY_STRING", 400)):
        try:
            unquote_to_bytes(environ.get(part, "").encode("latin-1")).decode("utf-8")
        except UnicodeError:
            return status
    return 0


def _final_headers(
    environ: dict[str, Any], headers: list[tuple[str, str]]
) -> list[tuple[str, str]]:
    """The security headers where missing, ``no-store`` but on static assets, and a
    ``Location`` cut to its path: WebOb makes it absolute from the request's Host header,
    and every redirect of the console stays on the site."""
    static = environ.get("PATH_INFO", "").startswith("/static/")
    out: list[tuple[str, str]] = []
    for name, value in headers:
        lower = name.lower()
        if lower == "cache-control" and not static:
            continue
        if lower == "location":
            parts = urlsplit(value)
            value = urlunsplit(("", "", "/" + parts.path.lstrip("/"), parts.query, parts.fragment))
        out.append((name, value))
    present = {name.lower() for name, _ in out}
    out += [(name, value) for name, value in HEADERS.items() if name.lower() not in present]
    if not static:
        out.append(("Cache-Control", "no-store"))
    return out


def execution_policy(environ: dict[str, Any], router: Any) -> Any:
    """Pyramid's execution policy, wrapped: undecodable URLs end here (no session, no view),
    an error no exception view answers is a plain 500 rather than the server's page, and
    every response leaves with :func:`_final_headers`."""
    status = _undecodable(environ)
    if status:
        response: Any = Response(
            "Not found\n" if status == 404 else "Bad request: the query string is not UTF-8\n",
            status=status,
            content_type="text/plain",
        )
    else:
        try:
            response = default_execution_policy(environ, router)
        except Exception:
            log.exception("unhandled error on %s %r", environ.get("REQUEST_METHOD"),
                          environ.get("PATH_INFO"))  # fmt: skip
            response = Response("Internal error\n", status=500, content_type="text/plain")

    def respond(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            return start_response(status, _final_headers(environ, headers), exc_info)

        return response(environ, start)  # type: ignore[no-any-return]

    return respond


def includeme(config: Configurator) -> None:
    cfg: ConsoleSettings = config.registry.ztq_settings
    config.include(".session")
    config.set_csrf_storage_policy(SessionCSRF())
    config.set_default_csrf_options(require_csrf=True)
    config.set_execution_policy(execution_policy)
    config.set_security_policy(ConsolePolicy(cfg))
    config.set_root_factory(Root)
    config.set_default_permission(VIEW)

    def user(request: Any) -> User | None:
        return request.identity  # type: ignore[no-any-return]

    def can_operate(request: Any) -> bool:
        return bool(request.has_permission(OPERATE))

    config.add_request_method(user, "user", reify=True)
    config.add_request_method(is_from_proxy, "is_from_proxy", reify=True)
    config.add_request_method(can_operate, "can_operate", reify=True)
