"""Console fixtures: the app on the private redis-server, signed-in WebTest clients."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from webtest import TestApp

import ztq.core as ztq
from ztq.console import main
from ztq.core.auth.passwords import hash_password
from ztq.core.auth.sessions import csrf_token
from ztq.core.engine.storage import Storage

PASSWORD = "correct horse battery"
SECRET = "test-secret-0123456789-abcdefghij"
ENV = ("ZTQ_REDIS_URL", "ZTQ_PREFIX", "ZTQ_CONSOLE_SECRET", "ZTQ_CONSOLE_USERS",
       "ZTQ_CONSOLE_SECURE_COOKIES")  # fmt: skip


@pytest.fixture(scope="session")
def user_lines() -> str:
    """ann (operator) and vic (viewer), hashed with a small scrypt cost to keep tests fast."""
    return "\n".join(
        f"{name} {role} {hash_password(PASSWORD, n=1024)}"
        for name, role in (("ann", "operator"), ("vic", "viewer"))
    )


@pytest.fixture
def settings(redis_url: str, user_lines: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    for var in ENV:
        monkeypatch.delenv(var, raising=False)
    return {
        "ztq.redis_url": redis_url,
        "ztq.console.secret": SECRET,
        "ztq.console.users": user_lines,
        "ztq.console.bulk_batch": "100",
        "ztq.console.bulk_seconds": "0",
    }


@pytest.fixture
def wsgi(settings: dict[str, Any]) -> Any:
    return main({}, **settings)


@pytest.fixture
def anon(wsgi: Any) -> TestApp:
    return TestApp(wsgi)


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Debian's headless Chromium driven by Playwright, launched once per test module: tests
    take their own contexts from it (``browser`` in test_browser.py closes them after each
    test). Not once per session: Playwright's sync API keeps an event loop running in the
    thread while it is started, and the tests that xdist hands the same process next call
    ``asyncio.run`` ("cannot be called from a running event loop")."""
    from playwright import sync_api

    # `make test` installs it (system-deps); a missing browser is a failure, not a skip
    assert Path(CHROMIUM).exists(), "Debian's chromium is missing: apt-get install chromium"
    with sync_api.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


def browser_sign_in(page: Any, url: str, lang: str = "en", user: str = "ann") -> Any:
    """Sign ``page`` (Playwright) in through the login form, then switch the language."""
    page.goto(url + "/login")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", PASSWORD)
    page.click("#login button")
    page.wait_for_url(lambda u: "/login" not in u)
    if lang == "zh":
        switch_language(page, "zh")
    return page


def switch_language(page: Any, lang: str) -> None:
    """Press the header's language switch and wait for the page it leads back to: a bare
    click returns before the form's POST lands, so the next ``goto`` or read could race it
    (and cancel it: the cookie never set, the page still in the other language)."""
    with page.expect_navigation():
        page.click(f"#lang button[value={lang}]")


def login(app: TestApp, name: str, password: str = PASSWORD) -> TestApp:
    form = app.get("/login").forms["login"]
    form["username"] = name
    form["password"] = password
    response = form.submit()
    assert response.status_int == 303, response.text[:500]
    return app


@pytest.fixture
def operator(wsgi: Any) -> TestApp:
    return login(TestApp(wsgi), "ann")


@pytest.fixture
def viewer(wsgi: Any) -> TestApp:
    return login(TestApp(wsgi), "vic")


@pytest.fixture
def store(redis_url: str) -> Iterator[Storage]:
    """ztq's default connection on the same Redis as the app (for arranging and checking)."""
    yield ztq.get_storage()


def csrf(app: TestApp) -> str:
    """The CSRF token of a client's session (as the forms carry it), or before a sign-in
    that of its anonymous CSRF cookie."""
    if "ztq_session" in app.cookies:
        return csrf_token(SECRET, app.cookies["ztq_session"])
    return csrf_token(SECRET, app.cookies["ztq_csrf"], anonymous=True)


def post(app: TestApp, url: str, data: dict[str, Any] | list[tuple[str, str]], **kw: Any) -> Any:
    """POST like a form of the console does: with the CSRF token and a ``next`` back."""
    items = list(data.items()) if isinstance(data, dict) else list(data)
    items.append(("csrf_token", csrf(app)))
    return app.post(url, items, **kw)
