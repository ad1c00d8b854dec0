"""The channels page (频道): channels with their size in Redis, subscribers with their lag,
and the last broadcasts with how their runs went, in English and Chinese (WebTest)."""

from __future__ import annotations

import pytest
from webtest import TestApp

import ztq.core as ztq
from tests import sample_tasks as t
from ztq.core.engine.storage import Storage
from ztq.core.messaging.broadcast import listen_op, record_run


def arrange(store: Storage) -> ztq.BroadcastHandle:
    """A channel with a subscriber that keeps up and one that lags; a broadcast that one
    worker ran and another still owes; a channel nobody reads any more."""
    orders = ztq.channel("orders", cap=500)
    fast, slow = orders.subscribe("audit"), orders.subscribe("mailer")
    for i in range(7):
        orders.publish({"order": i})
    fast.ack(*fast.read(count=100))
    slow.read(count=2)  # read, not acknowledged: 2 pending, 5 unread
    ztq.channel("quiet").subscribe("gone")
    ztq.channel("quiet").unsubscribe("gone")
    for worker in ("web-1", "web-2"):
        store.call(*listen_op(store, "default", "join", worker, 60_000))
    h = t.noop.broadcast()
    record_run(store, "default", h.id, "web-1", "running")
    record_run(store, "default", h.id, "web-1", "done")
    return h


def rows(page: object, table: str) -> list[list[str]]:
    html = page.html  # type: ignore[attr-defined]
    return [
        [td.get_text(" ", strip=True) for td in tr.find_all("td")]
        for tr in html.select(f"table.{table} tbody tr")
    ]


@pytest.mark.slow
def test_the_page_shows_channels_subscribers_and_broadcasts(
    operator: TestApp, store: Storage
) -> None:
    arrange(store)
    page = operator.get("/channels")
    assert page.html.h1.get_text() == "Channels"
    channels = {r[0]: r for r in rows(page, "channels")}
    assert list(channels) == ["orders", "quiet"]
    name, subs, held, size, cap, published, dropped, _ = channels["orders"]
    assert (subs, held, cap, published, dropped) == ("2", "7", "500", "7", "0")
    assert size.endswith(("B", "KB")) and float(size.split()[0]) > 0
    assert channels["quiet"][1:3] == ["0", "0"]
    subscribers = rows(page, "subscribers")
    assert [r[:6] for r in subscribers] == [
        ["orders", "audit", "0", "0", "0", "1"],
        ["orders", "mailer", "7", "2", "5", "1"],
    ]
    [broadcast] = rows(page, "broadcasts")
    assert broadcast[:2] == ["default", "tests.sample_tasks.noop"]
    assert broadcast[3:] == ["2", "1", "0", "1", "0"]  # meant, ran, failed, waiting, lost
    assert 'aria-current="page"' in str(page.html.select_one('nav a[href="/channels"]'))


@pytest.mark.slow
def test_the_page_in_chinese_and_for_a_viewer(viewer: TestApp, store: Storage) -> None:
    arrange(store)
    viewer.set_cookie("ztq_lang", "zh")
    page = viewer.get("/channels")
    assert page.html.h1.get_text() == "频道"
    heads = [th.get_text() for th in page.html.select("table.subscribers th")]
    assert heads == ["频道", "订阅者", "积压", "未确认", "未读", "读取者", "订阅于"]
    assert "广播" in page.text and "mailer" in page.text


@pytest.mark.slow
def test_an_empty_redis_says_so(operator: TestApp) -> None:
    page = operator.get("/channels")
    assert "No channel yet" in page.text and "No subscriber." in page.text
    assert "No broadcast was sent to a known queue." in page.text
