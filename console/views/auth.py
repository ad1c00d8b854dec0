"""Login, logout and the language switch: the only views open to anonymous visitors."""

from __future__ import annotations

import math
from typing import Any

from pyramid.httpexceptions import HTTPSeeOther
from pyramid.security import NO_PERMISSION_REQUIRED, forget, remember
from pyramid.view import view_config

from ztq.console.i18n import COOKIE, LANGS
from ztq.console.security import check_login
from ztq.console.web import safe_next, text_param
from ztq.core.auth.logins import login_failed, login_succeeded, login_wait
from ztq.core.monitor.streams import write_audit


@view_config(
    route_name="login",
    request_method="GET",
    renderer="login.jinja2",
    permission=NO_PERMISSION_REQUIRED,
)
def login_form(request: Any) -> dict[str, Any]:
    next_ = safe_next(request.GET.get("next"), "")
    return {"next": next_, "username": "", "failed": False, "wait": 0}


@view_config(
    route_name="login",
    request_method="POST",
    renderer="login.jinja2",
    permission=NO_PERMISSION_REQUIRED,
)
def login(request: Any) -> Any:
    """Sign in, throttled per user name and client address, per address and per name
    (:mod:`ztq.core.auth.logins`): while a lock covers the attempt it gets 429 with
    ``Retry-After``, before any password check."""
    name = text_param(request, "username", 64)
    password = request.POST.get("password", "")
    target = safe_next(request.POST.get("next"), request.route_path("home"))
    storage, policy = request.home_storage, request.registry.ztq_settings.login
    addr = request.client_addr  # X-Forwarded-For only from a trusted proxy
    form = {"next": target, "username": name, "failed": False, "wait": 0}
    wait, ended = login_wait(storage, policy, name, addr)
    if ended:
        write_audit(storage, name, "login unlocked", detail=f"address {addr}: the lock ran out")
    if wait > 0:
        return _locked(request, form, wait)
    user = check_login(request, name, password if isinstance(password, str) else "")
    if user is None:
        locks = login_failed(storage, policy, name, addr)
        if max(locks):
            write_audit(storage, name, "login locked", detail=locks.describe(addr))
            return _locked(request, form, max(locks))
        request.response.status = 403
        return {**form, "failed": True}
    if login_succeeded(storage, policy, name, addr):
        write_audit(storage, name, "login unlocked", detail=f"address {addr}: signed in")
    headers = remember(request, user.name)  # a new session and CSRF token: no fixation
    write_audit(storage, name, "signed in", detail=f"password, from {addr}")
    return HTTPSeeOther(location=target, headers=headers)


def _locked(request: Any, form: dict[str, Any], wait: float) -> dict[str, Any]:
    seconds = max(1, math.ceil(wait))
    request.response.status = 429
    request.response.headers["Retry-After"] = str(seconds)
    return {**form, "wait": seconds}


@view_config(route_name="logout", request_method="POST")
def logout(request: Any) -> HTTPSeeOther:
    """End the session in Redis: a copy of the cookie is worthless from now on."""
    user = request.user
    headers = forget(request)
    if user is not None:
        write_audit(
            request.home_storage, user.name, "signed out", detail=f"from {request.client_addr}"
        )
    return HTTPSeeOther(location=request.route_path("login"), headers=headers)


@view_config(route_name="lang", request_method="POST", permission=NO_PERMISSION_REQUIRED)
def switch_language(request: Any) -> HTTPSeeOther:
    lang = request.POST.get("lang")
    response = HTTPSeeOther(location=safe_next(request.POST.get("next"), "/"))
    if lang in LANGS:
        response.set_cookie(COOKIE, lang, max_age=365 * 86400, httponly=True, samesite="Lax")
    return response
