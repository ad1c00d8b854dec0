"""The last findings of the security probe (issue 29): undecodable URLs, the security headers
on every response, redirects that never name a host, and a CSRF token bound to the session.
(Sessions per identity are in test_sso.py, cached Basic logins during a lock in test_tokens.py,
the same URLs through waitress in test_pserve.py.)"""

from __future__ import annotations

import re
from typing import Any

import pytest
from webtest import TestApp

from tests import sample_tasks as t
from tests.console.conftest import PASSWORD, SECRET, csrf, login, post
from tests.console.test_tokens import bearer
from ztq.console import main
from ztq.console.security import HEADERS
from ztq.core.auth.sessions import session_handle
from ztq.core.auth.tokens import create_token
from ztq.core.engine.storage import Storage

EVIL = {"Host": "evil.example"}


def has_headers(r: Any) -> bool:
    return all(r.headers.get(name) == value for name, value in HEADERS.items())


def page_token(text: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', text)
    assert found, text[:300]
    return found.group(1)


# -- 3. invalid UTF-8 in the path or the query ----------------------------------------------
BAD_PATHS = ("/%ff", "/workers/%ff", "/queues/%c3", "/static/%ff", "/s/%ff/queues", "/api/%ff")
BAD_QUERIES = ("/login?next=%ff", "/workers?queue=%ff", "/api/queues?x=%e2%82", "/?%ff=1")


@pytest.mark.parametrize("signed_in", [False, True])
def test_undecodable_urls_give_404_or_400_with_the_headers(wsgi: Any, signed_in: bool) -> None:
    app = TestApp(wsgi)  # without a cookie jar: WebTest's own fails on such URLs
    cookie = "ztq_session=" + login(TestApp(wsgi), "ann").cookies["ztq_session"]
    headers = {"Cookie": cookie} if signed_in else {}
    for url in BAD_PATHS:
        r = app.get(url, headers=headers, expect_errors=True)
        assert r.status_int == 404 and has_headers(r), url
    for url in BAD_QUERIES:
        r = app.get(url, headers=headers, expect_errors=True)
        assert r.status_int == 400 and has_headers(r), url
    r = app.post("/lang?next=%ff", {"lang": "zh", "csrf_token": "x"}, headers=headers,
                 expect_errors=True)  # fmt: skip
    assert r.status_int == 400 and has_headers(r)


@pytest.mark.slow
def test_every_response_carries_the_headers(
    anon: TestApp, operator: TestApp, store: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    responses = [
        anon.get("/"),  # 303 to the sign-in
        anon.get("/login"),
        anon.get("/nothing/here", expect_errors=True),  # 404
        anon.get("/api/queues", expect_errors=True),  # 401
        anon.post("/login", {"username": "ann"}, expect_errors=True),  # 400: no CSRF token
        operator.get("/queues"),
        operator.get("/api/queues"),
        operator.get("/healthz"),
    ]
    assert all(has_headers(r) for r in responses)
    assert all(r.headers["Cache-Control"] == "no-store" for r in responses)
    asset = anon.get("/static/console.css")
    assert has_headers(asset) and "no-store" not in asset.headers["Cache-Control"]

    def broken(self: Storage) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(Storage, "ping_server", broken)  # an error no view answers
    r = anon.get("/healthz", expect_errors=True)
    assert r.status_int == 500 and has_headers(r) and "a bug" not in r.text


# -- 4. redirects never name a host ----------------------------------------------------------
def test_redirects_are_relative_whatever_the_host_header(wsgi: Any, store: Storage) -> None:
    handle = t.add.delay(1, 2)
    anon = TestApp(wsgi)
    seen = [anon.get("/", headers=EVIL), anon.get("/sessions", headers=EVIL)]
    form = anon.get("/login?next=/queues", headers=EVIL).forms["login"]
    form["username"], form["password"] = "ann", PASSWORD
    seen.append(form.submit(headers=EVIL))
    ann, vic = anon, login(TestApp(wsgi), "vic")
    vic_handle = session_handle(SECRET, vic.cookies["ztq_session"])
    resume = {"action": "resume", "next": "/queues"}
    seen += [
        ann.get("/tasks", headers=EVIL),  # the task index
        ann.get(f"/search?q={handle.id}", headers=EVIL),  # one task found
        post(ann, "/queues/default/state", {"action": "pause"}, headers=EVIL),
        post(ann, "/queues/default/state", resume, headers=EVIL),
        post(ann, "/tasks", {"action": "delete", "task": f"default:{handle.id}"}, headers=EVIL),
        post(ann, "/sessions/end", {"handle": vic_handle}, headers=EVIL),
        post(ann, "/tokens/revoke", {"id": "0123456789ab"}, headers=EVIL),
        post(ann, "/lang", {"lang": "zh", "next": "/queues"}, headers=EVIL),
        post(ann, "/logout", {}, headers=EVIL),
    ]
    for r in seen:
        assert r.status_int in (301, 302, 303), r.request.url
        location = r.headers["Location"]
        assert location.startswith("/") and not location.startswith("//"), location
        assert "evil" not in location, location


# -- 5. the CSRF token belongs to the session ------------------------------------------------
def test_a_csrf_token_planted_in_a_cookie_is_refused(wsgi: Any, store: Storage) -> None:
    """Someone who can set a cookie for the host (a sibling subdomain, plain HTTP) sets the
    CSRF cookie to a value of theirs and posts it: the token comes from the session, so
    the forged request fails, for a signed-in victim and for the sign-in form."""
    planted = "A" * 43
    victim = login(TestApp(wsgi), "ann")
    victim.set_cookie("ztq_csrf", planted)
    r = victim.post("/queues/default/state", {"action": "pause", "csrf_token": planted},
                    expect_errors=True)  # fmt: skip
    assert r.status_int == 400 and not store.queues.is_paused("default")
    anon = TestApp(wsgi)
    anon.set_cookie("ztq_csrf", planted)
    form = {"username": "ann", "password": PASSWORD, "csrf_token": planted}
    assert anon.post("/login", form, expect_errors=True).status_int == 400


def test_the_csrf_token_changes_at_sign_in_and_sign_out(wsgi: Any, store: Storage) -> None:
    app = TestApp(wsgi)
    before = page_token(app.get("/login").text)
    login(app, "ann")
    during = page_token(app.get("/queues").text)
    assert during != before and during == csrf(app)
    r = app.post("/lang", {"lang": "en", "csrf_token": before}, expect_errors=True)
    assert r.status_int == 400  # the sign-in form's token is over
    app.post("/logout", {"csrf_token": during})
    after = page_token(app.get("/login").text)
    assert after not in (before, during)
    r = app.post("/lang", {"lang": "en", "csrf_token": during}, expect_errors=True)
    assert r.status_int == 400  # the session's token ended with it
    assert app.post("/lang", {"lang": "en", "csrf_token": after}).status_int == 303
    again = TestApp(wsgi)
    login(again, "ann")
    assert csrf(again) != during  # another session of the same user: another token


def test_secure_cookies_use_the_host_prefix(settings: dict[str, Any]) -> None:
    app = TestApp(main({}, **settings, **{"ztq.console.secure_cookies": "true"}))
    r = app.get("/login", extra_environ={"wsgi.url_scheme": "https"})
    [cookie] = [v for k, v in r.headerlist if k == "Set-Cookie"]
    assert cookie.startswith("__Host-ztq_csrf=") and "Domain" not in cookie
    assert "Path=/" in cookie and "secure" in cookie.lower() and "HttpOnly" in cookie


def test_api_tokens_need_no_csrf_and_cannot_post(anon: TestApp, store: Storage) -> None:
    token, _ = create_token(store, "scraper", "operator", 10)
    r = anon.get("/api/queues", headers=bearer(token))
    assert r.status_int == 200 and "Set-Cookie" not in r.headers
    r = anon.post("/queues/default/state", {"action": "pause", "csrf_token": "x"},
                  headers=bearer(token), expect_errors=True)  # fmt: skip
    assert r.status_int == 303 and r.headers["Location"].startswith("/login")
    assert not store.queues.is_paused("default")
