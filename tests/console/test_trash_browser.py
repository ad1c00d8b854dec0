"""The trash search in Chromium without JavaScript (issue 36, point 6): the search is a GET
form read on the server, its pages plain links, and a Restore from the results lands on the
delete the task came from."""

from __future__ import annotations

from typing import Any

import pytest

import ztq.core as ztq
from tests.console.conftest import browser_sign_in
from tests.console.test_actions import failed
from tests.console.test_browser import browser, server  # noqa: F401 (fixtures)
from ztq.core.engine.storage import Storage
from ztq.core.monitor.bulk import new_batch

pytestmark = pytest.mark.browser


def test_the_trash_is_searched_and_restored_without_javascript(
    store: Storage,
    server: str,  # noqa: F811 (the fixture imported above)
    browser: Any,  # noqa: F811
) -> None:
    smtp = failed(store, 60, "smtp down")
    disk = failed(store, 2, "disk full")
    first, second = new_batch(), new_batch()
    store.errors.trash_errors("default", first, smtp[:30] + disk)
    store.errors.trash_errors("default", second, smtp[30:])
    context = browser.new_context(viewport={"width": 1280, "height": 800},
                                  java_script_enabled=False)  # fmt: skip
    page = browser_sign_in(context.new_page(), server)
    page.goto(server + "/trash")
    page.fill("#trash-search input[name=q]", "disk full")
    with page.expect_navigation():
        page.keyboard.press("Enter")  # the form submits itself: no script
    rows = page.locator("table.trash tbody tr")
    assert rows.count() == 2 and all(i in page.inner_text("table.trash") for i in disk)
    # more than a page: the next one is a link
    page.fill("#trash-search input[name=q]", "smtp")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    shown = page.inner_text("table.trash")
    with page.expect_navigation():
        page.click("a[rel=next]")
    shown += page.inner_text("table.trash")
    assert all(i in shown for i in smtp)
    # Restore from the results: back to the delete it came from
    page.fill("#trash-search input[name=q]", disk[0])
    with page.expect_navigation():
        page.keyboard.press("Enter")
    page.click("table.trash tbody button")
    assert f"batch={first}" in page.url and "Restored 1 task." in page.inner_text(".flashes")
    assert ztq.ping(disk[0]) == "error"
    context.close()
