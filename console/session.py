"""The console's Pyramid session: a random token in the cookie, the session in Redis.

:mod:`ztq.core.auth.sessions` stores and checks the records; this module is the
:class:`~pyramid.interfaces.ISession` views and templates use (``request.session``: the
signed-in user's record, flash messages) and the cookie that names it. Only a sign-in
(:meth:`ConsoleSession.start`) creates a record, so anonymous visitors cost Redis nothing
and cannot fill it; an unknown or ended cookie is deleted in the response.

The CSRF token (:class:`SessionCSRF`) is bound to the session: an HMAC of the session
cookie's token with the secret, so it changes with every sign-in and a cookie someone
planted cannot make one. A visitor not signed in (the sign-in form, the language switch)
gets a random ``ztq_csrf`` cookie (``__Host-ztq_csrf`` with secure cookies) for it instead,
deleted at sign-in and sign-out.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import secrets
import time
from collections.abc import Callable
from functools import wraps
from typing import Any

from pyramid import csrf
from pyramid.config import Configurator
from pyramid.interfaces import ICSRFStoragePolicy, ISession
from zope.interface import implementer

from ztq.console.config import ConsoleSettings, Network
from ztq.core.auth.sessions import (
    TOKEN,
    SessionRecord,
    csrf_token,
    end_session,
    load_session,
    open_session,
)
from ztq.core.auth.sessions import save_session_data as save_data
from ztq.core.errors import ConnectionFailed

COOKIE = "ztq_session"
CSRF_COOKIE = "ztq_csrf"  # only before a sign-in; "__Host-ztq_csrf" with secure cookies


def csrf_cookie(cfg: ConsoleSettings) -> str:
    """The anonymous CSRF cookie's name: with secure cookies the ``__Host-`` prefix makes
    browsers refuse it from a sibling domain or over plain HTTP."""
    return "__Host-" + CSRF_COOKIE if cfg.secure_cookies else CSRF_COOKIE


def _changes(method: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(method)
    def changed(self: ConsoleSession, *args: Any, **kw: Any) -> Any:
        self.changed()
        return method(self, *args, **kw)

    return changed


@implementer(ISession)
class ConsoleSession(dict[str, Any]):
    """``request.session``. ``record`` is the signed-in session (None: anonymous);
    ``error`` is set when Redis could not be asked (the security policy then answers 503);
    ``token`` is the session cookie's token while ``record`` is live."""

    def __init__(
        self,
        request: Any,
        record: SessionRecord | None,
        error: ConnectionFailed | None = None,
        token: str = "",
    ) -> None:
        super().__init__(record.data if record else {})
        self.request, self.record, self.error = request, record, error
        self.token = token if record else ""
        self.created = record.created if record else time.time()
        self.new = record is None
        self._dirty = False
        self._cookie: str | None = None  # a token to set, "" to delete, None: leave it
        self._anon: str | None = None  # the anonymous CSRF cookie's value, once asked
        self._anon_cookie: str | None = None  # like _cookie, for that cookie
        request.add_response_callback(self._respond)

    # -- ours ----------------------------------------------------------------------------------
    def start(self, *, user: str, role: str, grant: str, via: str) -> SessionRecord:
        """Sign in: end the current session (no fixation) and open a new one."""
        self.invalidate()
        request, cfg = self.request, self.request.registry.ztq_settings
        token, record = open_session(
            request.home_storage,
            cfg.sessions,
            cfg.secret,
            user=user,
            role=role,
            grant=grant,
            via=via,
            ip=request.client_addr,
            ua=request.user_agent or "",
        )
        self.record, self.new, self.created, self._cookie = record, False, record.created, token
        self.token = token
        return record

    def csrf_key(self) -> tuple[str, bool]:
        """What the CSRF token derives from: the session's token, or (True: anonymous) the
        random value of the anonymous CSRF cookie, made now if there is none."""
        if self.record is not None and self.token:
            return self.token, False
        if self._anon is None:
            name = csrf_cookie(self.request.registry.ztq_settings)
            sent = self.request.cookies.get(name, "")
            if TOKEN.match(sent) and self._anon_cookie != "":
                self._anon = sent
            else:
                self._anon = self._anon_cookie = secrets.token_urlsafe(32)
        return self._anon, True

    def new_anonymous_csrf(self) -> None:
        """Forget the anonymous CSRF cookie (sign-in, sign-out): a new one when asked."""
        name = csrf_cookie(self.request.registry.ztq_settings)
        self._anon = None
        self._anon_cookie = "" if name in self.request.cookies or self._anon_cookie else None

    def _respond(self, request: Any, response: Any) -> None:
        cfg = request.registry.ztq_settings
        if self._cookie:
            response.set_cookie(
                COOKIE,
                self._cookie,
                max_age=int(cfg.sessions.absolute),
                path="/",
                secure=cfg.secure_cookies,
                httponly=True,
                samesite="Lax",
            )
        elif self._cookie == "":
            response.delete_cookie(COOKIE, path="/")
        name = csrf_cookie(cfg)
        if self._anon_cookie:  # for the browser's current visit only
            response.set_cookie(name, self._anon_cookie, path="/", secure=cfg.secure_cookies,
                                httponly=True, samesite="Lax")  # fmt: skip
        elif self._anon_cookie == "":
            response.set_cookie(name, None, path="/", secure=cfg.secure_cookies)  # delete it
        if self._dirty and self.record is not None:
            with contextlib.suppress(ConnectionFailed):  # a flash lost with Redis: the page
                save_data(request.home_storage, self.record.handle, dict(self))  # answered already

    # -- ISession --------------------------------------------------------------------------------
    def changed(self) -> None:
        self._dirty = True

    def invalidate(self) -> None:
        """Sign out: the record is deleted in Redis and the cookie in the browser."""
        if self.record is not None:
            end_session(self.request.home_storage, self.record.handle)
            self.record = None
        if COOKIE in self.request.cookies or self._cookie:
            self._cookie = ""
        self.token = ""
        self.new_anonymous_csrf()
        dict.clear(self)
        self._dirty = False

    clear = _changes(dict.clear)
    update = _changes(dict.update)
    setdefault = _changes(dict.setdefault)
    pop = _changes(dict.pop)
    popitem = _changes(dict.popitem)
    __setitem__ = _changes(dict.__setitem__)
    __delitem__ = _changes(dict.__delitem__)

    def flash(self, msg: Any, queue: str = "", allow_duplicate: bool = True) -> None:
        stored = self.setdefault("_f_" + queue, [])
        if allow_duplicate or msg not in stored:
            stored.append(msg)

    def pop_flash(self, queue: str = "") -> list[Any]:
        return self.pop("_f_" + queue, [])  # type: ignore[no-any-return]

    def peek_flash(self, queue: str = "") -> list[Any]:
        return self.get("_f_" + queue, [])  # type: ignore[no-any-return]

    def new_csrf_token(self) -> str:  # see SessionCSRF
        return str(csrf.new_csrf_token(self.request))

    def get_csrf_token(self) -> str:
        return str(csrf.get_csrf_token(self.request))


