"""Back-pressure in the console: an operator sets, changes and lifts a queue's pending limit
on its page (a viewer cannot, a forged value is refused); the queues list marks full queues
and their buffer; /metrics exposes both (WebTest), and the same in Chromium, in English and
Chinese."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from webtest import TestApp

from tests import sample_tasks as t
from tests.console import test_browser
from tests.console.conftest import post, switch_language
from tests.console.test_browser_phone import CJK, DESKTOP, sign_in, watch
from ztq.console import main
from ztq.core.engine.storage import Storage

Q = "press"


def fill(n: int) -> None:
    for i in range(n):
        t.add.enqueue((i, 0), queue=Q, unique=False)


@pytest.mark.slow
def test_an_operator_sets_changes_and_lifts_a_pending_limit(
    operator: TestApp, viewer: TestApp, store: Storage
) -> None:
    fill(1)
    form = {"action": "pending", "max_pending": "3", "when_full": "buffer", "block_timeout": "30"}
    r = post(operator, f"/queues/{Q}/state", form)
    assert "press: at most 3 tasks waiting; more wait in the overflow buffer." in r.follow().text
    assert store.queues.queue_config(Q) == {"max_pending": 3, "when_full": "buffer"}
    fill(5)  # 3 ready, 3 buffered
    page = operator.get(f"/queues/{Q}")
    assert "at most 3 waiting" in page.text
    buffered = page.html.find("span", string="Buffered").find_parent("div")
    assert buffered.find("span", class_="value").get_text() == "3"
    assert page.html.select_one("select[name=when_full] option[selected]")["value"] == "buffer"
    [row] = [tr for tr in operator.get("/queues").html.select("tbody tr") if Q in tr.get_text()]
    assert "full" in row.get_text(" ") and "+3 buffered" in row.get_text(" ")
    waiting = operator.get(f"/queues/{Q}").html.select("table tbody tr")
    assert sum("overflow" in tr.get_text(" ") for tr in waiting) == 3  # the buffer is listed
    form |= {"when_full": "block", "block_timeout": "12"}
    r = post(operator, f"/queues/{Q}/state", form)
    assert "producers wait up to 12 s for room" in r.follow().text
    assert store.queues.queue_config(Q) == {
        "max_pending": 3,
        "when_full": "block",
        "block_timeout": 12.0,
    }
    for bad in ({"max_pending": "0"}, {"max_pending": "x"}, {"when_full": "drop"},
                {"block_timeout": "0"}, {"block_timeout": "99999"}):  # fmt: skip
        r = post(operator, f"/queues/{Q}/state", form | bad)
        assert "Pending limit: 1-100000000 or empty" in r.follow().text
        assert store.queues.queue_config(Q)["max_pending"] == 3
    r = post(viewer, f"/queues/{Q}/state", form | {"max_pending": ""}, expect_errors=True)
    assert r.status_int == 403 and store.queues.queue_config(Q)["max_pending"] == 3
    assert 'name="max_pending"' not in viewer.get(f"/queues/{Q}").text
    r = post(operator, f"/queues/{Q}/state", form | {"max_pending": ""})
    assert "press: no pending limit." in r.follow().text
    assert store.queues.queue_config(Q) == {}
    assert store.queues.pending_count(Q) == 6 and store.client.llen(store.keys.overflow(Q)) == 0
    audit = operator.get("/audit").text
    assert "max_pending=3 when_full=buffer" in audit and "max_pending=none" in audit


def test_metrics_expose_full_queues_their_buffer_and_refusals(
    operator: TestApp, store: Storage
) -> None:
    fill(1)
    post(operator, f"/queues/{Q}/state", {"action": "pending", "max_pending": "2",
                                         "when_full": "buffer", "block_timeout": "30"})  # fmt: skip
    fill(4)
    text = operator.get("/metrics").text

    def sample(name: str) -> str:
        found = re.search(rf'^{name}{{queue="{Q}"}} (\S+)$', text, re.M)
        assert found, name
        return found.group(1)

    assert (sample("ztq_queue_max_pending"), sample("ztq_queue_full")) == ("2", "1")
    assert (sample("ztq_queue_overflow"), sample("ztq_enqueue_overflowed_total")) == ("3", "3")
    assert sample("ztq_enqueue_refused_total") == "0"


browser = test_browser.browser


@pytest.fixture
def url(settings: dict[str, Any]) -> Iterator[str]:
    from webtest.http import StopableWSGIServer

    server = StopableWSGIServer.create(main({}, **settings))
    try:
        yield server.application_url.rstrip("/")
    finally:
        server.shutdown()


@pytest.mark.browser
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_pending_limit_form_in_chromium(
    url: str, store: Storage, browser: Any, lang: str
) -> None:
    fill(4)
    context = browser.new_context(**DESKTOP)
    page = context.new_page()
    problems = watch(page)
    sign_in(page, url)
    switch_language(page, lang)
    page.goto(f"{url}/queues/{Q}")
    page.fill("input[name=max_pending]", "2")
    page.select_option("select[name=when_full]", "raise")
    page.click("button[name=action][value=pending]")
    flash = page.inner_text(".flashes")
    assert ("最多 2 个任务等待" if lang == "zh" else "at most 2 tasks waiting") in flash
    assert store.queues.queue_config(Q) == {"max_pending": 2, "when_full": "raise"}
    page.goto(f"{url}/queues")
    badge = page.locator(f"tr:has(a[href='/queues/{Q}']) .state-full")
    assert badge.inner_text() == ("已满" if lang == "zh" else "full")
    if lang == "zh":
        assert CJK.search(page.inner_text(f"tr:has(a[href='/queues/{Q}'])"))
    assert not problems, problems
    context.close()
