"""Server-side sessions: the cookie is a random token, the session lives in Redis, and a
sign-out, an operator, a settings change or a timeout ends it for every copy of the cookie."""

from __future__ import annotations

import time
from typing import Any

import pytest
from webtest import TestApp

from tests import sample_tasks as t
from tests.console.conftest import PASSWORD, SECRET, login, post
from ztq.console import main
from ztq.core.auth.passwords import hash_password
from ztq.core.auth.sessions import TOKEN, session_handle
from ztq.core.engine.storage import Storage
from ztq.core.monitor import streams


def cookie(app: TestApp) -> str:
    return str(app.cookies["ztq_session"])


def copy_of(wsgi: Any, app: TestApp) -> TestApp:
    """Another browser holding a copy of ``app``'s cookies (a stolen cookie)."""
    thief = TestApp(wsgi)
    for name, value in app.cookies.items():
        thief.set_cookie(name, value)
    return thief


def signed_in(app: TestApp) -> bool:
    return app.get("/workers", expect_errors=True).status_int == 200


def session_keys(store: Storage) -> list[str]:
    return sorted(store.client.scan_iter(match="ztq:{ztq}:session:*"))


def audit_actions(store: Storage) -> list[str]:
    return [e["action"] for e in streams.stream_page(store, "audit", limit=100).rows]


@pytest.mark.slow
def test_the_cookie_holds_a_random_token_and_redis_holds_the_session(
    wsgi: Any, store: Storage
) -> None:
    env = {"HTTP_USER_AGENT": "Firefox/140", "REMOTE_ADDR": "198.51.100.7"}
    app = login(TestApp(wsgi, extra_environ=env), "ann")
    token = cookie(app)
    assert TOKEN.match(token)
    [key] = session_keys(store)
    handle = session_handle(SECRET, token)
    assert key.endswith(handle) and token not in key
    record = store.client.hgetall(key)
    assert {k: record[k] for k in ("user", "role", "via", "ip", "ua")} == {
        "user": "ann", "role": "operator", "via": "password", "ip": "198.51.100.7",
        "ua": "Firefox/140",
    }  # fmt: skip
    assert token not in str(record)  # reading Redis gives nothing to replay
    ttl = store.client.pttl(key)
    assert 0 < ttl <= 3600 * 1000  # the idle timeout (60 minutes by default)
    set_cookie = app.get("/login").headers.get("Set-Cookie", "")
    assert "ztq_session" not in set_cookie  # not re-sent on every response


def test_logout_ends_the_session_for_every_copy_of_the_cookie(wsgi: Any, store: Storage) -> None:
    ann = login(TestApp(wsgi), "ann")
    thief = copy_of(wsgi, ann)
    assert signed_in(thief)
    r = post(ann, "/logout", {})
    assert r.status_int == 303 and not session_keys(store)
    assert not signed_in(thief)  # the copied cookie is worthless now
    assert thief.get("/workers").location.endswith("/login?next=%2Fworkers")
    assert audit_actions(store)[:2] == ["signed out", "signed in"]


def test_a_new_sign_in_rotates_the_session_id(wsgi: Any, store: Storage) -> None:
    app = login(TestApp(wsgi), "ann")
    before = copy_of(wsgi, app)
    login(app, "vic")  # sign in again from the same browser
    assert cookie(app) != cookie(before)
    assert not signed_in(before) and signed_in(app)
    assert len(session_keys(store)) == 1


def test_a_cookie_planted_before_the_sign_in_is_not_used(wsgi: Any, store: Storage) -> None:
    """Fixation: an attacker's token set in the victim's browser never becomes a session."""
    planted = "A" * 43
    victim = TestApp(wsgi)
    victim.set_cookie("ztq_session", planted)
    login(victim, "ann")
    assert cookie(victim) != planted
    assert not store.client.exists(store.keys.session(session_handle(SECRET, planted)))


