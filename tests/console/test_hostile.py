"""Hostile data in headless Chromium: every string a worker (or anyone sharing the Redis)
can write is filled with markup, script, bidi overrides, control characters and 100 kB
strings (``tests/console/hostile.py``); an operator opens every page of the console, found
by crawling its links, and nothing runs, nothing is injected, no page fails and the layout
holds."""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

import pytest

from tests.console import hostile
from tests.console.conftest import PASSWORD
from ztq.console import main
from ztq.console.routes import ROUTES
from ztq.core.engine.storage import Storage

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1280, "height": 800}
MAX_URLS = 700  # pages and JSON answers opened in all (the seeds and what the crawl finds)
PER_LIST = 3  # URLs the crawl adds per list page (its filters and pages)
PER_DETAIL = 20  # URLs the crawl adds per kind of detail page (/tasks/..., /workers/...)
SEARCHED = ("script", "attr-single", "attr-double", "attr-unquoted", "title-breakout",
            "textarea-breakout", "jinja", "bidi", "control", "long")  # fmt: skip
SKIP = ("/logout", "/lang", "/login", "/static/", "/bulk", "/cron/")  # POST-only or no page
# run in every page before its own scripts: records the CSP violations it reports
WATCH = """
window.__ztqCsp = [];
document.addEventListener('securitypolicyviolation', function (e) {
  window.__ztqCsp.push(e.violatedDirective + ' ' + e.blockedURI + ' ' + (e.sample || ''));
});
"""
INSPECT = """([marker, evil]) => {
  const width = window.innerWidth, height = window.innerHeight;
  const describe = el => el.tagName + (el.className ? '.' + el.className : '') +
    ' ' + el.outerHTML.slice(0, 120);
  // elements no template puts there: only a payload could have made them
  const foreign = 'main script, main iframe, main img, main style, main link, main meta, ' +
    'main details:not(.trace), main noscript, main object, main embed, ' +
    'main svg:not(.spark):not(.timechart), ' +
    'main input[autofocus], base, [id^="' + evil + '"]';
  const nav = document.querySelector('nav.main-nav');
  const navBox = nav ? nav.getBoundingClientRect() : null;
  const h1 = document.querySelector('main h1');
  const wide = Array.from(document.querySelectorAll('main .table-wrap, main pre, main .card, ' +
    'main h1, main .facts, main .filters, main .toolbar, main select'))
    .filter(el => el.scrollWidth > 3 * width || el.getBoundingClientRect().width > 2 * width)
    .map(el => describe(el) + ' scrollWidth=' + el.scrollWidth);
  return {
    marker: window[marker] === undefined ? null : String(window[marker]),
    csp: window.__ztqCsp || [],
    foreign: Array.from(document.querySelectorAll(foreign)).map(describe),
    scrollWidth: document.documentElement.scrollWidth,
    width: width,
    nav: !!navBox && navBox.width > 0 && navBox.height > 0 && navBox.top >= 0 &&
      navBox.bottom <= height && navBox.right <= width + 1,
    h1: h1 ? h1.textContent.trim().slice(0, 80) : null,
    h1Height: h1 ? h1.getBoundingClientRect().height : 0,
    wide: wide,
    links: Array.from(document.querySelectorAll('a[href]'), a => {
      try { return new URL(a.getAttribute('href'), location.href).href; } catch (e) { return ''; }
    }).filter(Boolean),
  };
}"""
# a done task's error is an earlier attempt's: muted, in its own card (issue 30)
SHOWN = """() => ['main h1 .mono', '.error-card .error-text, .earlier-card .earlier'].map(
  sel => { const el = document.querySelector(sel); return el ? el.innerText : null; })"""
METRIC = re.compile(
    r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_]\w*="(?:[^"\\\n]|\\.)*"'
    r'(,[a-zA-Z_]\w*="(?:[^"\\\n]|\\.)*")*\})? \S+$'
)


@dataclass
class Crawl:
    """The pages to open, what was opened, and every problem seen on the way."""

    origin: str
    queue: deque[str] = field(default_factory=deque)
    seen: set[str] = field(default_factory=set)
    per_path: dict[str, int] = field(default_factory=dict)
    opened: list[tuple[str, int]] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)  # (path, what)
    current: str = ""

    def add(self, url: str, *, seed: bool = False) -> None:
        parts = urlsplit(url)
        if url.startswith("/"):
            url, parts = self.origin + url, urlsplit(self.origin + url)
        if f"{parts.scheme}://{parts.netloc}" != self.origin or parts.path.startswith(SKIP):
            return
        url = url.split("#", 1)[0]
        if url in self.seen:
            return
        if not seed:
            head, _, rest = parts.path.strip("/").partition("/")
            kind, cap = (head + "/*", PER_DETAIL) if rest else (parts.path, PER_LIST)
            if self.per_path.get(kind, 0) >= cap:
                return
            self.per_path[kind] = self.per_path.get(kind, 0) + 1
        self.seen.add(url)
        self.queue.append(url)

    def problem(self, text: str) -> None:
        self.problems.append((self.current[len(self.origin) :][:100], text[:300]))

    def report(self) -> str:
        """Each kind of problem once, with how many times and the first page it was seen."""
        first: dict[str, str] = {}
        count: dict[str, int] = {}
        for where, text in self.problems:
            first.setdefault(text, where)
            count[text] = count.get(text, 0) + 1
        lines = [f"{count[text]}x {text}  (first at {where})" for text, where in first.items()]
        return f"{len(self.problems)} problems in {len(self.opened)} URLs:\n" + "\n".join(
            lines[:40]
        )


