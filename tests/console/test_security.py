"""Login for every route, roles, CSRF, HTTP Basic on the read-only API, headers, settings."""

from __future__ import annotations

import base64
import re
from typing import Any
from urllib.parse import unquote

import pytest
from bs4 import BeautifulSoup
from pyramid.security import NO_PERMISSION_REQUIRED
from webtest import TestApp

from tests import sample_tasks as t
from tests.console import scenario
from tests.console.conftest import PASSWORD, SECRET, csrf, login, post
from ztq.console import main
from ztq.console.routes import PUBLIC, ROUTES
from ztq.core.auth.passwords import hash_password
from ztq.core.engine.storage import Storage
from ztq.core.errors import ConfigError

POST_ROUTES = {
    "/logout": {},
    "/workers": {"worker": "w1", "cmd": "pause"},
    "/queues/default/state": {"action": "pause"},
    "/bulk": {"action": "redo", "source": "errors"},
    "/tasks": {"action": "delete", "task": "default:x"},
    "/cron/run": {"name": "x"},
}


def _routes(wsgi: Any) -> list[tuple[str, str]]:
    items = wsgi.registry.introspector.get_category("routes")
    return [(i["introspectable"]["name"], i["introspectable"]["pattern"]) for i in items]


def _url(pattern: str) -> str:
    return "/" + re.sub(r"\{[^}]+\}", "x", pattern).lstrip("/")


