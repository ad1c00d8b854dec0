"""One console watching several Redis systems (docs/systems.md), on real redis-servers.

Two servers: the suite's own (the default system, ``eu``) and its Redis 6.2 (``us``, the
``redis_62`` fixture). Each holds its own queue, errors and worker; every page shows the
system its URL names (``/s/us/...``), an action there changes that system only, an unknown
system is a 404, a system whose Redis is down answers 503 on its own pages while the
others' work.
"""

from __future__ import annotations

import configparser
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from webtest import TestApp

import ztq.core as ztq
from tests import sample_tasks as t
from tests.console import scenario
from tests.console.conftest import login, post
from tests.test_doc_examples import code_blocks
from ztq.console import main
from ztq.console.config import load
from ztq.core.auth.sessions import SessionPolicy, list_sessions
from ztq.core.engine.storage import Storage
from ztq.core.errors import ConfigError
from ztq.worker.embedded import RedisProcess


@dataclass
class Two:
    settings: dict[str, Any]
    eu: Storage
    us: Storage
    eu_errors: list[str]
    us_errors: list[str]


def fill(url: str, queue: str, errors: int, worker: str) -> tuple[Storage, list[str]]:
    """``errors`` failed tasks in ``queue`` and a live worker, written through ztq."""
    storage = ztq.connect(url)
    handles = [t.boom.enqueue((f"{queue} {i} failed",), queue=queue) for i in range(errors)]
    scenario.work(storage, queue, fail=lambda p: p["args"][0])
    t.add.enqueue((1, 2), queue=queue)  # one waiting
    scenario.heartbeat(storage, worker, threads={queue: 2})
    return storage, [h.id for h in handles]


@pytest.fixture
def two(settings: dict[str, Any], redis_url: str, redis_62: RedisProcess) -> Iterator[Two]:
    redis.Redis(port=redis_62.port).flushall()
    us, us_errors = fill(redis_62.url, "beta", 3, "us-worker")
    eu, eu_errors = fill(redis_url, "alpha", 2, "eu-worker")  # the default connection again
    systems = f"eu {redis_url}\nus {redis_62.url}"
    yield Two({**settings, "ztq.systems": systems}, eu, us, eu_errors, us_errors)


@pytest.fixture
def op(two: Two) -> TestApp:
    return login(TestApp(main({}, **two.settings)), "ann")


def audit_entries(storage: Storage) -> list[dict[str, str]]:
    return [fields for _, fields in storage.client.xrange(storage.keys.audit)]


@pytest.mark.slow
def test_each_page_shows_the_system_its_url_names(two: Two, op: TestApp) -> None:
    eu = op.get("/errors")
    us = op.get("/s/us/errors")
    assert all(i[:12] in eu.text for i in two.eu_errors)
    assert not any(i[:12] in eu.text for i in two.us_errors)
    assert all(i[:12] in us.text for i in two.us_errors)
    assert not any(i[:12] in us.text for i in two.eu_errors)
    assert "us-worker" in op.get("/s/us/workers").text
    assert "us-worker" not in op.get("/workers").text
    assert "beta" in op.get("/s/us/queues").text and "alpha" not in op.get("/s/us/queues").text
    # the default system keeps its URLs, and /s/<its name>/ is the same system
    assert "alpha" in op.get("/s/eu/queues").text
    # every link, form and `next` of a page of us stays in us
    page = op.get("/s/us/queues/beta")
    nav = [a["href"] for a in page.html.select("nav.main-nav a")]
    assert nav and all(h.startswith("/s/us/") for h in nav), nav
    forms = [f.get("action") or "" for f in page.html.select("main form[method=post]")]
    assert forms and all(a.startswith("/s/us/") for a in forms), forms
    nexts = [i["value"] for i in page.html.select("input[name=next]")]
    assert nexts and all(n.startswith("/s/us/") for n in nexts), nexts
    assert "us · " in page.html.select_one("footer").text


@pytest.mark.slow
def test_the_switch_in_the_nav_names_every_system_and_keeps_the_page(two: Two, op: TestApp) -> None:
    page = op.get("/s/us/errors")
    switch = page.html.select_one("details#systems")
    assert switch.select_one("summary strong").text == "us"
    links = {a.text: a["href"] for a in switch.select("nav a")}
    assert links["eu"] == "/errors" and links["us"] == "/s/us/errors"
    assert switch.select_one("a[aria-current]").text == "us"
    # a page of one task: its id means nothing in the other system, the switch goes home
    task = op.get(f"/s/us/tasks/{two.us_errors[0]}?queue=beta")
    links = {a.text: a["href"] for a in task.html.select("details#systems nav a")}
    assert links["eu"] == "/" and links["us"] == "/s/us/"
    assert "<h1>Overview</h1>" in op.get("/s/us/").text
    # the switch works without a script: it is links
    assert "beta" in op.get(links["us"]).text


