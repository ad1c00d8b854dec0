"""Who is signed in (sessions) and which API tokens are live; ending either is audited.

Viewers see and end their own sessions; operators see everyone's sessions and the tokens,
and can end any of them. A session belongs to an identity: how it signed in (password or
SSO) and the name, so an SSO user named like a password user shares nothing with them.
Tokens are created with ``ztq token create`` only, so that a stolen browser session cannot
mint a long-lived credential.
"""

from __future__ import annotations

from typing import Any

from pyramid.httpexceptions import HTTPSeeOther
from pyramid.view import view_config

from ztq.console.security import OPERATE, end_stale, stale_session
from ztq.console.web import audit, back, flash, text_param
from ztq.core.auth.sessions import SessionRecord, end_session, list_sessions
from ztq.core.auth.tokens import list_tokens, revoke_token


def _identity(record: SessionRecord | None) -> tuple[str, str] | None:
    return None if record is None else (record.via, record.user)


def _sessions(request: Any) -> list[SessionRecord]:
    """The live sessions this user may see; sessions whose user was removed or changed in
    the settings are ended here (audited), not only at their next request."""
    cfg = request.registry.ztq_settings
    shown, mine = [], _identity(request.session.record)
    for record in list_sessions(request.home_storage, cfg.sessions):
        why = stale_session(cfg.users, record)
        if why:
            end_stale(request.home_storage, record, why)
            continue
        if request.can_operate or _identity(record) == mine:
            shown.append(record)
    return shown


@view_config(route_name="sessions", request_method="GET", renderer="sessions.jinja2")
def sessions_page(request: Any) -> dict[str, Any]:
    current = request.session.record
    return {
        "sessions": _sessions(request),
        "current": current.handle if current else "",
        "tokens": list_tokens(request.home_storage) if request.can_operate else [],
    }


@view_config(route_name="session_end", request_method="POST")
def end(request: Any) -> HTTPSeeOther:
    """End one session (``handle``) or, with ``others``, every other session of this
    identity (the same name signed in the same way)."""
    current = request.session.record
    wanted = text_param(request, "handle", 64)
    ended = 0
    for record in _sessions(request):
        mine = current is not None and record.handle == current.handle
        if request.POST.get("others") and (_identity(record) != _identity(current) or mine):
            continue
        if not request.POST.get("others") and record.handle != wanted:
            continue
        if mine:
            continue  # the current session ends with "Sign out"
        if end_session(request.home_storage, record.handle):
            ended += 1
            audit(request, "session ended", home=True,
                  detail=f"{record.user} from {record.ip} ({record.via})")  # fmt: skip
    if ended:
        flash(request, request.t("Ended {n} session(s).", n=ended))
    else:
        flash(request, request.t("No session was ended."), "error")
    return back(request, request.route_path("sessions"))


@view_config(route_name="token_revoke", request_method="POST", permission=OPERATE)
def revoke(request: Any) -> HTTPSeeOther:
    token_id = text_param(request, "id", 32)
    if revoke_token(request.home_storage, token_id):
        audit(request, "token revoked", home=True, detail=token_id)
        flash(request, request.t("Revoked token {id}.", id=token_id))
    else:
        flash(request, request.t("No live token {id}.", id=token_id), "error")
    return back(request, request.route_path("sessions"))
