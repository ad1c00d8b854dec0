"""Scrape tokens declared in the ini (``ztq.console.tokens``, stored as SHA-256 digests as
users' passwords are stored hashed): they keep Prometheus signed in when Redis restarts
empty, which Redis-kept tokens cannot; read-only like every token."""

from __future__ import annotations

from typing import Any

import pytest
from webtest import TestApp

from ztq.console import main
from ztq.core.auth.tokens import create_token, static_token
from ztq.core.engine.storage import Storage
from ztq.core.errors import ConfigError


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_declared_token_survives_an_empty_redis(settings: dict[str, Any], store: Storage) -> None:
    token, line = static_token("prometheus", "viewer")
    secret = token.split("_", 2)[2]  # ztq_<id>_<secret>; the secret may hold "_" itself
    assert token not in line and secret not in line  # only the digest is kept
    app = TestApp(main({}, **settings, **{"ztq.console.tokens": line}))
    assert app.get("/metrics", headers=bearer(token)).status_int == 200
    kept, _ = create_token(store, "grafana", "viewer", 1)  # a token kept in Redis
    assert app.get("/metrics", headers=bearer(kept)).status_int == 200
    store.client.flushall()  # Redis restarted without its data
    assert app.get("/metrics", headers=bearer(kept), status=401).status_int == 401
    r = app.get("/metrics", headers=bearer(token))
    assert r.status_int == 200 and "ztq_queue_ready" in r.text
    assert app.get("/api/queues", headers=bearer(token)).status_int == 200
    wrong = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    assert app.get("/metrics", headers=bearer(wrong), status=401).status_int == 401
    page = app.get("/queues", headers=bearer(token), status="*")  # a page: a session only
    assert page.status_int != 200


def test_declared_tokens_from_the_environment_and_their_errors(
    settings: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, line1 = static_token("prometheus", "viewer")
    second, line2 = static_token("grafana", "viewer")
    monkeypatch.setenv("ZTQ_CONSOLE_TOKENS", f"{line1}; {line2}")
    app = TestApp(main({}, **settings))
    for token in (first, second):
        assert app.get("/metrics", headers=bearer(token)).status_int == 200
    name, role, token_id, digest = line1.split()
    for bad, why in (
        (f"{name} admin {token_id} {digest}", "role 'admin' must be one of"),
        (f"{name} viewer {token_id} {digest[:-1]}", "not a SHA-256"),
        (f"{name} viewer xyz {digest}", "not a token id"),
        (f"{line1}\n{line1}", "listed twice"),
        (f"{name} viewer {digest}", "must be 'NAME ROLE ID SHA256'"),
    ):
        monkeypatch.setenv("ZTQ_CONSOLE_TOKENS", bad)
        with pytest.raises(ConfigError, match=why):
            main({}, **settings)


@pytest.mark.slow
def test_console_md_makes_a_token_as_shown(settings: dict[str, Any]) -> None:
    """The command of docs/console.md prints a token and its line; the ini block parses."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    from ztq.console.config import parse_tokens

    text = (Path(__file__).resolve().parents[2] / "docs" / "console.md").read_text("utf-8")
    [command] = [b for b in re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M)
                 if "static_token" in b]  # fmt: skip
    argv = command.strip().replace("python", sys.executable, 1)
    done = subprocess.run(["sh", "-c", argv], capture_output=True, text=True, timeout=60,
                          check=True)  # fmt: skip
    token, line = done.stdout.splitlines()
    app = TestApp(main({}, **settings, **{"ztq.console.tokens": line}))
    assert app.get("/metrics", headers=bearer(token)).status_int == 200
    [ini] = [b for b in re.findall(r"^```ini\n(.*?)^```", text, re.S | re.M)
             if "ztq.console.tokens" in b]  # fmt: skip
    [(token_id, declared)] = parse_tokens(ini.split("=", 1)[1]).items()
    assert (token_id, declared.name, declared.role) == ("3f9a0c5e7b21", "prometheus", "viewer")