def basic(name: str, password: str = PASSWORD) -> dict[str, str]:
    token = base64.b64encode(f"{name}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


@pytest.mark.slow
def test_every_route_is_listed_and_needs_a_login(wsgi: Any, anon: TestApp) -> None:
    routes = _routes(wsgi)
    names = {name for name, _ in routes}
    assert names == {name for name, _ in ROUTES} | {"__static/"}
    checked = 0
    for name, pattern in routes:
        if name in PUBLIC:
            continue
        url = _url(pattern)
        r = anon.get(url, expect_errors=True)
        assert not 200 <= r.status_int < 300, url
        if url.startswith(("/api/", "/metrics")):
            assert r.status_int == 401, url
            assert r.headers["WWW-Authenticate"].startswith("Basic")
        elif r.status_int != 404:  # a POST-only route answers a GET with 404
            assert r.status_int == 303 and "/login" in r.location, url
        r = anon.post(url, {"csrf_token": "nope"}, expect_errors=True)
        assert r.status_int in (303, 401, 403, 404), url
        assert "/login" in r.headers.get("Location", "/login")
        checked += 1
    assert checked == len(ROUTES) - 3  # all but login, lang and healthz


def test_every_view_outside_login_requires_a_permission(wsgi: Any) -> None:
    """Views name no permission (the default, ``view``) or ``operate``; POST views operate,
    except signing out and ending one's own sessions, which every user may do."""
    for item in wsgi.registry.introspector.get_category("views"):
        view = item["introspectable"]
        route = view["route_name"]
        if route is None or route in PUBLIC:
            continue
        perms = [r["value"] for r in item["related"] if r.category_name == "permissions"]
        assert NO_PERMISSION_REQUIRED not in perms, route
        if "POST" in (view["request_methods"] or ()) and route not in ("logout", "session_end"):
            assert perms == ["operate"], route
    assert (
        wsgi.registry.queryUtility(__import__("pyramid.interfaces").interfaces.IDefaultPermission)
        == "view"
    )


def test_login_logout_and_the_session_cookie(anon: TestApp) -> None:
    form = anon.get("/login?next=/queues").forms["login"]
    form["username"], form["password"] = "ann", PASSWORD
    r = form.submit()
    assert r.status_int == 303 and r.location.endswith("/queues")
    cookie = [h for k, h in r.headerlist if k == "Set-Cookie" and h.startswith("ztq_session")]
    assert cookie and "HttpOnly" in cookie[0] and "SameSite=Lax" in cookie[0]
    assert "ann" in anon.get("/queues").text
    r = post(anon, "/logout", {})
    assert r.status_int == 303 and "/login" in r.location
    assert anon.get("/queues").status_int == 303


@pytest.mark.slow
@pytest.mark.parametrize(("name", "password"), [("ann", "wrong"), ("nobody", PASSWORD), ("", "")])
def test_wrong_credentials_do_not_sign_in(anon: TestApp, name: str, password: str) -> None:
    form = anon.get("/login").forms["login"]
    form["username"], form["password"] = name, password
    r = form.submit(expect_errors=True)
    assert r.status_int == 403
    assert "Wrong user name or password" in r.text
    assert anon.get("/workers").status_int == 303


def test_login_never_redirects_off_site(anon: TestApp) -> None:
    for target in ("//evil.example/x", "https://evil.example/", "/\\evil.example", "javascript:x"):
        form = anon.get("/login").forms["login"]
        form["username"], form["password"] = "ann", PASSWORD
        form["next"] = target
        r = form.submit()
        assert r.location.startswith("/") and not r.location.startswith("//"), target
        assert "evil" not in r.location and "javascript" not in r.location, target
        post(anon, "/logout", {})


@pytest.mark.parametrize("target", ["/／／evil.com", "/\u3000", "/search?q=ü x", "/\xff"])
def test_a_non_ascii_next_is_encoded_and_the_sign_in_kept(anon: TestApp, target: str) -> None:
    """Issue 36: a ``next`` with a character a header cannot carry was a 500 from the server
    after the session was made (the sign-in lost): it is percent-encoded, still local."""
    form = anon.get("/login").forms["login"]
    form["username"], form["password"], form["next"] = "ann", PASSWORD, target
    r = form.submit()
    assert r.status_int == 303 and r.location.isascii(), r.location
    path = r.location.removeprefix("http://localhost")
    assert path.startswith("/") and not path.startswith("//") and unquote(path) == target
    assert "ann" in anon.get("/workers").text  # signed in


def test_only_signed_in_users_see_the_redis_address(anon: TestApp, redis_url: str) -> None:
    """Issue 36: the sign-in page (and any page a visitor gets) named the Redis host, port
    and db in its footer; an operator still sees it."""
    where = redis_url.split("//", 1)[1]  # host:port/db
    assert where.count(":") == 1 and "/" in where
    for path, status in (("/login", 200), ("/static/nothing.css", 404), ("/healthz", 200)):
        page = anon.get(path, status=status).text
        assert where not in page and where.split("/")[0] not in page, path
    assert where in login(anon, "ann").get("/workers").text


def test_only_the_assets_are_served_under_static(anon: TestApp) -> None:
    """Issue 36: static/ is a Python package too, and its __init__.py was served."""
    for name in ("console.css", "console.js", "favicon.svg"):
        assert anon.get(f"/static/{name}").status_int == 200, name
    for path in ("/static/__init__.py", "/static/__pycache__/", "/static/", "/static/x.css"):
        assert anon.get(path, expect_errors=True).status_int == 404, path


@pytest.mark.slow
def test_login_needs_the_csrf_token(anon: TestApp) -> None:
    anon.get("/login")
    r = anon.post("/login", {"username": "ann", "password": PASSWORD}, expect_errors=True)
    assert r.status_int == 400
    assert anon.get("/workers").status_int == 303


@pytest.mark.parametrize(("url", "data"), list(POST_ROUTES.items()))
def test_state_changes_need_the_csrf_token(operator: TestApp, url: str, data: dict) -> None:
    r = operator.post(url, data, expect_errors=True)
    assert r.status_int == 400, url
    r = operator.post(url, {**data, "csrf_token": "forged"}, expect_errors=True)
    assert r.status_int == 400, url
    r = operator.post(url, {**data, "csrf_token": csrf(operator)}, expect_errors=True)
    assert r.status_int in (303, 404), url  # done, or no such worker / cron entry


def test_a_token_from_another_session_is_refused(wsgi: Any, operator: TestApp) -> None:
    other = login(TestApp(wsgi), "ann")
    r = operator.post("/queues/default/state", {"action": "pause", "csrf_token": csrf(other)},
                      expect_errors=True)  # fmt: skip
    assert r.status_int == 400


@pytest.mark.slow
@pytest.mark.parametrize(
    ("url", "data"), [(u, d) for u, d in POST_ROUTES.items() if u != "/logout"]
)
def test_viewers_cannot_change_anything(
    viewer: TestApp, store: Storage, url: str, data: dict
) -> None:
    t.add.delay(1, 2)
    r = post(viewer, url, data, expect_errors=True)
    assert r.status_int == 403, url
    assert "may not do this" in r.text
    assert not store.queues.is_paused("default")


def test_viewers_see_no_action_buttons(viewer: TestApp, store: Storage) -> None:
    h = t.boom.delay("x")
    scenario.work(store, fail=lambda p: "bad")
    scenario.heartbeat(store, "w1")
    for url in ("/workers", "/queues/default", "/errors", f"/tasks/{h.id}", "/scheduled"):
        html = viewer.get(url).text
        assert 'name="action"' not in html and 'name="cmd"' not in html, url


@pytest.mark.slow
def test_basic_auth_on_the_read_only_api(anon: TestApp, store: Storage) -> None:
    for url in ("/api/queues", "/api/workers", "/metrics"):
        assert anon.get(url, headers=basic("vic")).status_int == 200
        r = anon.get(url, headers=basic("vic", "wrong"), expect_errors=True)
        assert r.status_int == 401 and "Basic" in r.headers["WWW-Authenticate"]
        r = anon.get(url, headers=basic("ghost"), expect_errors=True)
        assert r.status_int == 401
    garbage = {"Authorization": "Basic !!!not-base64"}
    assert anon.get("/api/queues", headers=garbage, expect_errors=True).status_int == 401
    # not on pages, and never for state changes
    assert anon.get("/workers", headers=basic("ann")).status_int == 303
    r = anon.post("/queues/default/state", {"action": "pause"}, headers=basic("ann"),
                  expect_errors=True)  # fmt: skip
    assert r.status_int == 303 and "/login" in r.location
    assert not store.queues.is_paused("default")


@pytest.mark.slow
def test_a_tampered_or_foreign_session_is_anonymous(
    wsgi: Any, operator: TestApp, settings: dict, user_lines: str
) -> None:
    cookie = operator.cookies["ztq_session"]
    forged = TestApp(wsgi)
    forged.set_cookie("ztq_session", cookie[:-3] + ("AAA" if not cookie.endswith("AAA") else "BBB"))
    assert forged.get("/workers").status_int == 303
    other_secret = main({}, **{**settings, "ztq.console.secret": "another-secret-0123456789xyz"})
    foreign = TestApp(other_secret)
    foreign.set_cookie("ztq_session", cookie)
    assert foreign.get("/workers").status_int == 303
    # a user removed from the settings is signed out at once
    only_vic = "\n".join(line for line in user_lines.splitlines() if line.startswith("vic"))
    without_ann = TestApp(main({}, **{**settings, "ztq.console.users": only_vic}))
    without_ann.set_cookie("ztq_session", cookie)
    assert without_ann.get("/workers").status_int == 303


def test_security_headers(operator: TestApp, anon: TestApp) -> None:
    responses = [
        operator.get("/workers"),
        anon.get("/login"),
        operator.get("/nope", expect_errors=True),
        operator.get("/api/queues"),
    ]
    for r in responses:
        csp = r.headers["Content-Security-Policy"]
        assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert r.headers["X-Content-Type-Options"] == "nosniff"
        assert r.headers["X-Frame-Options"] == "DENY"
        assert r.headers["Cache-Control"] == "no-store"
    static = anon.get("/static/console.css")
    assert static.status_int == 200 and "no-store" not in static.headers.get("Cache-Control", "")
    assert anon.get("/static/../console/config.py", expect_errors=True).status_int == 404


@pytest.mark.slow
def test_pages_have_no_inline_script_handlers_or_styles(operator: TestApp, store: Storage) -> None:
    h = t.boom.delay("<b>x</b>")
    scenario.work(store, fail=lambda p: "bad")
    scenario.heartbeat(store, "w1")
    pages = ["/login", "/workers", "/workers/w1", "/queues", "/queues/default", "/errors",
             "/errors/groups", f"/tasks/{h.id}", "/search?q=boom", "/running", "/scheduled",
             "/history", "/log", "/audit", "/nope"]  # fmt: skip
    for url in pages:
        soup = BeautifulSoup(operator.get(url, expect_errors=True).text, "html.parser")
        for script in soup.find_all("script"):
            assert script.get("src") and not script.string, url
        assert not soup.find_all("style"), url
        for tag in soup.find_all(True):
            assert "style" not in tag.attrs, (url, tag.name)
            assert not [a for a in tag.attrs if a.lower().startswith("on")], (url, tag.name)
        for a in soup.find_all("a", href=True):
            assert not a["href"].lower().startswith("javascript:"), url


def _settings(**changes: Any) -> dict[str, Any]:
    base = {
        "ztq.redis_url": "redis://127.0.0.1:1/0",
        "ztq.console.secret": SECRET,
        "ztq.console.users": f"ann operator {hash_password('pw', n=1024)}",
    }
    base.update(changes)
    return base


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"ztq.console.secret": ""}, "no secret"),
        ({"ztq.console.secret": "changeme"}, "well-known default"),
        ({"ztq.console.secret": "seekrit"}, "well-known default"),
        ({"ztq.console.secret": "short"}, "shorter than"),
        ({"ztq.console.users": ""}, "no users"),
        ({"ztq.console.users": "ann admin scrypt$x"}, "role"),
        ({"ztq.console.users": "ann operator plaintext"}, "hash"),
        ({"ztq.console.users": "ann operator"}, "NAME ROLE HASH"),
        ({"ztq.console.session_hours": "never"}, "number"),
    ],
)
def test_refuses_to_start_without_safe_settings(
    monkeypatch: pytest.MonkeyPatch, changes: dict, message: str
) -> None:
    for var in ("ZTQ_CONSOLE_SECRET", "ZTQ_CONSOLE_USERS", "ZTQ_REDIS_URL"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigError, match=message):
        main({}, **_settings(**changes))


