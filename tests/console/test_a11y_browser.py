"""Issue 30, points 8 and 9 in headless Chromium: the first Tab reaches "Skip to content";
after a filter, focus is on the results; at 200% zoom on a 1280 x 800 window the header
keeps to a strip; the header search's placeholder is whole; task ids are whole, with a copy
button that copies all of one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import axe_playwright_python
import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from tests.console import scenario, test_browser, test_browser_phone
from tests.console.conftest import browser_sign_in, switch_language
from ztq.core.engine.storage import Storage
from ztq.core.monitor.bulk import new_batch
from ztq.core.monitor.groups import group_key

pytestmark = pytest.mark.browser

browser = test_browser.browser  # the same headless Chromium fixture
server = test_browser.server
console = test_browser_phone.console


@pytest.fixture
def settings(settings: dict[str, Any]) -> dict[str, Any]:
    """Pages of 10 rows: every kind of row is on them, and axe reads each page in a
    fraction of the time 50 would take."""
    return {**settings, "ztq.console.page_size": "10"}


FITS = """el => {
  const c = document.createElement('canvas').getContext('2d');
  const s = getComputedStyle(el);
  c.font = s.fontStyle + ' ' + s.fontWeight + ' ' + s.fontSize + ' ' + s.fontFamily;
  const room = el.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);
  return [c.measureText(el.placeholder).width, room];
}"""


def sign_in(context: Any, url: str, lang: str) -> Any:
    return browser_sign_in(context.new_page(), url, lang)


def test_keyboard_skip_link_focus_after_filter_and_zoom(
    store: Storage, server: str, browser: Any
) -> None:
    lang = "en"
    for i in range(3):
        t.boom.delay(f"disk {i} is full")
    scenario.work(store, fail=lambda p: p["args"][0])
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = sign_in(context, server, lang)

    # the first Tab: the skip link; Enter: focus in the page's content
    page.goto(server + "/search")
    page.keyboard.press("Tab")
    skip = "Skip to content" if lang == "en" else "跳到正文"
    assert page.evaluate("document.activeElement.textContent") == skip
    assert page.locator("a.skip").is_visible()  # shown while focused
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"

    # a filter submitted from the keyboard: focus on the results, not at the top
    page.focus("main input[name=q]")
    page.keyboard.type("disk")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "results"
    page.keyboard.press("Tab")  # the next Tab goes into the results: the first task id
    assert page.evaluate("document.activeElement.classList.contains('tid')")

    # a filter form without #results (History): the script puts focus on the list
    page.goto(server + "/history")
    page.focus("main input[name=task]")
    page.keyboard.type("boom")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.matches('main .table-wrap, main .empty')")

    # the search without the script: the form leads to #results, the browser goes there
    nojs = browser.new_context(viewport={"width": 1280, "height": 800}, java_script_enabled=False)
    bare = sign_in(nojs, server, lang)
    bare.goto(server + "/search")
    bare.fill("main input[name=q]", "disk")
    with bare.expect_navigation():
        bare.press("main input[name=q]", "Enter")
    assert bare.url.endswith("#results")
    nojs.close()

    # the header search's placeholder is whole at 1280 px
    width, room = page.locator("header input[name=q]").evaluate(FITS)
    assert width <= room, (width, room)

    # a task id: all of it shown, and copied whole by its button
    page.goto(server + "/search?q=disk")
    first = page.locator("a.tid").first
    task_id = first.get_attribute("data-copy")
    assert first.inner_text() == task_id and len(task_id) == 32
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server)
    page.locator("button.copy").first.click()
    assert page.evaluate("navigator.clipboard.readText()") == task_id
    assert page.locator("button.copy").first.inner_text() == "Copied"

    # in Chinese: the skip link, the copy button, the placeholder whole
    switch_language(page, "zh")
    page.goto(server + "/search?q=disk")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "跳到正文"
    assert page.locator("button.copy").first.inner_text() == "复制"
    width, room = page.locator("header input[name=q]").evaluate(FITS)
    assert width <= room, (width, room)
    context.close()

    # 200% zoom on a 1280 x 800 window: 640 x 400 CSS pixels; the header takes <= 15%
    zoomed = browser.new_context(viewport={"width": 640, "height": 400}, device_scale_factor=2)
    page = sign_in(zoomed, server, lang)
    for path in ("/workers", "/search?q=disk"):
        page.goto(server + path)
        height = page.evaluate("document.querySelector('header.top').offsetHeight")
        assert height <= 0.15 * 400, (path, height)
        assert page.evaluate("document.scrollingElement.scrollWidth") <= 640, path
    zoomed.close()


# -- issue 36, point 8: WCAG 2.1 AA, checked by axe-core on every page ----------------------
# axe-core's own script, as the axe-playwright-python wheel (the test extra) ships it: nothing
# is downloaded while the tests run
AXE = Path(axe_playwright_python.__file__).with_name("axe.min.js")
# every rule in the light scheme; in the dark one only those a colour scheme can change
RUN_AXE = """async (colours) => {
  const only = colours ? {runOnly: ['color-contrast', 'link-in-text-block']} : {};
  const r = await axe.run(document, {resultTypes: ['violations'], ...only});
  return r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.map(n => n.target.join(' ') + ' :: ' + n.failureSummary.slice(0, 160))}));
}"""
# Text smaller than 12 CSS px: every element with text of its own (SVG text at its drawn
# size), visible, with its size and a sample
SMALL_TEXT = """() => {
  const out = [];
  for (const el of document.querySelectorAll('body *')) {
    const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own || !el.getClientRects().length) continue;
    const s = getComputedStyle(el);
    if (s.visibility === 'hidden' || s.display === 'none') continue;
    let px = parseFloat(s.fontSize);
    if (el instanceof SVGElement && el.getScreenCTM()) px *= el.getScreenCTM().a;
    if (px < 11.95) out.push(el.tagName + '.' + el.className.baseVal + el.className + ' ' +
      px.toFixed(1) + 'px: ' + el.textContent.trim().slice(0, 30));
  }
  return out;
}"""
WIDTHS = {"1280": test_browser_phone.DESKTOP, "390": test_browser_phone.PHONE}


def a11y_pages(console: test_browser_phone.Console, store: Storage) -> list[tuple[str, int]]:
    """Every page of the console a GET shows (test_browser_phone.every_page) and those its
    actions lead to: the trash and a redo's follow-up, batches, a bulk confirmation, the
    overview, a 404; each with the status it answers."""
    with ztq.batch(description="thumbnails") as b:
        t.add.delay(1, 2)
    errors = console.ids["errors"]
    deleted = new_batch()
    store.errors.trash_errors("default", deleted, errors[-1:])
    redo = new_batch()
    store.errors.redo_errors("default", redo, errors[-2:-1])
    confirm = "/bulk/confirm?action=delete&source=errors&queue=default"
    # a redo into a paused, rate-limited queue, one of it failed again (issue 36, point 3)
    held = new_batch()
    t.boom.enqueue(("held 1",), queue="held")
    t.boom.enqueue(("held 2",), queue="held")
    scenario.work(store, "held", fail=lambda p: p["args"][0])
    store.errors.redo_errors("held", held, oldest=2)
    scenario.work(store, "held", fail=lambda p: p["args"][0], limit=1)
    store.queues.pause("held")
    store.queues.configure("held", rate_limit="10/m")
    kind = "/errors/groups?by=kind"
    big = t.send.prepare(("ann@example.org", "x" * 5_000)).enqueue().id  # arguments cut
    store.queues.register_queue("idle")  # holds nothing: its page offers to forget it
    return [
        *test_browser_phone.every_page(console.ids),
        ("/trash", 200),
        (f"/trash?batch={deleted}&queue=default", 200),  # one delete, searched below its tasks
        ("/trash?q=e", 200),  # a search of the trash
        (f"/redo/{redo}?queue=default", 200),
        ("/batches", 200),
        (f"/batches/{b.id}", 200),
        (confirm, 200),
        ("/errors?queue=default&q=disk", 200),
        ("/workers?status=lost", 200),
        (kind, 200),
        (f"/redo/{held}?queue=held", 200),
        (f"/redo/{held}?queue=held&state=error", 200),
        ("/bulk/confirm?action=redo&source=errors&queue=held&group=" + group_of(store), 200),
        (f"/tasks/{big}", 200),
        ("/queues/idle", 200),
    ]


def group_of(store: Storage) -> str:
    """The key of an error group of ``held`` (its failed-again task's)."""
    [task_id] = store.client.zrange(store.keys.errors("held"), 0, 0)
    rec = store.tasks.record("held", task_id)
    assert rec is not None
    return group_key(rec)


def check_page(page: Any, where: str, tally: dict[str, int], colours: bool = False) -> list[str]:
    """What axe-core finds on the page as it is (any impact: none is left; ``colours``: the
    colour rules only), and text under 12 px; ``tally`` counts the elements per impact and
    rule."""
    if not page.evaluate("typeof axe !== 'undefined'"):
        page.evaluate(AXE.read_text("utf-8"))  # as devtools would: the page's CSP stays on
    assert page.evaluate("typeof axe.run") == "function", "axe-core is not in the page"
    found = []
    for v in page.evaluate(RUN_AXE, colours):
        rule = f"{v['impact']} {v['id']}"
        tally[rule] = tally.get(rule, 0) + len(v["nodes"])
        found.append(f"{where}: {rule} ({v['help']}): {len(v['nodes'])} elements, "
                     f"e.g. {v['nodes'][:3]}")  # fmt: skip
    small = [] if colours else page.evaluate(SMALL_TEXT)
    if small:
        found.append(f"{where}: {len(small)} texts under 12 px, e.g. {small[:4]}")
    return found


@pytest.mark.timeout(600)  # some 40 pages twice, on a busy machine
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_axe_finds_nothing_on_any_page(
    console: test_browser_phone.Console, store: Storage, browser: Any, lang: str, width: str
) -> None:
    """axe-core (WCAG 2.1 AA and its best practices) on every page, light and dark, at 1280
    and 390 px, in English and Chinese: no violation of any impact (so none serious or
    critical), no text under 12 px; the same without the console's script, on the bulk
    progress page too (which the script would continue)."""
    for i in range(150):  # more than one step of a bulk delete (bulk_batch is 100)
        t.boom.enqueue((f"bulk {i}",), queue="bulk")
    scenario.work(store, "bulk", fail=lambda p: p["args"][0])
    pages = a11y_pages(console, store)
    found: list[str] = []
    tally: dict[str, int] = {}
    for script in (True, False):
        context = browser.new_context(**WIDTHS[width])
        # axe in every page before the page's own script, as an extension would put it:
        # 48 evaluations of its 550 kB through Playwright took ~6 s of each run
        context.add_init_script(path=AXE)
        if not script:  # axe itself needs JavaScript: the console's own script is left out
            context.route("**/console.js*", lambda route: route.abort())
        page = context.new_page()
        page.goto(console.url + "/login")
        if lang == "zh":
            switch_language(page, "zh")
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            found += check_page(page, f"{lang} {width} {scheme} /login", tally, scheme == "dark")
        test_browser_phone.sign_in(page, console.url)
        visits = pages if script else [("/errors", 200), ("/queues/bulk", 200)]
        for path, status in visits:
            response = page.goto(console.url + path)
            assert response is not None and response.status == status, path
            for scheme in ("light", "dark"):
                page.emulate_media(color_scheme=scheme)
                found += check_page(
                    page, f"{lang} {width} {scheme} {path}", tally, scheme == "dark"
                )
        if not script:  # the bulk progress page, which continues by itself with the script
            page.click("form:has(input[value=errors]) button[value=delete]")
            page.click("#confirm button")
            assert page.locator("#bulk").count() == 1
            for scheme in ("light", "dark"):
                page.emulate_media(color_scheme=scheme)
                where = f"{lang} {width} {scheme} bulk progress (no script)"
                found += check_page(page, where, tally, scheme == "dark")
        context.close()
    summary = f"{len(found)} findings; elements per impact and rule: {tally}"
    assert not found, summary + "\n" + "\n".join(found)


# -- issue 36, point 6: a compact header on a phone ------------------------------------------
HEADER = """() => {
  const top = document.querySelector('header.top'), nav = top.querySelector('.main-nav');
  const cur = nav.querySelector('[aria-current=page]');
  const box = el => el.getBoundingClientRect();
  const inNav = el => box(el).left >= box(nav).left - 1 && box(el).right <= box(nav).right + 1;
  return {height: top.offsetHeight, navHeight: nav.offsetHeight, scrolls: nav.scrollWidth >
          nav.clientWidth, current: cur && inNav(cur), links: nav.querySelectorAll('a').length,
          overflow: [nav, ...top.querySelectorAll('a, button, input')].filter(el =>
            (el === nav || !nav.contains(el)) && box(el).width &&  // the row clips its links
            (box(el).left < 0 || box(el).right > innerWidth)).map(el => el.outerHTML.slice(0, 60)),
          page: document.scrollingElement.scrollWidth};
}"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_on_a_phone_the_header_is_compact(
    console: test_browser_phone.Console, browser: Any, lang: str
) -> None:
    """On a 390 x 844 phone the header took 232 px (the sections in three rows): now the
    sections are one row that scrolls sideways, the current one in view (with the script),
    under a row with the name, languages and sign-out, over the search."""
    for script in (True, False):
        context = browser.new_context(**test_browser_phone.PHONE, java_script_enabled=script)
        page = context.new_page()
        test_browser_phone.sign_in(page, console.url)
        if lang == "zh":
            switch_language(page, "zh")
        for path in ("/", "/errors", "/alerts", "/sessions"):  # the last sections too
            page.goto(console.url + path)
            seen = page.evaluate(HEADER)
            assert seen["height"] <= 150, (path, seen)  # of 844
            assert seen["navHeight"] <= 48 and seen["scrolls"] and seen["links"] == 13, seen
            assert not seen["overflow"] and seen["page"] <= 390, (path, seen)
            assert seen["current"] or not script, (path, seen)  # the script scrolls to it
        # every section is reachable: the row scrolls to the last one, a tap opens it
        last = page.locator(".main-nav a").last
        last.scroll_into_view_if_needed()
        with page.expect_navigation():
            last.tap()
        assert page.url.endswith("/sessions")
        context.close()