def session_factory(request: Any) -> ConsoleSession:
    """Pyramid's session factory: the session the request's cookie names, if it is live."""
    token = request.cookies.get(COOKIE)
    if not token:
        return ConsoleSession(request, None)
    cfg: ConsoleSettings = request.registry.ztq_settings
    try:
        record = load_session(
            request.home_storage, cfg.sessions, cfg.secret, token, request.client_addr
        )
    except ConnectionFailed as exc:
        return ConsoleSession(request, None, exc)
    session = ConsoleSession(request, record, token=token)
    if record is None:
        session._cookie = ""  # ended or never ours: the browser forgets it
    return session


@implementer(ICSRFStoragePolicy)
class SessionCSRF:
    """The console's CSRF policy: the token of the request's session (see the module's
    docstring). Nothing is stored; a changed secret changes every token."""

    def get_csrf_token(self, request: Any) -> str:
        key, anonymous = request.session.csrf_key()
        return csrf_token(request.registry.ztq_settings.secret, key, anonymous=anonymous)

    def new_csrf_token(self, request: Any) -> str:
        """A signed-in session's token changes only with the session (at each sign-in)."""
        if request.session.record is None:
            request.session.new_anonymous_csrf()
        return self.get_csrf_token(request)

    def check_csrf_token(self, request: Any, supplied_token: str) -> bool:
        expected = self.get_csrf_token(request)
        return hmac.compare_digest(expected.encode(), str(supplied_token).encode())


def _is_proxy(addr: str, proxies: tuple[Network, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return False
    return any(ip in net for net in proxies)


def client_addr(request: Any) -> str:
    """The client's address: ``REMOTE_ADDR``, or behind a trusted proxy the last address of
    ``X-Forwarded-For`` that is not a trusted proxy. A client's own ``X-Forwarded-For``
    counts for nothing unless a trusted proxy passed it on, and then only its last hop."""
    remote = request.remote_addr or "?"
    proxies = request.registry.ztq_settings.proxies
    if not _is_proxy(remote, proxies):
        return str(remote)
    hops = [h.strip() for h in request.headers.get("X-Forwarded-For", "").split(",")]
    for hop in reversed([h for h in hops if h]):
        if not _is_proxy(hop, proxies):
            return hop[:64]
    return str(remote)


def is_from_proxy(request: Any) -> bool:
    return _is_proxy(request.remote_addr or "", request.registry.ztq_settings.proxies)


def includeme(config: Configurator) -> None:
    config.set_session_factory(session_factory)
    config.add_request_method(client_addr, "client_addr", reify=True)
