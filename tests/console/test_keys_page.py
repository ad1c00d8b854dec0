"""Keys on the console (WebTest): the queue page lists the busiest keys (waiting, running,
held by a limit or a pause) and the rest as one row; an operator pauses and resumes one key
(a CSRF-protected POST, audited; a viewer cannot); the task page and the JSON API show a
task's key; /metrics has per-key series for the top keys plus "other"."""

from __future__ import annotations

import pytest
from webtest import TestApp

from tests.console.conftest import post
from tests.key_tasks import Q, send_mail
from ztq.core.engine.storage import Storage


@pytest.mark.slow
def test_the_busiest_keys_and_a_key_paused_by_an_operator(
    operator: TestApp, viewer: TestApp, store: Storage
) -> None:
    for i in range(12):
        send_mail.delay("big", i)
    for key in [f"k{n:02d}" for n in range(12)]:
        send_mail.delay(key, 0)
    got = store.fetch(Q, "w", "t", 60_000, 4)  # in turn: big, k00, k01, k02
    assert len(got) == 4
    page = operator.get(f"/queues/{Q}")
    rows = page.html.select("h2 + div table.grid tbody tr")
    first = [td.get_text(" ", strip=True) for td in rows[0].find_all("td")][:4]
    assert first == ["big", "11", "1", "–"]  # the busiest first; not held by anything
    assert len(rows) == 11 and rows[-1].td.get_text() == "other keys"  # top 10 + the rest
    assert "10 keys with tasks waiting" in page.text  # 3 ran their only task
    ready = page.html.find("span", string="Ready").find_parent("div")
    assert ready.find("span", class_="value").get_text() == "20" and "20 by key" in ready.text
    r = post(
        viewer, f"/queues/{Q}/state", {"action": "key_pause", "key": "big"}, expect_errors=True
    )
    assert r.status_int == 403
    r = post(operator, f"/queues/{Q}/state", {"action": "key_pause", "key": "big"})
    assert "Paused key big of mailer" in r.follow().text
    assert all(
        store.record(Q, x.id).meta["key"] != "big" for x in store.fetch(Q, "w", "t", 60_000, 20)
    )
    page = operator.get(f"/queues/{Q}")
    big = page.html.find("code", string="big").find_parent("tr")
    assert "paused" in big.get_text() and big.find("button", value="key_resume")
    r = post(operator, f"/queues/{Q}/state", {"action": "key_resume", "key": "big"})
    assert "Resumed key big of mailer." in r.follow().text
    r = post(operator, f"/queues/{Q}/state", {"action": "key_pause", "key": "a\nb"})
    assert "Key: 1 to 128 characters" in r.follow().text
    zh = operator.get(f"/queues/{Q}", headers={"Accept-Language": "zh-CN"})
    assert "最忙的键" in zh.text


def test_the_task_page_the_api_and_metrics_show_keys(operator: TestApp, store: Storage) -> None:
    h = send_mail.delay("acme", 1)
    send_mail.delay("acme", 2)  # the busiest key
    for key in [f"k{n:02d}" for n in range(15)]:
        send_mail.delay(key, 0)
    page = operator.get(f"/tasks/{h.id}?queue={Q}")
    assert "acme" in page.html.get_text()
    api = operator.get(f"/api/tasks/{h.id}?queue={Q}").json
    assert api["key"] == "acme"
    metrics = operator.get("/metrics").text
    assert f'ztq_key_waiting{{queue="{Q}",key="acme"}} 2' in metrics
    lines = [x for x in metrics.splitlines() if x.startswith("ztq_key_waiting{")]
    assert len(lines) == 11  # the top 10 and "other"
    assert f'ztq_key_waiting{{queue="{Q}",key="other"}} 6' in metrics
