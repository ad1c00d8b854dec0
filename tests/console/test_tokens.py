"""API tokens: created by the CLI (shown once, stored hashed), sent as Bearer on the read-only
API and /metrics, with a role and an expiry, revocable from the CLI and the console; Basic
credentials go through the sign-in throttle."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from webtest import TestApp

from tests.console.conftest import PASSWORD, post
from tests.console.test_security import basic
from ztq.core.auth.tokens import InvalidToken, check_token, create_token, list_tokens
from ztq.core.engine.storage import Storage
from ztq.core.monitor import streams


def ztq_cli(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).with_name("ztq")), *args, "--redis", redis_url],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.slow
def test_the_cli_creates_a_token_shown_once_and_stored_hashed(
    redis_url: str, anon: TestApp, store: Storage
) -> None:
    made = ztq_cli(redis_url, "token", "create", "prometheus", "--days", "30")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.startswith("ztq_") and "shown only now" in made.stderr
    token_id, secret = token[4:16], token[17:]
    raw = store.client.hgetall(store.keys.token(token_id))
    assert raw["digest"] == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in json.dumps(raw) and raw["role"] == "viewer"
    assert 29 * 86400_000 < store.client.pttl(store.keys.token(token_id)) <= 30 * 86400_000
    r = anon.get("/metrics", headers=bearer(token))
    assert r.status_int == 200 and "ztq_console_api_tokens 1" in r.text
    assert anon.get("/api/queues", headers=bearer(token)).status_int == 200
    listed = ztq_cli(redis_url, "token", "list", "--json")
    [info] = json.loads(listed.stdout)
    assert info["id"] == token_id and info["name"] == "prometheus" and info["used"] > 0
    assert token not in listed.stdout and secret not in ztq_cli(redis_url, "token", "list").stdout


def test_a_wrong_revoked_or_expired_token_gets_401(anon: TestApp, store: Storage) -> None:
    token, info = create_token(store, "grafana", "viewer", 1)
    assert anon.get("/api/workers", headers=bearer(token)).status_int == 200
    wrong = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    for bad in (wrong, "ztq_nothing", token + "x", ""):
        r = anon.get("/api/workers", headers=bearer(bad), expect_errors=True)
        assert r.status_int == 401, bad
    store.client.hset(store.keys.token(info.id), "expires", int(time.time() * 1000) - 1)
    assert anon.get("/api/workers", headers=bearer(token), expect_errors=True).status_int == 401
    assert check_token(store, token) is None


@pytest.mark.slow
def test_revoking_from_the_cli_and_from_the_console(
    redis_url: str, operator: TestApp, anon: TestApp, store: Storage
) -> None:
    first, info1 = create_token(store, "one", "viewer", 10)
    second, info2 = create_token(store, "two", "operator", 10)
    page = operator.get("/sessions")
    assert info1.id in page.text and info2.id in page.text and first not in page.text
    done = ztq_cli(redis_url, "token", "revoke", info1.id)
    assert done.returncode == 0 and "revoked" in done.stdout
    assert ztq_cli(redis_url, "token", "revoke", info1.id).returncode == 1
    assert anon.get("/metrics", headers=bearer(first), expect_errors=True).status_int == 401
    r = post(operator, "/tokens/revoke", {"id": info2.id, "next": "/sessions"})
    assert f"Revoked token {info2.id}." in r.follow().text
    assert anon.get("/metrics", headers=bearer(second), expect_errors=True).status_int == 401
    [entry] = [e for e in streams.stream_page(store, "audit", limit=10).rows
               if e["action"] == "token revoked"]  # fmt: skip
    assert entry["user"] == "ann" and entry["detail"] == info2.id
    assert list_tokens(store) == []


def test_a_token_cannot_change_anything(anon: TestApp, store: Storage) -> None:
    """Tokens read; state changes need a signed-in session and its CSRF token."""
    token, _ = create_token(store, "ops-script", "operator", 10)
    r = anon.post("/queues/default/state", {"action": "pause"}, headers=bearer(token),
                  expect_errors=True)  # fmt: skip
    assert r.status_int in (400, 401, 303) and not store.queues.is_paused("default")
    assert anon.get("/workers", headers=bearer(token)).status_int == 303  # pages: sign in


def test_bad_token_requests_are_refused_clearly(store: Storage) -> None:
    for role, days, message in (("admin", 10, "role 'admin'"), ("viewer", 0, "at most 366"),
                                ("viewer", 400, "at most 366")):  # fmt: skip
        with pytest.raises(InvalidToken, match=message):
            create_token(store, "x", role, days)
    with pytest.raises(InvalidToken, match="give the token a name"):
        create_token(store, "  ", "viewer", 1)


@pytest.mark.slow
def test_the_cli_says_what_is_wrong(redis_url: str) -> None:
    bad = ztq_cli(redis_url, "token", "create", "x", "--days", "1000")
    assert bad.returncode == 2 and "at most 366 days" in bad.stderr and not bad.stdout
    down = ztq_cli("redis://127.0.0.1:1/0", "token", "list")
    assert down.returncode == 2 and "cannot reach Redis" in down.stderr


def test_basic_credentials_are_throttled_like_the_sign_in_form(
    settings: dict[str, Any], anon: TestApp, store: Storage
) -> None:
    for _ in range(5):
        r = anon.get("/api/workers", headers=basic("ann", "guess"), expect_errors=True)
        assert r.status_int == 401
    r = anon.get("/api/workers", headers=basic("ann", "guess"), expect_errors=True)
    assert r.status_int == 401  # the 6th failure starts a 1 s lock ...
    r = anon.get("/api/workers", headers=basic("ann", PASSWORD), expect_errors=True)
    assert r.status_int == 429 and int(r.headers["Retry-After"]) >= 1  # ... right one waits
    actions = [e["action"] for e in streams.stream_page(store, "audit", limit=10).rows]
    assert "login locked" in actions


def test_a_lock_stops_basic_credentials_checked_a_moment_ago(anon: TestApp, store: Storage) -> None:
    """A scraper's Basic login is remembered for a minute (no scrypt per request), but a
    lock of the name or the address still comes first: the right password waits too."""
    assert anon.get("/api/workers", headers=basic("ann")).status_int == 200  # now remembered
    for _ in range(6):
        anon.get("/api/workers", headers=basic("ann", "guess"), expect_errors=True)
    r = anon.get("/api/workers", headers=basic("ann"), expect_errors=True)
    assert r.status_int == 429 and int(r.headers["Retry-After"]) >= 1
