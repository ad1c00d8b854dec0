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
    got = store.leases.fetch(Q, "w", "t", 60_000, 4)  # in turn: big, k00, k01, k02
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
        store.tasks.record(Q, x.id).meta["key"] != "big"
        for x in store.leases.fetch(Q, "w", "t", 60_000, 20)
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


def test_a_keys_waiting_tasks_are_listed_in_its_turns_order(
    operator: TestApp, store: Storage
) -> None:
    """The plain pending list never holds keyed tasks: it says how many wait by key, each key
    of the busiest table links to its own list (its order: high first, then FIFO), paged; a
    deleted task's entry is skipped; a key that cannot be one is a 404 that says why."""
    from tests.key_tasks import plain

    plain.delay(1)
    ids = [send_mail.delay("acme", n).id for n in range(30)]
    urgent = send_mail.enqueue(("acme", 99), priority="high").id
    send_mail.delay("other", 1)
    assert store.tasks.remove(Q, [ids[0]]) == (1, 1)  # its entry stays in the list, dead
    page = operator.get(f"/queues/{Q}")
    listed = [a.get_text() for a in page.html.select("#selection td a")]
    assert len(listed) == 1  # the plain task alone
    assert "31 more tasks wait in their keys' turns" in page.html.get_text()
    link = page.html.find("code", string="acme").find_parent("a")["href"]
    assert link == f"/queues/{Q}?key=acme#pending"
    first = operator.get(f"/queues/{Q}?key=acme&limit=20")
    assert "Pending tasks of key acme" in first.text
    rows = [a["href"].split("/")[-1].split("?")[0] for a in first.html.select("#selection td a")]
    assert rows == [urgent, *ids[1:20]]
    assert "1–20 of 30" in first.text
    more = first.html.find("a", rel="next")["href"]
    rest = operator.get(more)
    rows2 = [a["href"].split("/")[-1].split("?")[0] for a in rest.html.select("#selection td a")]
    assert rows2 == ids[20:]
    none = operator.get(f"/queues/{Q}?key=nobody")
    assert "No task of key nobody is waiting." in none.text
    bad = operator.get(f"/queues/{Q}?key=a%0Ab", expect_errors=True)
    assert bad.status_int == 404 and "1 to 128 characters" in bad.text
    zh = operator.get(f"/queues/{Q}?key=acme", headers={"Accept-Language": "zh-CN"})
    assert "键 acme 的待处理任务" in zh.text


def test_an_operator_sets_the_running_limit_per_key(
    operator: TestApp, viewer: TestApp, store: Storage
) -> None:
    """The queue page's per-key running limit (``key_concurrency``): shown once the queue has
    keyed tasks, checked like the queue's, audited; a fetch then takes one task per key."""
    from tests.key_tasks import plain

    plain.delay(1)
    page = operator.get(f"/queues/{Q}")
    assert not page.html.find("input", attrs={"name": "key_concurrency"})  # no keyed task yet
    for n in range(3):
        send_mail.delay("acme", n)
        send_mail.delay("beta", n)
    page = operator.get(f"/queues/{Q}")
    assert page.html.find("input", attrs={"name": "key_concurrency"})
    form = {"action": "key_limit", "key_concurrency": "1"}
    assert post(viewer, f"/queues/{Q}/state", form, expect_errors=True).status_int == 403
    r = post(operator, f"/queues/{Q}/state", form).follow()
    assert "mailer: at most 1 tasks of one key at once, on all workers." in r.text
    assert store.queues.queue_limits(Q).key_concurrency == 1
    assert r.html.find("input", attrs={"name": "key_concurrency"})["value"] == "1"
    leases = store.leases.fetch(Q, "w", "t", 60_000, 10)
    keys = [store.tasks.record(Q, x.id).meta.get("key") for x in leases]  # type: ignore[union-attr]
    assert sorted(map(str, keys)) == ["None", "acme", "beta"]
    for bad in ("0", "x", "10001"):
        r = post(operator, f"/queues/{Q}/state", {"action": "key_limit", "key_concurrency": bad})
        assert "Running limit: a number from 1 to 10000" in r.follow().text
    assert store.queues.queue_limits(Q).key_concurrency == 1
    r = post(operator, f"/queues/{Q}/state", {"action": "key_limit", "key_concurrency": ""})
    assert "mailer: no running limit per key." in r.follow().text
    assert store.queues.queue_limits(Q).key_concurrency is None
    audit = operator.get("/audit").text
    assert "key_concurrency=1" in audit and "key_concurrency=none" in audit


def test_an_operator_weighs_a_key(operator: TestApp, viewer: TestApp, store: Storage) -> None:
    """The busiest keys' *Weight*: shown per key, set by an operator (audited), checked."""
    for n in range(4):
        send_mail.delay("gold", n)
        send_mail.delay("tin", n)
    form = {"action": "key_weight", "key": "gold", "weight": "3"}
    assert post(viewer, f"/queues/{Q}/state", form, expect_errors=True).status_int == 403
    r = post(operator, f"/queues/{Q}/state", form).follow()
    assert "Key gold of mailer takes 3 tasks a turn." in r.text
    gold = r.html.find("code", string="gold").find_parent("tr")
    assert gold.find("input", attrs={"name": "weight"})["value"] == "3"
    assert [k.weight for k in store.key_turns.key_totals(Q).top if k.key == "gold"] == [3]
    for bad in ({"weight": "0"}, {"weight": "x"}, {"weight": "1001"}, {"key": ""}):
        r = post(operator, f"/queues/{Q}/state", form | bad)
        assert "Weight: a key (1 to 128 characters) and a number from 1 to 1000." in r.follow().text
    assert [k.weight for k in store.key_turns.key_totals(Q).top if k.key == "gold"] == [3]
    assert "key=gold weight=3" in operator.get("/audit").text
