"""A queue's rate limit in the console (WebTest): an operator sets, changes and lifts it on
the queue page (a viewer cannot, a form not accepted is refused with the accepted forms);
the page shows the rate and the ready tasks waiting on it, in English and Chinese; /metrics
has the gauge and the throttled fetches."""

from __future__ import annotations

import pytest
from webtest import TestApp

from tests import sample_tasks as t
from tests.console.conftest import post
from ztq.core.engine.storage import Storage

Q = "payments"


@pytest.mark.slow
def test_an_operator_sets_and_lifts_a_rate_limit_and_sees_what_waits_on_it(
    operator: TestApp, viewer: TestApp, store: Storage
) -> None:
    for i in range(5):
        t.add.enqueue((i, 0), queue=Q)
    r = post(operator, f"/queues/{Q}/state", {"action": "rate", "rate_limit": "1/h  burst 2"})
    assert "payments: at most 1/h burst 2 started, on all workers." in r.follow().text
    assert store.queues.queue_config(Q) == {"rate_limit": "1/h burst 2"}
    assert len(store.leases.fetch(Q, "w", "t", 60_000, 10)) == 2  # the burst
    store.leases.fetch(Q, "w2", "t", 60_000, 10)  # throttled: counted
    page = operator.get(f"/queues/{Q}")
    card = page.html.find("span", string="Rate limit 1/h burst 2").find_parent("div")
    assert card.find("span", class_="value").get_text() == "3"  # 3 ready, no token
    assert page.html.select_one("input[name=rate_limit]")["value"] == "1/h burst 2"
    zh = operator.get(f"/queues/{Q}", headers={"Accept-Language": "zh-CN"})
    assert "等待速率上限的就绪任务" in zh.text
    metrics = operator.get("/metrics").text
    assert 'ztq_queue_rate_held{queue="payments"} 3' in metrics
    assert 'ztq_fetch_throttled_total{queue="payments"} 1' in metrics
    for bad in ("20", "20/day", "0/s", "1/s burst 0"):
        r = post(operator, f"/queues/{Q}/state", {"action": "rate", "rate_limit": bad})
        assert "Rate limit: rate_limit must be 'N/s', 'N/m' or 'N/h'" in r.follow().html.get_text()
        assert store.queues.queue_config(Q) == {"rate_limit": "1/h burst 2"}
    form = {"action": "rate", "rate_limit": ""}
    r = post(viewer, f"/queues/{Q}/state", form, expect_errors=True)
    assert r.status_int == 403 and store.queues.queue_config(Q) == {"rate_limit": "1/h burst 2"}
    assert 'name="rate_limit"' not in viewer.get(f"/queues/{Q}").text
    r = post(operator, f"/queues/{Q}/state", form)
    assert "payments: no rate limit." in r.follow().text
    assert store.queues.queue_config(Q) == {}
    assert "Rate limit 1/h" not in operator.get(f"/queues/{Q}").text