@pytest.fixture
def server(settings: dict[str, Any]) -> Iterator[str]:
    from webtest.http import StopableWSGIServer

    srv = StopableWSGIServer.create(main({}, **{**settings, "ztq.console.page_size": "500"}))
    try:
        yield srv.application_url.rstrip("/")
    finally:
        srv.shutdown()


@pytest.fixture
def page(server: str, chromium: Any) -> Iterator[Any]:
    """A page of the session's Chromium (tests/console/conftest.py) in a context of its own."""
    context = chromium.new_context(viewport=VIEWPORT, user_agent=hostile.USER_AGENT)
    try:
        context.add_init_script(WATCH)
        yield context.new_page()
    finally:
        context.close()


def seeds(planted: hostile.Planted) -> list[str]:
    """Pages the crawl must open whether or not a link leads there: every route without a
    parameter (pages, JSON lists, metrics; GET of a POST-only route must be harmless too);
    each payload's task done after a retry (error, traceback, result) and running again
    (error, traceback, progress, comment) and, by turns, queued, delayed or failed; every
    other planted task, worker and queue; searches for a few payloads; every task's JSON."""
    urls = [pattern for _, pattern in ROUTES if "{" not in pattern]
    every = {hostile.task_id(s, k) for s in hostile.STATES for k in hostile.PAYLOADS}
    shown = {
        hostile.task_id(state, key)
        for n, key in enumerate(hostile.PAYLOADS)
        for state in ("done", "running", ("queued", "delayed", "error")[n % 3])
    }
    urls += [
        f"/tasks/{quote(i)}?queue={quote(q)}"
        for q, i in planted.tasks
        if i in shown or i not in every
    ]
    urls += [f"/workers/{quote(w, safe='')}" for w in planted.workers]
    urls += [f"/queues/{quote(q, safe='')}" for q in planted.queues + planted.bad_queues]
    urls += [f"/search?q={quote(hostile.PAYLOADS[k][:200], safe='')}" for k in SEARCHED]
    urls += [f"/errors?task={quote(hostile.PAYLOADS[k], safe='')}" for k in ("script", "bidi")]
    urls += [f"/api/tasks/{quote(i)}?queue={quote(q)}" for q, i in planted.tasks]
    return urls


def check_html(page: Any, crawl: Crawl, response: Any) -> dict[str, Any]:
    policy = response.headers.get("content-security-policy", "")
    script_src = re.search(r"script-src([^;]*)", policy) or re.search(r"default-src([^;]*)", policy)
    if script_src is None or "unsafe-inline" in script_src.group(1):
        crawl.problem(f"no Content-Security-Policy that stops inline script: {policy!r}")
    seen = page.evaluate(INSPECT, [hostile.MARKER, hostile.EVIL])
    if seen["marker"] is not None:
        crawl.problem(f"a payload's script ran: {hostile.MARKER} = {seen['marker']}")
    for violation in seen["csp"]:
        crawl.problem(f"CSP violation: {violation}")
    for element in seen["foreign"]:
        crawl.problem(f"injected element: {element}")
    if seen["scrollWidth"] > 2 * seen["width"]:
        crawl.problem(f"page is {seen['scrollWidth']} px wide in a {seen['width']} px window")
    for element in seen["wide"]:
        crawl.problem(f"blown-out box: {element}")
    if not seen["nav"]:
        crawl.problem("the navigation is not visible in the first screen")
    if not seen["h1"]:
        crawl.problem("no main heading")
    elif seen["h1Height"] > VIEWPORT["height"] / 2:
        crawl.problem(f"the main heading is {seen['h1Height']:.0f} px high")
    return seen  # type: ignore[no-any-return]