def test_anonymous_visits_and_made_up_cookies_store_nothing(wsgi: Any, store: Storage) -> None:
    app = TestApp(wsgi)
    app.get("/login")
    app.set_cookie("ztq_session", "x" * 43)
    r = app.get("/workers")
    assert r.status_int == 303 and "/login" in r.location
    assert "ztq_session=;" in r.headers["Set-Cookie"]  # the browser forgets it
    assert not session_keys(store) and not store.client.exists(store.keys.sessions)


def _age(store: Storage, app: TestApp, **fields: int) -> None:
    """Move a session's times back (as if that much time had passed)."""
    key = store.keys.session(session_handle(SECRET, cookie(app)))
    now = int(time.time() * 1000)
    store.client.hset(key, mapping={k: now - v for k, v in fields.items()})


def test_a_session_ends_after_the_idle_timeout(wsgi: Any, store: Storage) -> None:
    app = login(TestApp(wsgi), "ann")
    _age(store, app, seen=59 * 60_000)
    assert signed_in(app)  # 59 idle minutes: still on, and 'seen' moves forward
    _age(store, app, seen=61 * 60_000)
    assert not signed_in(app) and not session_keys(store)


def test_a_session_ends_after_the_absolute_timeout_however_busy(wsgi: Any, store: Storage) -> None:
    app = login(TestApp(wsgi), "ann")
    _age(store, app, created=11 * 3600_000, seen=0)
    assert signed_in(app)
    _age(store, app, created=12 * 3600_000 + 1000, seen=0)
    assert not signed_in(app)


def test_seen_is_written_at_most_every_ten_seconds(wsgi: Any, store: Storage) -> None:
    app = login(TestApp(wsgi), "ann")
    key = store.keys.session(session_handle(SECRET, cookie(app)))
    _age(store, app, seen=5_000)
    before = store.client.hget(key, "seen")
    app.get("/workers")
    assert store.client.hget(key, "seen") == before  # a polling page costs a read
    _age(store, app, seen=11_000)
    app.get("/workers")
    assert int(store.client.hget(key, "seen")) > int(before)


def _console(settings: dict[str, Any], **changes: str) -> Any:
    return main({}, **{**settings, **changes})


@pytest.mark.slow
def test_changing_or_removing_a_user_in_the_settings_ends_their_sessions(
    settings: dict[str, Any], store: Storage
) -> None:
    ann, vic = (login(TestApp(_console(settings)), n) for n in ("ann", "vic"))
    users = settings["ztq.console.users"].splitlines()
    demoted = [line.replace(" operator ", " viewer ") for line in users]
    again = _console(settings, **{"ztq.console.users": "\n".join(demoted)})
    assert not signed_in(copy_of(again, ann))  # a role change: sign in again
    assert signed_in(copy_of(again, vic))  # vic's entry did not change
    new_hash = hash_password("another one", n=1024)
    rehashed = [users[0], f"vic viewer {new_hash}"]
    assert not signed_in(
        copy_of(_console(settings, **{"ztq.console.users": "\n".join(rehashed)}), vic)
    )
    assert not session_keys(store)
    entries = streams.stream_page(store, "audit", limit=10).rows
    ended = [e for e in entries if e["action"] == "session ended"]
    assert [e["user"] for e in ended] == ["vic", "ann"]
    assert "changed (role or password)" in ended[0]["detail"]
    login(TestApp(again), "ann")  # the demoted ann signs in again, as a viewer
    assert "session ended" in audit_actions(store)


def test_removing_a_user_ends_their_sessions_on_the_sessions_page_too(
    settings: dict[str, Any], store: Storage
) -> None:
    """The operator who looks does not see sessions of removed users: they are ended then."""
    vic = login(TestApp(_console(settings)), "vic")
    assert vic
    only_ann = settings["ztq.console.users"].splitlines()[0]
    ann = login(TestApp(_console(settings, **{"ztq.console.users": only_ann})), "ann")
    page = ann.get("/sessions")
    assert "<td>vic" not in page.text and "<td>ann" in page.text
    assert len(session_keys(store)) == 1
    [entry] = [e for e in streams.stream_page(store, "audit", limit=10).rows
               if e["action"] == "session ended"]  # fmt: skip
    assert entry["user"] == "vic" and "removed" in entry["detail"]


