"""The console on a phone, and every page in both languages, in headless Chromium.

At 390 px wide every list of the console is a stack of cards (one a row, each cell a line
"label value", the label the cell's ``data-label``), with its buttons whole and big enough
for a finger, and no page scrolls sideways; at 1280 px the lists are tables again. Every
page renders in English and in Chinese, headings translated, without a script error; the
console works without JavaScript (a bulk delete continued by hand).
Screenshots land where test_browser.py puts its own ($ZTQ_SCREENSHOTS or a temp folder).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from webtest import TestApp

import ztq.core as ztq
from tests import sample_tasks as t
from tests.console import scenario, test_browser
from tests.console.conftest import PASSWORD, login, switch_language
from tests.console.test_i18n import zh_messages
from ztq.console import main
from ztq.core.auth.sessions import list_sessions
from ztq.core.auth.tokens import create_token
from ztq.core.engine.storage import Storage

pytestmark = pytest.mark.browser
browser = test_browser.browser  # the same headless Chromium fixture

PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True}
DESKTOP = {"viewport": {"width": 1280, "height": 800}}


@dataclass
class Console:
    url: str
    wsgi: Any
    ids: dict[str, Any]


@pytest.fixture
def console(settings: dict[str, Any], store: Storage) -> Iterator[Console]:
    """A console with alert rules (so /alerts has rows in each table), on a Redis holding
    the scenario, an audit entry, an API token and another user's session."""
    from webtest.http import StopableWSGIServer

    ids = scenario.populate(store)
    scenario.throughput(store)
    done = t.add.enqueue((1, 2), queue="done")
    scenario.work(store, "done")  # a finished task: its page lists its runs
    ids["done"] = done.id
    orders = ztq.channel("orders")  # the channels page: a subscriber that lags, a broadcast
    orders.subscribe("audit").read()
    orders.publish({"order": 1})
    t.noop.broadcast()
    wsgi = main({}, **settings, **{"ztq.alerts.rules": "no_worker *", "ztq.alerts.every": "0.2"})
    alerter = wsgi.registry.ztq_alerter
    srv = StopableWSGIServer.create(wsgi)
    try:
        assert alerter.wait_rounds(2, timeout=20), "the alert thread is stuck"
        login(TestApp(wsgi), "vic")  # a session ann can end
        create_token(store, "prometheus", "viewer", 90)
        yield Console(srv.application_url.rstrip("/"), wsgi, ids)
    finally:
        srv.shutdown()
        alerter.stop()


def sign_in(page: Any, url: str, user: str = "ann") -> None:
    page.goto(url + "/login")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", PASSWORD)
    page.click("#login button")
    page.wait_for_url(url + "/")  # the overview


def watch(page: Any) -> list[str]:
    """Script errors and console errors (CSP violations included) of the page, as they come."""
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"{page.url}: page error: {exc}"))
    page.on("console", lambda m: problems.append(f"{page.url}: {m.text}") if m.type == "error"
            else None)  # fmt: skip
    return problems


def listing_pages(ids: dict[str, Any]) -> list[str]:
    """Every page with a list of rows, each with rows in it."""
    return [
        "/workers",
        "/workers/app-1.4242",
        "/queues",
        "/queues/default",
        "/errors",
        "/errors/groups",
        "/running",
        "/scheduled",
        "/history",
        "/log",
        "/audit",
        "/alerts",
        "/channels",
        "/sessions",
        "/search?q=disk",
        f"/tasks/{ids['done']}?queue=done",
    ]


# What the tables look like, from inside the page: per cell its column's label (the header's
# text; the checkbox column's is "Select"), its data-label, its ::before content and
# display, its box; per button (and checkbox cell) its box.
INSPECT = """select => {
  const box = el => { const r = el.getBoundingClientRect();
    return {left: r.left, right: r.right, width: r.width, height: r.height}; };
  const cells = [], targets = [];
  for (const table of document.querySelectorAll('.table-wrap table.grid')) {
    const labels = [];
    for (const th of table.querySelectorAll('thead th')) {
      const text = th.classList.contains('select') ? select : th.textContent.trim();
      for (let i = 0; i < th.colSpan; i++) labels.push(text);
    }
    for (const tr of table.querySelectorAll('tbody tr')) {
      let col = 0;
      for (const td of tr.children) {
        const whole = col === 0 && td.colSpan === labels.length;
        const before = getComputedStyle(td, '::before');
        cells.push({column: whole ? '' : labels[col], label: td.getAttribute('data-label'),
                    content: before.content, display: before.display,
                    tableDisplay: getComputedStyle(table).display,
                    text: td.textContent.trim().slice(0, 40), box: box(td)});
        col += td.colSpan;
      }
    }
  }
  for (const el of document.querySelectorAll(
      'main button, main .btn, main label.tap, main select, nav.main-nav a, ' +
      'main input:not([type=hidden]):not(.tap > input)')) {
    if (el.offsetParent === null && el.getClientRects().length === 0) continue;
    // the sections' row scrolls sideways (test_a11y_browser): the links it clips wait there
    const nav = el.closest('nav.main-nav');
    if (nav && (box(el).left < box(nav).left || box(el).right > box(nav).right)) continue;
    targets.push({what: el.outerHTML.slice(0, 80), box: box(el)});
  }
  const tables = [...document.querySelectorAll('main table')].map(el => box(el));
  return {cells, targets, tables, width: window.innerWidth,
          scroll: document.scrollingElement.scrollWidth};
}"""


