"""Switching systems through the header in headless Chromium, in English and in Chinese, on
a desktop and on a phone, with and without JavaScript (docs/systems.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.console import test_browser, test_systems
from tests.console.conftest import switch_language
from tests.console.test_browser_phone import CJK, DESKTOP, PHONE, english_in, sign_in, watch
from tests.console.test_systems import Two
from ztq.console import main

pytestmark = pytest.mark.browser
browser = test_browser.browser  # the same headless Chromium fixture
two = test_systems.two  # eu and us, with their queues, errors and workers


@pytest.fixture
def url(two: Two) -> Iterator[str]:
    from webtest.http import StopableWSGIServer

    server = StopableWSGIServer.create(main({}, **two.settings))
    try:
        yield server.application_url.rstrip("/")
    finally:
        server.shutdown()


def labels(page: Any) -> str:
    """The switch, the navigation and the page (the language buttons name both languages)."""
    parts = ["details#systems", "nav.main-nav", "main"]
    return " ".join(t for p in parts for t in page.locator(p).all_inner_texts())


@pytest.mark.parametrize(
    "lang, device, script",
    [("en", DESKTOP, True), ("zh", DESKTOP, True), ("en", PHONE, False), ("zh", PHONE, True)],
)
def test_the_header_switches_systems(
    url: str, two: Two, browser: Any, lang: str, device: dict[str, Any], script: bool
) -> None:
    context = browser.new_context(**device, java_script_enabled=script)
    page = context.new_page()
    problems = watch(page)
    sign_in(page, url)
    switch_language(page, lang)
    page.goto(url + "/errors")
    switch = page.locator("details#systems")
    assert switch.locator("summary strong").inner_text() == "eu"
    assert switch.locator("summary").inner_text().startswith("系统" if lang == "zh" else "System")
    assert not page.locator("details#systems nav a").first.is_visible()  # closed
    switch.locator("summary").click()
    page.locator("details#systems nav a", has_text="us").click()
    page.wait_for_url(url + "/s/us/errors")
    text = page.inner_text("main")
    assert all(i[:12] in text for i in two.us_errors)
    assert not any(i[:12] in text for i in two.eu_errors)
    assert page.locator("details#systems summary strong").inner_text() == "us"
    # the navigation stays in us; the overview names both, us as the current one
    page.click("nav.main-nav a[href='/s/us/queues']")
    page.wait_for_url(url + "/s/us/queues")
    assert "beta" in page.inner_text("main") and "alpha" not in page.inner_text("main")
    page.locator("details#systems summary").click()
    page.locator("details#systems nav a.all").click()
    page.wait_for_url(url + "/s/us/systems")
    rows = page.locator("table.systems tbody tr")
    assert rows.count() == 2
    assert page.locator("tr.current strong").inner_text() == "us"
    assert page.evaluate("document.scrollingElement.scrollWidth") <= device["viewport"]["width"]
    shown = labels(page)
    if lang == "zh":
        assert page.inner_text("h1") == "系统" and "可连接" in shown
        assert not english_in(page.inner_text("h1")) and not english_in(page.inner_text("thead"))
    else:
        assert page.inner_text("h1") == "Systems" and not CJK.search(shown)
    # back to eu from the switch: the same list page there
    page.locator("details#systems summary").click()
    page.locator("details#systems nav a", has_text="eu").click()
    page.wait_for_url(url + "/systems")
    assert page.locator("tr.current strong").inner_text() == "eu"
    assert not problems, problems
    context.close()