def check_machine(crawl: Crawl, url: str, response: Any) -> None:
    """JSON under /api/ is strict JSON served as such; /metrics is the Prometheus format
    (a label value that breaks out of its quotes or its line would show)."""
    ctype = response.headers.get("content-type", "")
    text = response.text()
    path = urlsplit(url).path
    if path == "/metrics":
        if not ctype.startswith("text/plain"):
            crawl.problem(f"metrics served as {ctype}")
        for line in text.split("\n"):  # the format's only line end
            if line and not line.startswith("#") and not METRIC.match(line):
                crawl.problem(f"not a Prometheus sample: {line[:120]!r}")
        return
    if path.startswith("/api/") and not ctype.startswith("application/json"):
        crawl.problem(f"API answer served as {ctype}")
    if not ctype.startswith("application/json"):
        return

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    try:
        json.loads(text, parse_constant=refuse)
    except ValueError as exc:
        crawl.problem(f"API answer is not strict JSON: {exc}")


def sign_in(page: Any, server: str) -> None:
    page.goto(server + "/workers")
    page.fill("input[name=username]", "ann")
    page.fill("input[name=password]", PASSWORD)
    page.click("#login button")
    page.wait_for_url(server + "/workers")


def watch(page: Any, crawl: Crawl) -> None:
    """Every dialog (dismissed), script error and console error becomes a problem."""

    def on_dialog(dialog: Any) -> None:
        crawl.problem(f"{dialog.type}() opened: {dialog.message[:100]!r}")
        dialog.dismiss()

    def on_console(message: Any) -> None:
        if message.type == "error" and "status of 404" not in message.text:
            crawl.problem(f"console error: {message.text}")

    page.on("dialog", on_dialog)
    page.on("console", on_console)
    page.on("pageerror", lambda exc: crawl.problem(f"page error: {exc}"))


@pytest.mark.timeout(600)  # a crawl of some 300 URLs: 75 s alone, past 120 s on a busy machine
def test_hostile_data_runs_nothing_and_breaks_no_page(
    store: Storage, server: str, page: Any
) -> None:
    planted = hostile.plant(store)
    crawl = Crawl(server)
    watch(page, crawl)
    crawl.current = server + "/workers"
    sign_in(page, server)

    for link in page.eval_on_selector_all("nav.main-nav a", "els => els.map(a => a.href)"):
        crawl.add(link, seed=True)
    if len(crawl.queue) < 8:
        crawl.problem("the navigation lost its links")
    for url in seeds(planted):
        crawl.add(url, seed=True)
    seeded = len(crawl.queue)
    # pages where a payload must show as text, exactly (not interpreted, not escaped twice)
    verbatim = {
        f"{server}/tasks/{hostile.task_id('done', key)}?queue={hostile.QUEUE}": key
        for key in hostile.VERBATIM
    }

    while crawl.queue and len(crawl.opened) < MAX_URLS:
        url = crawl.current = crawl.queue.popleft()
        path = urlsplit(url).path
        if path.startswith("/api/") or path == "/metrics":
            response = page.request.get(url)
            crawl.opened.append((url, response.status))
            if response.status >= 500:
                crawl.problem(f"HTTP {response.status}")
            check_machine(crawl, url, response)
            continue
        response = page.goto(url)
        assert response is not None, url
        crawl.opened.append((url, response.status))
        if response.status >= 500:
            crawl.problem(f"HTTP {response.status}")
        if not page.url.startswith(server) or urlsplit(page.url).path == "/login":
            crawl.problem(f"left for {page.url[:100]}")
            continue
        if not response.headers.get("content-type", "").startswith("text/html"):
            check_machine(crawl, url, response)  # a probe's answer, say
            continue
        seen = check_html(page, crawl, response)
        for link in seen["links"]:
            crawl.add(link)
        if url in verbatim:
            text = hostile.PAYLOADS[verbatim[url]]
            name, error = page.evaluate(SHOWN)
            if name != text:
                crawl.problem(f"the task name is shown as {name!r}")
            if f"HostileError: {text}" not in (error or ""):
                crawl.problem(f"the error is shown as {error!r}")

    opened = len(crawl.opened)
    assert opened >= seeded, f"the crawl stopped at {opened} URLs before its {seeded} seeds"
    assert not crawl.problems, crawl.report()
    status = dict(crawl.opened)
    for queue, task_id in planted.tasks:  # each planted task (in a valid queue) is found
        if queue in planted.queues:
            url = f"{server}/api/tasks/{quote(task_id)}?queue={quote(queue)}"
            assert status[url] == 200, url
    page.goto(server + "/sessions")  # where the browser's own name shows
    assert hostile.USER_AGENT in page.inner_text("main")

    # a message naming a hostile worker: the flash after a command to it
    key = "attr-single"
    wid = hostile.plant_worker(store, key, hostile.PAYLOADS[key], 3)  # reporting again
    crawl.current = f"{server}/workers/{quote(wid, safe='')}"
    page.goto(crawl.current)
    with page.expect_navigation() as landed:
        page.click("button[value=refresh]")
    assert f"Sent refresh to {wid}" in page.inner_text(".flashes")
    check_html(page, crawl, landed.value)
    assert not crawl.problems, crawl.report()
