"""What goes wrong: not signed in (login or 401), not allowed (403), bad or missing CSRF
token (400), unknown page or id (404), Redis unreachable (503). Never a bare 500 page."""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import urlencode

from pyramid.exceptions import BadCSRFOrigin, BadCSRFToken
from pyramid.httpexceptions import HTTPSeeOther
from pyramid.renderers import render_to_response
from pyramid.security import NO_PERMISSION_REQUIRED
from pyramid.view import (
    exception_view_config,
    forbidden_view_config,
    notfound_view_config,
    view_config,
)

from ztq.console.redis import MISSING
from ztq.console.security import IdentityRefused, LoginThrottled, basic_allowed
from ztq.core.errors import ConnectionFailed, ZtqError


def _is_api(request: Any) -> bool:
    path = request.path_info
    return path.startswith("/api/") or path == "/metrics"


def _problem(request: Any, status: int, title: str, detail: str) -> Any:
    if _is_api(request):
        response = request.response
        response.status = status
        response.content_type = "application/json"
        response.json_body = {"error": title, "detail": detail}
        return response
    response = render_to_response(
        "problem.jinja2", {"title": title, "detail": detail, "status": status}, request=request
    )
    response.status = status
    return response


@forbidden_view_config()
def forbidden(exc: Any, request: Any) -> Any:
    if request.user is None:
        if basic_allowed(request):
            response = _problem(request, 401, "Sign in", "Credentials are required.")
            response.headers["WWW-Authenticate"] = 'Basic realm="ztq console", charset="UTF-8"'
            return response
        if _is_api(request):
            return _problem(request, 401, "Sign in", "Sign in first; state changes need a session.")
        target = request.path_qs if request.method == "GET" else ""
        query = "?" + urlencode({"next": target}) if target else ""
        return HTTPSeeOther(location=request.route_path("login") + query)
    return _problem(
        request,
        403,
        request.t("Not allowed"),
        request.t("Your role ({role}) may not do this.", role=request.user.role),
    )


@notfound_view_config()
def not_found(exc: Any, request: Any) -> Any:
    detail = getattr(exc, "ztq_message", "")
    missing = request.environ.get(MISSING)
    if not detail and missing:
        detail = request.t("No system named {name}.", name=missing)
    detail = detail or request.t("There is nothing at this address.")
    return _problem(request, 404, request.t("Not found"), detail)


@exception_view_config(BadCSRFToken)
@exception_view_config(BadCSRFOrigin)
def bad_csrf(exc: Any, request: Any) -> Any:
    return _problem(
        request,
        400,
        request.t("Form expired"),
        request.t("The form was old or came from another site. Reload the page and try again."),
    )


@exception_view_config(ConnectionFailed)
def redis_down(exc: Any, request: Any) -> Any:
    return _problem(request, 503, request.t("Redis is unreachable"), str(exc))


@exception_view_config(IdentityRefused)
def identity_refused(exc: Any, request: Any) -> Any:
    return _problem(request, 403, request.t("Not allowed"), str(exc))


@exception_view_config(LoginThrottled)
def login_throttled(exc: Any, request: Any) -> Any:
    response = _problem(request, 429, request.t("Too many failed sign-ins"), str(exc))
    response.headers["Retry-After"] = str(max(1, math.ceil(exc.wait)))
    return response


@view_config(
    route_name="healthz", request_method=("GET", "HEAD"), permission=NO_PERMISSION_REQUIRED
)
def healthz(request: Any) -> Any:
    """200 while this process serves and Redis answers, else 503; no login, nothing else told."""
    response = request.response
    response.content_type = "application/json"
    try:
        request.storage.ping_server()
    except ZtqError:
        response.status = 503
        response.json_body = {"ok": False, "redis": "unreachable"}
        return response
    response.json_body = {"ok": True}
    return response
