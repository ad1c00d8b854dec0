"""Regression: the worker, the console, the CLI and connect() resolve the same Redis and prefix.

The defect: ``ZTQ_PREFIX`` reached ``connect()`` and the console but not the worker, so a
worker and a console started with the same environment looked at different keys.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from pyramid.paster import get_appsettings

import ztq.core as ztq
from tests import sample_tasks as t
from tests.worker.conftest import stop_process, wait_for
from ztq.console import settings as console_settings
from ztq.console.config import load
from ztq.core import settings
from ztq.core.alerts import settings as alert_settings
from ztq.core.auth.passwords import hash_password
from ztq.worker import config as worker_config
from ztq.worker.cli.commands import main
from ztq.worker.config import load_config

ROOT = Path(__file__).resolve().parents[2]
APP_INI = ROOT / "app.ini"


@pytest.fixture
def custom_env(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """ZTQ_PREFIX=custom and ZTQ_REDIS_URL=<the private redis>; no other ZTQ_ variable."""
    tables = (settings.SETTINGS, alert_settings.SETTINGS, worker_config.SETTINGS,
              console_settings.SETTINGS)  # fmt: skip
    for s in settings.by_name(*tables).values():
        monkeypatch.delenv(s.env, raising=False)
    monkeypatch.setenv("ZTQ_PREFIX", "custom")
    monkeypatch.setenv("ZTQ_REDIS_URL", redis_url)
    ztq.disconnect_all()  # the redis_url fixture connected with the default prefix
    return redis_url


def test_every_entry_point_resolves_the_same_url_and_prefix(
    custom_env: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = custom_env
    seen: dict[str, tuple[str, str]] = {}
    storage = ztq.connect()
    seen["connect()"] = (storage.url, storage.keys.prefix)
    cfg = load_config(None)
    seen["load_config(None)"] = (cfg.redis_url, cfg.prefix)
    cfg = load_config(APP_INI)  # app.ini says ztq.prefix = ztq: the environment wins
    seen["load_config(app.ini)"] = (cfg.redis_url, cfg.prefix)
    worker_ini = tmp_path / "worker.ini"
    worker_ini.write_text("[server]\nprefix = ztq\n\n[queues]\ndefault = 1\n")
    cfg = load_config(worker_ini)
    seen["load_config(worker.ini)"] = (cfg.redis_url, cfg.prefix)
    monkeypatch.setenv("ZTQ_CONSOLE_SECRET", "test-secret-0123456789-abcdefghij")
    monkeypatch.setenv("ZTQ_CONSOLE_USERS", f"ann operator {hash_password('pw', n=1024)}")
    console = load(get_appsettings(str(APP_INI)), path=APP_INI)
    seen["console load(app.ini)"] = (console.redis_url, console.prefix)
    for argv in (["info"], ["info", "-c", str(APP_INI)], ["info", "-c", str(worker_ini)]):
        ztq.disconnect_all()
        assert main(argv) == 0
        storage = ztq.get_storage()
        seen[" ".join(argv[:2])] = (storage.url, storage.keys.prefix)
    assert seen == dict.fromkeys(seen, (url, "custom")), seen


@pytest.fixture
def spawned(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        stop_process(proc)


@pytest.mark.slow
def test_a_worker_process_and_a_client_share_the_prefix_from_the_environment(
    custom_env: str, spawned: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    with open(log, "ab") as out:
        spawned.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "ztq.worker",
                    "--queue",
                    "default",
                    "--import",
                    "tests.sample_tasks",
                    "--name",
                    "prefix-e2e",
                    "--heartbeat",
                    "0.3",
                    "--lease",
                    "2",
                    "--grace",
                    "2",
                ],  # fmt: skip
                cwd=ROOT,
                env={**os.environ},  # ZTQ_PREFIX=custom, ZTQ_REDIS_URL=<private redis>
                stdout=out,
                stderr=out,
            )
        )
    ztq.connect()  # no arguments: the environment
    h = t.add.delay(2, 3)

    def done() -> bool:
        assert spawned[0].poll() is None, log.read_text()
        return ztq.ping(h) == "done"

    wait_for(done, timeout=20)
    assert h.result == 5
    client = redis.Redis.from_url(custom_env)
    try:
        assert client.keys("custom:*"), "nothing under the custom prefix"
        assert client.keys("ztq:*") == [], "the worker wrote under the default prefix"
    finally:
        client.close()