@pytest.mark.slow
def test_an_action_in_one_system_changes_it_and_not_the_other(two: Two, op: TestApp) -> None:
    redo = two.us_errors[0]
    r = post(op, "/s/us/tasks", {"action": "redo", "task": f"beta:{redo}", "next": "/s/us/errors"})
    assert r.status_int == 303 and r.location.endswith("/s/us/errors")
    assert two.us.client.zcard(two.us.keys.errors("beta")) == 2
    assert two.eu.client.zcard(two.eu.keys.errors("alpha")) == 2
    # a task of eu named on a page of us: us has no such queue, eu is left alone
    r = post(op, "/s/us/tasks", {"action": "delete", "task": f"alpha:{two.eu_errors[0]}"},
             expect_errors=True)  # fmt: skip
    assert r.status_int == 404
    assert two.eu.client.zcard(two.eu.keys.errors("alpha")) == 2
    post(op, "/s/us/queues/beta/state", {"action": "pause"})
    assert two.us.queues.is_paused("beta") and not two.eu.queues.is_paused("alpha")
    # the audit log of us says which system; eu's has no action of it
    [entry] = [e for e in audit_entries(two.us) if e["action"] == "redo"]
    assert entry["system"] == "us" and entry["user"] == "ann" and redo in entry["ids"]
    assert not [e for e in audit_entries(two.eu) if e["action"] in ("redo", "pause queue")]
    audit = op.get("/s/us/audit")
    assert "redo" in audit.text


def test_an_unknown_system_is_not_found_not_the_default(two: Two, op: TestApp) -> None:
    r = op.get("/s/nope/errors", status=404)
    assert "No system named nope." in r.text
    op.get("/s/nope", status=404)
    op.get("/s/../errors", status=404)
    r = post(op, "/s/nope/tasks", {"action": "delete", "task": f"alpha:{two.eu_errors[0]}"},
             expect_errors=True)  # fmt: skip
    assert r.status_int == 404
    r = post(op, "/s/nope/queues/alpha/state", {"action": "pause"}, expect_errors=True)
    assert r.status_int == 404
    assert two.eu.client.zcard(two.eu.keys.errors("alpha")) == 2
    assert not two.eu.queues.is_paused("alpha")


def test_roles_hold_in_every_system(two: Two) -> None:
    viewer = login(TestApp(main({}, **two.settings)), "vic")
    r = post(viewer, "/s/us/tasks", {"action": "redo", "task": f"beta:{two.us_errors[0]}"},
             expect_errors=True)  # fmt: skip
    assert r.status_int == 403
    assert two.us.client.zcard(two.us.keys.errors("beta")) == 3
    anon = TestApp(main({}, **two.settings))
    r = anon.get("/s/us/errors")
    assert r.status_int == 303 and "/s/us/login?next=%2Fs%2Fus%2Ferrors" in r.location


def test_sessions_live_in_the_default_system(two: Two) -> None:
    app = TestApp(main({}, **two.settings))
    form = app.get("/s/us/login").forms["login"]
    form["username"], form["password"] = "ann", "correct horse battery"
    r = form.submit()
    assert r.status_int == 303 and r.location.endswith("/s/us/")
    assert "us-worker" in app.get("/s/us/workers").text
    assert "eu-worker" in app.get("/workers").text  # one sign-in for every system
    assert [s.user for s in list_sessions(two.eu, SessionPolicy())] == ["ann"]
    assert list_sessions(two.us, SessionPolicy()) == []
    assert two.us.client.keys("*session*") == []


def test_the_overview_lists_every_system_with_its_health(two: Two, op: TestApp) -> None:
    page = op.get("/systems")
    rows = {r.select_one("td strong").text: r for r in page.html.select("table.systems tbody tr")}
    assert list(rows) == ["eu", "us"]

    def cells(name: str) -> list[str]:
        return [td.text.strip() for td in rows[name].select("td")]

    # system, redis, status, live workers, lost, queues, ready, delayed, running, errors
    assert cells("eu")[2:] == ["reachable", "1", "0", "1", "1", "0", "0", "2"]
    assert cells("us")[2:] == ["reachable", "1", "0", "1", "1", "0", "0", "3"]
    assert rows["us"].select_one("a")["href"] == "/s/us/workers"
    assert op.get("/s/us/systems").html.select_one("tr.current strong").text == "us"


