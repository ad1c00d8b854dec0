"""Issue 30, points 8 and 9 in headless Chromium: the first Tab reaches "Skip to content";
after a filter, focus is on the results; at 200% zoom on a 1280 x 800 window the header
keeps to a strip; the header search's placeholder is whole; task ids are whole, with a copy
button that copies all of one."""

from __future__ import annotations

from typing import Any

import pytest

from tests import sample_tasks as t
from tests.console import scenario, test_browser
from tests.console.conftest import browser_sign_in
from ztq.core.engine.storage import Storage

pytestmark = pytest.mark.browser

browser = test_browser.browser  # the same headless Chromium fixture
server = test_browser.server

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
    page.click("#lang button[value=zh]")
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
