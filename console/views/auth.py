"""Login, logout and the language switch: the only views open to anonymous visitors."""

from __future__ import annotations

from typing import Any

from pyramid.csrf import new_csrf_token
from pyramid.httpexceptions import HTTPSeeOther
from pyramid.security import NO_PERMISSION_REQUIRED, forget, remember
from pyramid.view import view_config

from ztq.console.i18n import COOKIE, LANGS
from ztq.console.security import check_login
from ztq.console.web import safe_next, text_param


@view_config(route_name="home")
def home(request: Any) -> HTTPSeeOther:
    return HTTPSeeOther(location=request.route_path("workers"))


@view_config(
    route_name="login",
    request_method="GET",
    renderer="login.jinja2",
    permission=NO_PERMISSION_REQUIRED,
)
def login_form(request: Any) -> dict[str, Any]:
    return {"next": safe_next(request.GET.get("next"), ""), "username": "", "failed": False}


@view_config(
    route_name="login",
    request_method="POST",
    renderer="login.jinja2",
    permission=NO_PERMISSION_REQUIRED,
)
def login(request: Any) -> Any:
    name = text_param(request, "username", 64)
    password = request.POST.get("password", "")
    target = safe_next(request.POST.get("next"), request.route_path("workers"))
    user = check_login(request, name, password if isinstance(password, str) else "")
    if user is None:
        request.response.status = 403
        return {"next": target, "username": name, "failed": True}
    request.session.invalidate()  # a fresh session: no fixation across the login
    headers = remember(request, user.name)
    new_csrf_token(request)
    return HTTPSeeOther(location=target, headers=headers)


@view_config(route_name="logout", request_method="POST")
def logout(request: Any) -> HTTPSeeOther:
    headers = forget(request)
    request.session.invalidate()
    return HTTPSeeOther(location=request.route_path("login"), headers=headers)


@view_config(route_name="lang", request_method="POST", permission=NO_PERMISSION_REQUIRED)
def switch_language(request: Any) -> HTTPSeeOther:
    lang = request.POST.get("lang")
    response = HTTPSeeOther(location=safe_next(request.POST.get("next"), "/"))
    if lang in LANGS:
        response.set_cookie(COOKIE, lang, max_age=365 * 86400, httponly=True, samesite="Lax")
    return response