def test_environment_overrides_the_ini(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> None:
    users = f"ann operator {hash_password('pw', n=1024)};vic viewer {hash_password('pw', n=1024)}"
    monkeypatch.setenv("ZTQ_CONSOLE_SECRET", "from-the-environment-0123456789")
    monkeypatch.setenv("ZTQ_CONSOLE_USERS", users)
    monkeypatch.setenv("ZTQ_REDIS_URL", redis_url)
    wsgi = main({}, **{"ztq.console.secret": "", "ztq.redis_url": "redis://127.0.0.1:1/0"})
    cfg = wsgi.registry.ztq_settings
    assert cfg.secret == "from-the-environment-0123456789"
    assert set(cfg.users) == {"ann", "vic"} and cfg.redis_url == redis_url
    assert login(TestApp(wsgi), "vic", "pw").get("/queues").status_int == 200


@pytest.mark.slow
def test_the_console_healthz_needs_no_login_and_tells_only_ok(settings: dict[str, Any]) -> None:
    r = TestApp(main({}, **settings)).get("/healthz")
    assert r.status_int == 200 and r.json == {"ok": True} and "Set-Cookie" not in r.headers
    down = TestApp(main({}, **{**settings, "ztq.redis_url": "redis://127.0.0.1:1/0"}))
    r = down.get("/healthz", expect_errors=True)
    assert r.status_int == 503 and r.json == {"ok": False, "redis": "unreachable"}
