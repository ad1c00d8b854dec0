"""SSO behind an authenticating proxy: the identity header counts only from trusted proxy
addresses, groups map to roles, and X-Forwarded-For names the client only through a proxy."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from webtest import TestApp

from tests.console.conftest import PASSWORD, SECRET, login, post
from ztq.console import main
from ztq.console.config import load
from ztq.core.auth.sessions import session_handle
from ztq.core.engine.storage import Storage
from ztq.core.errors import ConfigError
from ztq.core.monitor import streams

PROXY = "10.0.0.5"
SSO = {
    "ztq.console.trusted_proxies": f"{PROXY} 10.1.0.0/16",
    "ztq.console.sso_header": "X-Forwarded-User",
    "ztq.console.sso_roles": "ops operator\nstaff viewer",
}


@pytest.fixture
def sso_wsgi(settings: dict[str, Any]) -> Any:
    return main({}, **settings, **SSO)


def via_proxy(wsgi: Any, user: str = "", groups: str = "", addr: str = PROXY) -> TestApp:
    env = {"REMOTE_ADDR": addr}
    if user:
        env["HTTP_X_FORWARDED_USER"] = user
    if groups:
        env["HTTP_X_FORWARDED_GROUPS"] = groups
    return TestApp(wsgi, extra_environ=env)


def audit(store: Storage) -> list[dict[str, str]]:
    return streams.stream_page(store, "audit", limit=20).rows


def test_a_user_the_proxy_names_is_signed_in_with_the_role_of_their_groups(
    sso_wsgi: Any, store: Storage
) -> None:
    app = via_proxy(sso_wsgi, "carol@example.com", "staff, ops")
    page = app.get("/workers")
    assert page.status_int == 200 and "carol@example.com" in page.text
    assert 'badge role">operator' in page.text  # the highest role of her groups
    assert app.get("/sessions").text.count("carol@example.com") >= 2  # listed, via SSO
    [entry] = [e for e in audit(store) if e["action"] == "signed in"]
    assert (
        entry["user"] == "carol@example.com" and entry["detail"] == "SSO as operator from 10.0.0.5"
    )
    app.get("/queues")
    assert len([e for e in audit(store) if e["action"] == "signed in"]) == 1  # one session


def test_viewers_by_group_cannot_operate(sso_wsgi: Any) -> None:
    app = via_proxy(sso_wsgi, "dave", "staff")
    app.get("/workers")
    r = post(app, "/queues/default/state", {"action": "pause"}, expect_errors=True)
    assert r.status_int == 403


@pytest.mark.slow
def test_a_role_change_in_the_groups_rotates_the_session(sso_wsgi: Any) -> None:
    app = via_proxy(sso_wsgi, "erin", "staff")
    app.get("/workers")
    first = app.cookies["ztq_session"]
    app.extra_environ["HTTP_X_FORWARDED_GROUPS"] = "ops"
    assert 'badge role">operator' in app.get("/workers").text
    assert app.cookies["ztq_session"] != first


def test_no_group_with_a_role_is_refused(sso_wsgi: Any, store: Storage) -> None:
    r = via_proxy(sso_wsgi, "mallory", "guests").get("/workers", expect_errors=True)
    assert r.status_int == 403 and "none of your groups" in r.text
    assert not list(store.client.scan_iter(match="ztq:{ztq}:session:*"))


def test_the_header_from_another_address_is_refused(sso_wsgi: Any, store: Storage) -> None:
    r = via_proxy(sso_wsgi, "ann", "ops", addr="192.0.2.66").get("/workers", expect_errors=True)
    assert r.status_int == 403 and "only accepted from the trusted proxies" in r.text
    assert not list(store.client.scan_iter(match="ztq:{ztq}:session:*"))
    # a password sign-in from that address still works (without the header)
    direct = TestApp(sso_wsgi, extra_environ={"REMOTE_ADDR": "192.0.2.66"})
    assert login(direct, "ann").get("/workers").status_int == 200


@pytest.mark.slow
def test_an_sso_session_cookie_is_worthless_without_the_proxys_header(sso_wsgi: Any) -> None:
    app = via_proxy(sso_wsgi, "carol", "ops")
    app.get("/workers")
    thief = TestApp(sso_wsgi, extra_environ={"REMOTE_ADDR": "192.0.2.66"})
    thief.set_cookie("ztq_session", app.cookies["ztq_session"])
    assert thief.get("/workers").status_int == 303  # to the sign-in page
    assert app.get("/workers").status_int == 200  # a new session through the proxy


def test_x_forwarded_for_counts_only_from_a_trusted_proxy(sso_wsgi: Any, store: Storage) -> None:
    env = {"REMOTE_ADDR": PROXY, "HTTP_X_FORWARDED_FOR": "1.2.3.4, 198.51.100.20, 10.1.2.3"}
    login(TestApp(sso_wsgi, extra_environ=env), "ann")
    assert audit(store)[0]["detail"] == "password, from 198.51.100.20"  # right to left
    env = {"REMOTE_ADDR": "192.0.2.66", "HTTP_X_FORWARDED_FOR": "198.51.100.20"}
    login(TestApp(sso_wsgi, extra_environ=env), "ann")
    assert audit(store)[0]["detail"] == "password, from 192.0.2.66"  # made up: ignored


@pytest.mark.slow
def test_login_throttling_counts_the_forwarded_client_not_the_proxy(sso_wsgi: Any) -> None:
    """Behind a proxy every client shares its address: locking it would lock everyone."""
    guesser = {"REMOTE_ADDR": PROXY, "HTTP_X_FORWARDED_FOR": "198.51.100.1"}
    for _ in range(6):  # vic's name locked at the guesser's address (5 free failures)
        app = TestApp(sso_wsgi, extra_environ=guesser)
        form = app.get("/login").forms["login"]
        form["username"], form["password"] = "vic", "wrong"
        last = form.submit(expect_errors=True)
    assert last.status_int == 429
    other = {"REMOTE_ADDR": PROXY, "HTTP_X_FORWARDED_FOR": "198.51.100.2"}
    assert login(TestApp(sso_wsgi, extra_environ=other), "vic", PASSWORD)


@pytest.fixture
def live(settings: dict[str, Any], request: pytest.FixtureRequest) -> Iterator[str]:
    """The console on a real HTTP server on 127.0.0.1, with SSO trusting ``request.param``."""
    from webtest.http import StopableWSGIServer

    cfg = {**settings, **SSO, "ztq.console.trusted_proxies": request.param}
    server = StopableWSGIServer.create(main({}, **cfg), host="127.0.0.1")
    try:
        yield server.application_url.rstrip("/")
    finally:
        server.shutdown()


def _get(url: str, headers: dict[str, str]) -> tuple[int, str]:
    req = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310 (our own server)
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.slow
@pytest.mark.parametrize("live", ["192.0.2.10"], indirect=True)
def test_a_forged_header_over_real_http_from_a_non_proxy_is_refused(live: str) -> None:
    status, body = _get(live + "/workers", {"X-Forwarded-User": "ann", "X-Forwarded-Groups": "ops"})
    assert status == 403 and "only accepted from the trusted proxies" in body


@pytest.mark.parametrize("live", ["127.0.0.1"], indirect=True)
def test_the_same_request_from_the_trusted_proxy_signs_in(live: str) -> None:
    status, body = _get(live + "/workers", {"X-Forwarded-User": "ann", "X-Forwarded-Groups": "ops"})
    assert status == 200 and "ann" in body and "Sign out" in body


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"ztq.console.trusted_proxies": ""}, "trusted_proxies is empty"),
        ({"ztq.console.sso_roles": ""}, "maps no group to a role"),
        ({"ztq.console.trusted_proxies": "10.0.0.999"}, "'10.0.0.999' is not an address"),
        ({"ztq.console.sso_roles": "ops admin"}, "role 'admin' must be one of"),
        ({"ztq.console.sso_roles": "ops"}, "must be 'GROUP ROLE'"),
        ({"ztq.console.sso_header": "X-User: ann"}, "is not an HTTP header name"),
    ],
)
def test_bad_sso_settings_stop_the_console_with_a_clear_error(
    settings: dict[str, Any], changes: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load({**settings, **SSO, **changes})


def test_with_sso_the_console_needs_no_password_users(settings: dict[str, Any]) -> None:
    cfg = load({**settings, **SSO, "ztq.console.users": ""})
    assert cfg.users == {} and cfg.sso is not None and cfg.sso.role_of(["x", "ops"]) == "operator"
    assert (
        load({**settings, **SSO, "ztq.console.sso_roles": "* viewer"}).sso.role_of([]) == "viewer"
    )  # type: ignore[union-attr]


def test_scripts_through_the_proxy_open_no_sessions(sso_wsgi: Any, store: Storage) -> None:
    """A client without cookies (curl, a scraper) behind the proxy: every GET of the API is
    signed in by the header alone, and no session or audit entry piles up per request."""
    for _ in range(3):
        app = via_proxy(sso_wsgi, "scraper", "staff")
        assert app.get("/api/queues").status_int == 200
        assert app.get("/metrics").status_int == 200
    assert not list(store.client.scan_iter(match="ztq:{ztq}:session:*"))
    assert not [e for e in audit(store) if e["action"] == "signed in"]


@pytest.mark.slow
def test_an_sso_user_named_like_a_password_user_is_another_identity(
    sso_wsgi: Any, store: Storage
) -> None:
    """The proxy asserts ``vic`` (a viewer by group) while the password operator ``ann`` and
    the password viewer ``vic`` are signed in: sessions belong to how one signed in plus the
    name, so the SSO ``vic`` neither sees nor ends the password ``vic``'s sessions, and the
    reverse."""
    pw_vic = login(TestApp(sso_wsgi, extra_environ={"HTTP_USER_AGENT": "PasswordVic/1"}), "vic")
    sso_vic = via_proxy(sso_wsgi, "vic", "staff")
    sso_vic.extra_environ["HTTP_USER_AGENT"] = "SsoVic/2"
    page = sso_vic.get("/sessions")
    assert "SsoVic/2" in page.text and "PasswordVic/1" not in page.text
    handle = session_handle(SECRET, pw_vic.cookies["ztq_session"])
    r = post(sso_vic, "/sessions/end", {"handle": handle})
    assert "No session was ended." in r.follow().text
    post(sso_vic, "/sessions/end", {"others": "1"})
    assert pw_vic.get("/workers").status_int == 200  # still signed in
    page = pw_vic.get("/sessions")
    assert "PasswordVic/1" in page.text and "SsoVic/2" not in page.text
    post(pw_vic, "/sessions/end", {"others": "1"})
    assert sso_vic.get("/sessions").status_int == 200
    assert len(list(store.client.scan_iter(match="ztq:{ztq}:session:*"))) == 2
    ann = login(TestApp(sso_wsgi), "ann")  # an operator sees and may end both
    assert ann.get("/sessions").text.count('name="handle"') == 2