def test_changing_the_secret_ends_every_session(settings: dict[str, Any]) -> None:
    ann = login(TestApp(_console(settings)), "ann")
    other = _console(settings, **{"ztq.console.secret": "another-secret-0123456789-abcdef"})
    assert not signed_in(copy_of(other, ann))


def test_operators_see_every_session_and_end_one(wsgi: Any, store: Storage) -> None:
    ann = login(TestApp(wsgi, extra_environ={"HTTP_USER_AGENT": "AnnBrowser/1"}), "ann")
    env = {"HTTP_USER_AGENT": "VicBrowser/2", "REMOTE_ADDR": "203.0.113.9"}
    vic = login(TestApp(wsgi, extra_environ=env), "vic")
    page = ann.get("/sessions")
    assert "AnnBrowser/1" in page.text and "VicBrowser/2" in page.text
    assert page.text.count('name="handle"') == 1  # no button to end the current session
    vic_handle = session_handle(SECRET, cookie(vic))
    r = post(ann, "/sessions/end", {"handle": vic_handle, "next": "/sessions"})
    assert "Ended 1 session." in r.follow().text
    assert not signed_in(vic) and signed_in(ann)
    [entry] = [e for e in streams.stream_page(store, "audit", limit=10).rows
               if e["action"] == "session ended"]  # fmt: skip
    assert entry["user"] == "ann" and entry["detail"] == "vic from 203.0.113.9 (password)"


@pytest.mark.slow
def test_viewers_see_and_end_only_their_own_sessions(wsgi: Any) -> None:
    ann = login(TestApp(wsgi), "ann")
    vic_phone = login(TestApp(wsgi, extra_environ={"HTTP_USER_AGENT": "Phone"}), "vic")
    vic = login(TestApp(wsgi), "vic")
    page = vic.get("/sessions")
    assert "Phone" in page.text and "<td>ann" not in page.text and "<td>vic" in page.text
    assert "API tokens" not in page.text
    r = post(vic, "/sessions/end", {"handle": session_handle(SECRET, cookie(ann))})
    assert "No session was ended." in r.follow().text and signed_in(ann)
    post(vic, "/sessions/end", {"others": "1"})
    assert not signed_in(vic_phone) and signed_in(vic) and signed_in(ann)
    r = post(vic, "/tokens/revoke", {"id": "0123456789ab"}, expect_errors=True)
    assert r.status_int == 403


def test_ending_a_session_needs_the_csrf_token(wsgi: Any) -> None:
    ann, vic = login(TestApp(wsgi), "ann"), login(TestApp(wsgi), "vic")
    handle = session_handle(SECRET, cookie(vic))
    r = ann.post("/sessions/end", {"handle": handle}, expect_errors=True)
    assert r.status_int == 400 and signed_in(vic)


@pytest.mark.slow
def test_a_session_cookie_with_redis_down_gives_503_not_500(
    settings: dict[str, Any], wsgi: Any
) -> None:
    ann = login(TestApp(wsgi), "ann")
    down = _console(settings, **{"ztq.redis_url": "redis://127.0.0.1:1/0"})
    r = copy_of(down, ann).get("/workers", expect_errors=True)
    assert r.status_int == 503 and "Redis is unreachable" in r.text


def test_flash_messages_live_in_the_session(wsgi: Any, store: Storage) -> None:
    t.add.delay(1, 1)
    ann = login(TestApp(wsgi), "ann")
    r = post(ann, "/queues/default/state", {"action": "pause", "next": "/queues"})
    key = store.keys.session(session_handle(SECRET, cookie(ann)))
    assert "Paused default" in store.client.hget(key, "data")
    assert "Paused default" in r.follow().text
    assert "Paused default" not in ann.get("/queues").text  # shown once
    assert PASSWORD not in store.client.hget(key, "data")