def inside(box: dict[str, float]) -> bool:
    """Whether a box is within the phone's width."""
    return box["left"] >= 0 and box["right"] <= 390


def test_on_a_phone_every_list_is_a_stack_of_cards(console: Console, browser: Any) -> None:
    context = browser.new_context(**PHONE)
    page = context.new_page()
    problems = watch(page)
    sign_in(page, console.url)
    for path in listing_pages(console.ids):
        response = page.goto(console.url + path)
        assert response is not None and response.status == 200, path
        seen = page.evaluate(INSPECT, "Select")
        assert seen["width"] == 390, path  # the page did not zoom out to fit something wide
        assert seen["scroll"] <= seen["width"], f"{path} scrolls sideways"
        assert seen["cells"], f"{path}: no rows to look at"
        for b in seen["tables"]:
            assert inside(b), f"{path}: a table is cut off"
        for cell in seen["cells"]:
            where = (path, cell["column"], cell["text"])
            if cell["label"] is None:  # the user of a session: its card's title, no label
                assert (path, cell["column"]) == ("/sessions", "User"), where
                continue
            assert cell["label"] == cell["column"], where
            assert cell["content"] == f'"{cell["column"]}"', where
            assert cell["display"] == ("none" if cell["column"] == "" else "block"), where
            assert cell["tableDisplay"] == "block", where
            assert inside(cell["box"]), where
        for target in seen["targets"]:
            b = target["box"]
            assert inside(b), (path, target)
            assert b["height"] >= 40, (path, target)
        name = "phone" + path.split("?")[0].replace("/", "-")
        page.screenshot(path=str(test_browser.SHOTS / f"{name}.png"), full_page=True)

    # the error text of the newest error is on the screen, whole
    page.goto(console.url + "/errors")
    error = page.locator("table.errors tbody tr").first.locator("td.error-text")
    error.evaluate("el => el.scrollIntoView({block: 'center'})")  # wholly on the screen
    assert error.is_visible() and error.inner_text().startswith(("ValueError", "SMTP"))
    b = error.bounding_box()
    assert b is not None and b["x"] >= 0 and b["x"] + b["width"] <= 390
    assert b["y"] >= 0 and b["y"] + b["height"] <= 844
    assert error.evaluate("el => el.scrollWidth <= el.clientWidth")  # not cut
    assert not problems, problems
    context.close()


def test_on_a_desktop_the_lists_stay_tables(console: Console, browser: Any) -> None:
    context = browser.new_context(**DESKTOP)
    page = context.new_page()
    problems = watch(page)
    sign_in(page, console.url)
    for path in listing_pages(console.ids):
        page.goto(console.url + path)
        seen = page.evaluate(INSPECT, "Select")
        assert seen["scroll"] <= seen["width"], f"{path} scrolls sideways"
        for cell in seen["cells"]:
            assert cell["tableDisplay"] == "table", (path, cell)
            assert cell["content"] in ("none", "normal"), (path, cell)
    assert not problems, problems
    context.close()


def test_on_a_phone_a_finger_redoes_deletes_and_ends_a_session(
    console: Console, browser: Any, store: Storage
) -> None:
    context = browser.new_context(**PHONE)
    page = context.new_page()
    problems = watch(page)
    sign_in(page, console.url)
    redo, delete = console.ids["errors"][:2]

    def tick(task_id: str) -> None:
        """Tap the label of the row's checkbox cell, away from the box itself."""
        cell = page.locator(f"td.select:has(input[value='default:{task_id}'])")
        cell.tap(position={"x": 12, "y": 12})
        assert cell.locator("input").is_checked()

    page.goto(console.url + "/errors?queue=default")
    tick(redo)
    with page.expect_navigation():
        page.locator("#selection button[value=redo]").tap()
    assert "Redo: 1 of 1 task." in page.inner_text(".flashes")  # on the redo's own page
    assert ztq.ping(redo, "default") == "queued"

    page.goto(console.url + "/errors?queue=default")
    tick(delete)
    with page.expect_navigation():  # a confirmation that names the task (issue 30)
        page.locator("#selection button[value=delete]").tap()
    assert delete in page.inner_text("dl.scope")
    with page.expect_navigation():
        page.locator("#confirm button").tap()
    assert "Delete: 1 of 1 task." in page.inner_text(".flashes")  # on its trash page
    assert ztq.ping(delete, "default") == "none"
    assert store.client.zscore(store.keys.errors("default"), delete) is None

    page.goto(console.url + "/sessions")
    assert len(list_sessions(store, console.wsgi.registry.ztq_settings.sessions)) == 2
    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_navigation():
        page.locator("td.actions button", has_text="End").tap()
    assert "Ended 1 session." in page.inner_text(".flashes")
    [left] = list_sessions(store, console.wsgi.registry.ztq_settings.sessions)
    assert left.user == "ann"
    assert not problems, problems
    context.close()


