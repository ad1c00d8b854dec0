"""The console in headless Chromium (Debian's, driven by Playwright): an operator signs in,
opens every page, redoes a failed task that a real worker process then runs to success.
Screenshots land in $ZTQ_SCREENSHOTS (``make screenshots`` sets docs/img/, the pictures of
docs/console.md), else in a temporary folder, so a test run leaves the work tree alone."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from tests.console import scenario
from tests.console.conftest import CHROMIUM, CHROMIUM_ARGS, PASSWORD, switch_language  # noqa: F401
from ztq.console import main
from ztq.core.engine.storage import Storage
from ztq.core.monitor import streams

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
SHOTS = Path(os.environ.get("ZTQ_SCREENSHOTS") or tempfile.mkdtemp(prefix="ztq-shots-"))
ARGS = CHROMIUM_ARGS  # where other test modules looked for them
PAGES = [  # (screenshot name or '', path, text the page must show)
    ("workers", "/workers", "app-1.4242"),
    ("", "/workers/app-1.4242", "default-0"),
    ("queues", "/queues", "reports"),
    ("queue", "/queues/default", "Pending tasks"),
    ("errors", "/errors", "disk 2 is full"),
    ("error-groups", "/errors/groups", "SMTPRecipientsRefused"),
    ("running", "/running", "app-1.4242"),
    ("scheduled", "/scheduled", "nightly-report"),
    ("history", "/history", "tests.sample_tasks.add"),
    ("worker-log", "/log", "no heartbeat for 4 minutes"),
    ("", "/audit", "Audit"),
    ("", "/alerts", "Alerts"),
    ("sessions", "/sessions", "this session"),
    ("search", "/search?q=disk", "disk 1 is full"),
]


def wait_for(predicate: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"condition not met within {timeout}s")


@pytest.fixture
def server(settings: dict) -> Iterator[str]:
    from webtest.http import StopableWSGIServer

    srv = StopableWSGIServer.create(main({}, **settings))
    try:
        yield srv.application_url.rstrip("/")
    finally:
        srv.shutdown()


@pytest.fixture
def worker(redis_url: str, tmp_path: Path) -> Iterator[subprocess.Popen]:
    """A real worker process serving the queue ``browser`` (killed by PID at the end)."""
    log = (tmp_path / "worker.log").open("w")
    cmd = [
        sys.executable,
        "-m",
        "ztq.worker",
        "--redis",
        redis_url,
        "--queue",
        "browser:1",
        "--import",
        "tests.sample_tasks",
        "--name",
        "browser-worker",
        "--heartbeat",
        "0.5",
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


@pytest.fixture
def browser(chromium: Any) -> Iterator[Any]:
    """Headless Chromium for one test: the session's (tests/console/conftest.py, one per
    xdist worker: a launch costs seconds), with the contexts and pages the test opened
    closed after it, so the next test starts with none."""
    yield chromium
    for context in chromium.contexts:
        # a route handler still running (a page's refresh) must not raise into the next
        # test, which shares the Playwright connection: stop them quietly first
        for page in context.pages:
            page.unroute_all(behavior="ignoreErrors")
        context.unroute_all(behavior="ignoreErrors")
        context.close()


def test_operator_opens_every_page_and_redoes_a_failed_task(
    store: Storage, server: str, worker: subprocess.Popen, browser: Any, tmp_path: Path
) -> None:
    scenario.populate(store)
    scenario.throughput(store)
    flaky = t.flaky.enqueue((str(tmp_path / "flaky-count"), 1), queue="browser")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1280, "height": 760})
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)

    page.goto(server + "/workers")
    assert page.url.startswith(server + "/login")
    page.screenshot(path=str(SHOTS / "login.png"))
    page.fill("input[name=username]", "ann")
    page.fill("input[name=password]", PASSWORD)
    page.click("#login button")
    page.wait_for_url(server + "/workers")

    for name, path, text in PAGES:
        response = page.goto(server + path)
        assert response is not None and response.status == 200, path
        assert text in page.inner_text("main"), path
        if name:
            page.screenshot(path=str(SHOTS / f"{name}.png"))

    # the real worker runs the flaky task once: it fails and shows up among the errors
    wait_for(lambda: ztq.ping(flaky) == "error")
    page.goto(server + "/queues/browser")
    page.click("button[value=pause]")  # hold the queue so the redone task waits a moment
    assert "Paused browser" in page.inner_text(".flashes")
    page.goto(server + "/errors?queue=browser")
    page.click(f"a[href*='/tasks/{flaky.id}']")
    assert "flaky failure 1" in page.inner_text("main")
    page.screenshot(path=str(SHOTS / "task-error.png"), full_page=True)
    page.click("button[value=redo]")
    assert "Redo: 1 of 1 task." in page.inner_text(".flashes")
    assert page.inner_text("h1 .badge") == "queued"
    store.queues.resume("browser")  # another operator resumes the queue
    # the page refreshes itself while the task is pending; the worker runs it to success
    # (an idle worker notices a resumed queue within its idle wait)
    page.wait_for_selector("h1 .state-done", timeout=60_000)
    assert ztq.ping(flaky) == "done"
    page.screenshot(path=str(SHOTS / "task-done.png"))
    page.goto(server + "/history?queue=browser")
    assert "done" in page.inner_text("main") and "failed" in page.inner_text("main")
    page.goto(server + "/audit")
    assert flaky.id in page.inner_text("main")

    # bulk: 250 errors, batches of 100 (see conftest): the progress page continues by itself
    for i in range(250):
        t.boom.enqueue((f"bulk {i}",), queue="bulk")
    scenario.work(store, "bulk", fail=lambda p: p["args"][0])
    page.goto(server + "/queues/bulk")
    page.click("button[value=delete][name=action] >> text=Delete all errors")
    assert "Delete 250 failed tasks?" in page.inner_text("main")  # the scope, before it runs
    page.click("#confirm button")
    page.wait_for_selector(".flash.ok", timeout=20_000)
    assert "Deleted 250 tasks." in page.inner_text(".flashes")
    assert store.client.zcard(store.keys.errors("bulk")) == 0
    steps = [e for e in streams.stream_page(store, "audit", limit=20).rows if e["queue"] == "bulk"]
    assert len(steps) == 3

    # Chinese, chosen with the switch in the header
    switch_language(page, "zh")
    assert "工作状态" in page.inner_text("nav.main-nav")
    switch_language(page, "en")
    assert not problems, problems


def test_the_last_hour_table_fits_its_card_at_1280(
    store: Storage, server: str, browser: Any
) -> None:
    """Issue 24: on the queue page at 1280 px the p50/p95/p99 table of the last hour was cut
    off by its card; it fits (or scrolls) inside it, inside the viewport, in both languages."""
    from tests.core.test_timings import _run

    for i in range(20):
        _run(store, 1_234_567, 2000 if i < 18 else 5_400_000, fail=i == 19)
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(server + "/login")
    page.fill("input[name=username]", "ann")
    page.fill("input[name=password]", PASSWORD)
    page.click("#login button")
    page.wait_for_url(server + "/")  # the overview
    for lang in ("en", "zh"):
        page.goto(server + "/queues/default")
        if lang == "zh":
            switch_language(page, "zh")
        boxes = page.evaluate(
            """() => {
              const table = document.querySelector('section.times table');
              const card = table.closest('.card');
              const box = e => e.getBoundingClientRect().toJSON();
              const scroller = table.parentElement;
              return {table: box(table), card: box(card), scroller: box(scroller),
                      scrolls: scroller !== card && scroller.scrollWidth > scroller.clientWidth,
                      viewport: document.documentElement.clientWidth};
            }"""
        )
        table, card, scroller = boxes["table"], boxes["card"], boxes["scroller"]
        assert card["right"] <= boxes["viewport"], (lang, boxes)
        if not boxes["scrolls"]:  # the table fits its card whole
            assert table["right"] <= card["right"] - 1, (lang, boxes)
        else:  # or scrolls inside a box that itself fits
            assert scroller["right"] <= card["right"], (lang, boxes)
    page.close()