@pytest.mark.slow
def test_a_system_that_is_down_fails_its_own_pages_only(
    two: Two, op: TestApp, settings: dict[str, Any]
) -> None:
    down = RedisProcess().start()
    try:
        systems = two.settings["ztq.systems"] + f"\nasia {down.url}"
        app = login(TestApp(main({}, **{**two.settings, "ztq.systems": systems})), "ann")
        assert app.get("/s/asia/queues").status_int == 200  # up: a page of its own
        down.stop()
        r = app.get("/s/asia/queues", status=503)
        assert "Redis is unreachable" in r.text
        app.get("/s/asia/api/queues", status=503)
        app.get("/s/asia/healthz", status=503)
        assert "beta" in app.get("/s/us/queues").text
        assert "alpha" in app.get("/queues").text
        app.get("/healthz", status=200)
        started = time.monotonic()
        page = app.get("/systems")
        took = time.monotonic() - started
        rows = page.html.select("table.systems tbody tr")
        assert [r.select_one("strong").text for r in rows] == ["eu", "us", "asia"]
        assert "unreachable" in rows[2].text and "down" in rows[2]["class"]
        assert "cannot reach Redis" in rows[2].text
        assert "unreachable" not in rows[0].text + rows[1].text
        assert took < 10, took
    finally:
        down.cleanup()


def test_one_system_shows_no_switch(settings: dict[str, Any], redis_url: str) -> None:
    app = login(TestApp(main({}, **settings)), "ann")
    page = app.get("/workers")
    assert page.html.select_one("details#systems") is None
    rows = app.get("/systems").html.select("table.systems tbody tr")
    assert [r.select_one("strong").text for r in rows] == ["default"]
    app.get("/s/default/workers", status=200)
    app.get("/s/other/workers", status=404)


@pytest.mark.parametrize(
    "systems, message",
    [
        ("eu redis://h:1/0\neu redis://h:2/0", "entry 2 ('eu redis://h:2/0'): the name 'eu' is "
         "given twice"),
        ("eu h:6379", "entry 1 ('eu h:6379'): must be a URL such as redis://host:6379/0"),
        ("e/u redis://h:1/0", "entry 1 ('e/u redis://h:1/0'): must be 1-32 of A-Z a-z 0-9 _ -"),
        ("eu redis://h:1/0 bad!prefix", "entry 1 ('eu redis://h:1/0 bad!prefix'): must be 1-32"),
        ("eu", "entry 1 ('eu'): must be 'NAME URL [PREFIX]', found 1 fields"),
        ("eu redis://h:1/0 ztq; us redis://h:1/0", "systems 'eu' and 'us' are the same Redis"),
        ("default redis://h:9/0", "systems names 'default' a Redis or prefix other than"),
    ],
)  # fmt: skip
def test_bad_systems_stop_the_console(settings: dict[str, Any], systems: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        main({}, **{**settings, "ztq.systems": systems})
    assert message in str(caught.value)
    assert str(caught.value).startswith(("ini: ztq.systems ", "ini: systems "))


def test_the_environment_gives_the_systems_too(
    settings: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZTQ_SYSTEMS", "us redis://10.0.0.2:6379/0 shop;asia redis://10.0.0.3/0")
    cfg = load({**settings, "ztq.systems": "ignored redis://h:1/0"}, path=None)
    assert [(s.name, s.redis_url, s.prefix) for s in cfg.systems] == [
        ("default", settings["ztq.redis_url"], "ztq"),
        ("us", "redis://10.0.0.2:6379/0", "shop"),
        ("asia", "redis://10.0.0.3/0", "ztq"),
    ]
    monkeypatch.setenv("ZTQ_SYSTEMS", "us redis://10.0.0.2:6379/0 shop;us redis://h/0")
    with pytest.raises(ConfigError, match="^environment variable ZTQ_SYSTEMS: systems entry 2"):
        load(settings, path=None)


def test_an_api_token_of_the_default_system_reads_every_system(two: Two) -> None:
    from ztq.core.auth.tokens import create_token

    token, _ = create_token(two.eu, "prometheus", "viewer", 1)
    app = TestApp(main({}, **two.settings))
    auth = {"Authorization": f"Bearer {token}"}
    names = [q["name"] for q in app.get("/s/us/api/queues", headers=auth).json["items"]]
    assert names == ["beta"]
    us_token, _ = create_token(two.us, "elsewhere", "viewer", 1)  # tokens live in the default
    app.get("/s/us/api/queues", headers={"Authorization": f"Bearer {us_token}"}, status=401)


def test_the_ini_of_docs_systems_md_loads_as_described(
    settings: dict[str, Any], tmp_path: Path
) -> None:
    [ini] = [b for b in code_blocks("systems.md") if "ztq.systems" in b]
    path = tmp_path / "app.ini"
    path.write_text(ini)
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(path)
    secrets = {k: v for k, v in settings.items() if k.startswith("ztq.console.")}
    cfg = load({**dict(parser.items("app:main")), **secrets}, path=path)
    assert [(s.name, s.redis_url, s.prefix, s.default) for s in cfg.systems] == [
        ("eu", "redis://eu-redis:6379/0", "ztq", True),
        ("us", "redis://us-redis:6379/0", "ztq", False),
        ("stage", "redis://stage-redis:6379/3", "staging", False),
    ]
