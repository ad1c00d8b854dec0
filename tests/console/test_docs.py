"""docs/console.md's security examples, run as written: the token commands and the
Prometheus configuration against a live console, the SSO ini, the throttling table."""

from __future__ import annotations

import configparser
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from webtest import TestApp

from tests.test_doc_examples import code_blocks
from ztq.console import main
from ztq.console.config import load
from ztq.core.auth.logins import LoginPolicy

DOC = Path(__file__).resolve().parents[2] / "docs" / "console.md"


@pytest.fixture
def live(settings: dict[str, Any]) -> Iterator[str]:
    from webtest.http import StopableWSGIServer

    server = StopableWSGIServer.create(main({}, **settings), host="127.0.0.1")
    try:
        yield server.application_url.rstrip("/")
    finally:
        server.shutdown()


@pytest.mark.slow
def test_the_token_commands_run_as_written(live: str, redis_url: str, tmp_path: Path) -> None:
    [shell] = [b for b in code_blocks("console.md") if "ztq token create" in b]
    token_file = tmp_path / "ztq.token"
    script = shell.replace("/etc/prometheus/ztq.token", str(token_file))
    script = script.replace("http://127.0.0.1:6543", live)
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "ZTQ_REDIS_URL": redis_url}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith('{"items"')  # the JSON of /api/queues
    assert token_file.read_text().startswith("ztq_")


@pytest.mark.slow
def test_the_prometheus_configuration_sends_what_the_console_takes(
    wsgi: Any, redis_url: str, tmp_path: Path
) -> None:
    [yml] = [b for b in code_blocks("console.md") if "scrape_configs" in b]
    kind, path = re.search(r"authorization: \{type: (\w+), credentials_file: (\S+)\}", yml).groups()  # type: ignore[union-attr]
    assert path == "/etc/prometheus/ztq.token"  # the file the token command wrote
    from ztq.core.auth.tokens import create_token
    from ztq.core.engine.connection import make_client
    from ztq.core.engine.storage import Storage

    token, _ = create_token(Storage(make_client(redis_url), url=redis_url), "prom", "viewer", 1)
    # Prometheus sends "Authorization: <type> <file contents>"
    r = TestApp(wsgi).get("/metrics", headers={"Authorization": f"{kind} {token}"})
    assert r.status_int == 200 and "ztq_console_api_tokens 1" in r.text


@pytest.mark.slow
def test_the_sso_example_configures_what_the_text_says(settings: dict[str, Any]) -> None:
    [ini] = [b for b in code_blocks("console.md") if "sso_header" in b]
    parser = configparser.ConfigParser()
    parser.read_string(ini)
    app = dict(parser["app:main"])
    cfg = load({**app, "ztq.redis_url": settings["ztq.redis_url"],
                "ztq.console.secret": settings["ztq.console.secret"]})  # fmt: skip
    assert cfg.sso is not None and cfg.users == {}
    assert cfg.sso.role_of(["engineering", "ops"]) == "operator"
    assert cfg.sso.role_of(["engineering"]) == "viewer" and cfg.sso.role_of(["sales"]) is None
    wsgi = main({}, **{**app, "ztq.redis_url": settings["ztq.redis_url"],
                       "ztq.console.secret": settings["ztq.console.secret"]})  # fmt: skip
    proxy = {"REMOTE_ADDR": "10.0.1.7", "HTTP_X_FORWARDED_USER": "kim",
             "HTTP_X_FORWARDED_GROUPS": "engineering"}  # fmt: skip
    assert "kim" in TestApp(wsgi, extra_environ=proxy).get("/workers").text


def test_the_throttling_table_is_what_the_policy_allows() -> None:
    text = DOC.read_text("utf-8")
    table = text.split("<!-- throttle-table", 1)[1].split("\n\n", 1)[0]
    rows = re.findall(
        r"^\| (\d+) (minutes?|hours?|days?) \| (\d+) \| (\d+) \| (\d+) \|$", table, re.M
    )
    unit = {"minute": 60, "minutes": 60, "hour": 3600, "hours": 3600, "day": 86400}
    assert len(rows) == 4
    policy = LoginPolicy()
    for amount, name, *shown in rows:
        within = int(amount) * unit[name]
        allowed = [policy.guesses(within, free)
                   for free in (policy.free, policy.free_addr, policy.free_user)]  # fmt: skip
        assert allowed == [int(n) for n in shown], (amount, name)
    assert f"then {3600 / policy.longest:g} an hour" in text