# What a page shows as headings and labels, to check that none is left in English in
# Chinese (and none is in Chinese in English)
LABELS = """() => {
  const out = [];
  const add = (kind, text) => {
    text = (text || '').replace(/\\s+/g, ' ').trim();
    if (text) out.push([kind, text]);
  };
  document.querySelectorAll(
    'h1, h2, h3, th, nav.main-nav a, .tabs a, .card .label, main button, main .btn, label'
  ).forEach(el => add(el.tagName.toLowerCase(), el.textContent));
  document.querySelectorAll('[data-label]').forEach(
    el => add('data-label', el.getAttribute('data-label')));
  add('title', document.title);
  return out;
}"""
CJK = re.compile(r"[\u4e00-\u9fff]")
MESSAGES = zh_messages()  # the Chinese catalog: English message -> Chinese
KEPT = {en for en, zh in MESSAGES.items() if en == zh}  # words Chinese keeps (CPU, Webhook)


def english_in(text: str) -> list[str]:
    """Pieces of ``text`` that read as English: a message the catalog translates, a
    capitalised word, two lowercase words in a row (task names, queues and ids are single
    lowercase tokens)."""
    found = [text] if MESSAGES.get(text, text) != text else []
    found += [w for w in re.findall(r"\b[A-Z][a-z]{2,}\w*", text) if w not in KEPT]
    found += re.findall(r"\b[a-z]{3,} [a-z]{3,}\b", text)
    return found


def every_page(ids: dict[str, Any]) -> list[tuple[str, int]]:
    """Every page of console/routes.py a GET shows, with the status it answers."""
    default = "?queue=default"
    return [
        *((path, 200) for path in listing_pages(ids)),
        ("/", 200),  # the workers
        ("/workers/batch-7", 200),  # a lost worker: its page says who starts it again
        ("/queues/reports", 200),
        ("/search", 200),
        ("/systems", 200),  # one system here: docs/systems.md
        (f"/search?q={ids['errors'][0]}", 200),  # an id: the task
        (f"/tasks/{ids['errors'][0]}{default}", 200),
        (f"/tasks/{ids['running']}{default}", 200),
        (f"/tasks/{ids['queued'][0]}{default}", 200),
        (f"/tasks/{ids['delayed'][0]}{default}", 200),
        ("/tasks/no-such-task", 404),
        ("/queues/no-such-queue", 404),
    ]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_page_in_both_languages(console: Console, browser: Any, lang: str) -> None:
    context = browser.new_context(**DESKTOP)
    page = context.new_page()
    problems = watch(page)
    headings: dict[str, str] = {}

    def look(path: str) -> None:
        for kind, text in page.evaluate(LABELS):
            if lang == "zh":
                assert not english_in(text), (path, kind, text, english_in(text))
            else:
                assert not CJK.search(text), (path, kind, text)
        headings[path] = page.inner_text("h1")

    page.goto(console.url + "/login")
    switch_language(page, lang)  # the switch in the header, signed out
    look("/login")
    sign_in(page, console.url)
    for path, status in every_page(console.ids):
        seen = len(problems)
        response = page.goto(console.url + path)
        assert response is not None and response.status == status, (lang, path)
        if status == 404:  # Chromium logs the status of the page itself: nothing else
            assert [m for m in problems[seen:] if "status of 404" in m] == problems[seen:]
            del problems[seen:]
        look(path)
    assert not problems, problems
    if lang == "zh":
        assert headings["/workers"] == "工作状态" and headings["/errors"] == "错误清单"
        assert headings["/alerts"] == "告警" and headings["/login"] == "登录 ztq 控制台"
    else:
        assert headings["/workers"] == "Workers" and headings["/sessions"] == "Sessions"
    context.close()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_without_javascript_a_phone_deletes_errors_in_steps(
    console: Console, browser: Any, store: Storage, lang: str
) -> None:
    """The bulk progress page continues by itself with the script; without it, by hand."""
    for i in range(250):
        t.boom.enqueue((f"bulk {i}",), queue="bulk")
    scenario.work(store, "bulk", fail=lambda p: p["args"][0])
    context = browser.new_context(**PHONE, java_script_enabled=False)
    page = context.new_page()
    sign_in(page, console.url)
    switch_language(page, lang)
    page.goto(console.url + "/queues/bulk")
    page.click("form:has(input[value=errors]) button[value=delete]")
    page.click("#confirm button")  # the confirmation page, without the script too
    steps = 0
    while page.locator("#bulk").count():
        heading = page.inner_text("h1")
        assert heading == ("正在删除任务" if lang == "zh" else "Deleting tasks"), heading
        assert page.evaluate("document.scrollingElement.scrollWidth") <= 390
        page.click("#bulk button")
        steps += 1
    assert steps >= 2
    assert store.client.zcard(store.keys.errors("bulk")) == 0
    assert ("删除" if lang == "zh" else "Deleted") in page.inner_text(".flashes")
    context.close()
