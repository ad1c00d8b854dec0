"""The console counts exactly and never does more than it said (issue 36, points 1 to 4;
issue 35, point 5), at sizes above every window and cap it had: more than 500 errors in a
group (the grouped view's and the confirmation's window), more than 1,000 redone (the
follow set's old cap), more than the trash holds in one delete."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from webtest import TestApp

import ztq.core as ztq
from tests import sample_tasks as t
from tests.console import scenario
from tests.console.test_actions import follow_bulk
from ztq.core.engine.storage import Storage
from ztq.core.monitor.groups import group_key, kind_key
from ztq.worker.cli.commands import main

pytestmark = pytest.mark.slow  # sizes above every window and cap (thousands of tasks)

TB = """Traceback (most recent call last):
  File "/srv/app/mail.py", line {line}, in send
    raise SMTPError(message)
SMTPError: {message}
"""


def fail(
    store: Storage, n: int, message: str, *, line: int = 10, queue: str = "default", tag: str = ""
) -> list[str]:
    """``n`` failed tasks of one group (the SMTP error raised at ``line``); ``tag`` makes
    their arguments (and so their ids) new."""
    ids = [t.boom.prepare((f"{message} {tag}{line} {i}",)).with_options(queue=queue).enqueue().id
           for i in range(n)]  # fmt: skip
    leases = store.leases.fetch(queue, "w1", "x", 60_000, n)
    for lease in leases:
        tb = TB.format(line=line, message=message)
        store.leases.fail(queue, "w1", lease.id, lease.token, "boom", f"SMTPError: {message}", tb)
    return ids


def key(store: Storage, task_id: str, by: Any = group_key) -> str:
    rec = store.tasks.record("default", task_id)
    assert rec is not None
    return str(by(rec))


def redo_confirmed(
    operator: TestApp, store: Storage, n: int, meanwhile: Any
) -> tuple[list[str], str]:
    """A group of ``n`` errors, its redo confirmed, ``meanwhile(ids)`` run before the
    submit: (the group's ids, the text of the page the redo ends on)."""
    ids = fail(store, n, "down")
    g = key(store, ids[0])
    confirm = operator.get(f"/bulk/confirm?action=redo&source=errors&group={g}&next=/errors")
    assert f"Redo {n} failed tasks?" in confirm.text
    meanwhile(ids)
    last = follow_bulk(operator, confirm.forms["confirm"].submit())[1]
    return ids, text(last.follow().text)


def text(page: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))


def test_ztq_errors_groups_reads_the_consoles_exact_counts(
    operator: TestApp, store: Storage, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``ztq errors --groups`` and the grouped view show one number for one group, above
    the 500 newest errors the command used to group."""
    fail(store, 620, "down")
    fail(store, 30, "refused", line=99)  # the newest errors: another group
    grouped = operator.get("/errors/groups").text
    assert re.search(r"<strong>620</strong>", grouped) and "<strong>30</strong>" in grouped
    assert main(["errors", "--groups", "--json", "--redis", redis_url]) == 0
    groups = json.loads(capsys.readouterr().out)
    assert [(g["count"], g["message"]) for g in groups] == [
        (620, "SMTPError: down"),
        (30, "SMTPError: refused"),
    ]
    assert all(g["exact"] and g["queues"] == {"default": g["count"]} for g in groups)
    assert main(["errors", "--groups", "--redis", redis_url]) == 0
    shown = capsys.readouterr().out
    assert re.search(r"^\s*620\s+SMTPError: down\s.*default \(620\)", shown, re.M), shown
    # with a text filter the records are read: the newest --window that match, said so
    assert main(["errors", "--groups", "--grep", "down", "--window", "100",
                 "--redis", redis_url]) == 0  # fmt: skip
    out, err = capsys.readouterr()
    assert re.search(r"^\s*100\s+SMTPError: down", out, re.M) and "newest 100" in err


def test_a_group_of_more_than_500_reads_the_same_everywhere(
    operator: TestApp, store: Storage
) -> None:
    big = fail(store, 620, "down")
    fail(store, 30, "refused", line=99)  # the newest errors: another group
    g = key(store, big[0])
    overview = text(operator.get("/").text)
    assert "620" in overview and "The biggest 2 of 2 groups" in overview
    grouped = operator.get("/errors/groups").text
    assert "650 errors by error type and top frame: every error, counted exactly." in text(grouped)
    assert re.search(r"<strong>620</strong>", grouped) and "<strong>30</strong>" in grouped
    confirm = operator.get(f"/bulk/confirm?action=redo&source=errors&group={g}&next=/errors")
    assert "Redo 620 failed tasks?" in confirm.text and "620 tasks" in confirm.text
    listing = operator.get(f"/errors?group={g}").text
    assert "620 failed tasks" in text(listing)


def test_an_action_takes_no_more_than_it_confirmed_and_says_what_it_skipped(
    operator: TestApp, store: Storage
) -> None:
    late: list[str] = []

    def meanwhile(ids: list[str]) -> None:
        store.tasks.requeue("default", "error", ids[:7])  # redone meanwhile, elsewhere
        late.extend(fail(store, 40, "down", tag="late"))  # the group fails more

    _, page = redo_confirmed(operator, store, 550, meanwhile)
    assert "Redid 550 of the 550 tasks confirmed." not in page
    assert "Redid 543 tasks." in page or "Redid 550 tasks." in page
    # at most the 550 confirmed: of the group's 583 errors at the submit, 550 redone
    left = store.client.zcard(store.keys.errors("default"))
    assert left == 590 - 7 - 550 and all(ztq.ping(i) in ("queued", "error") for i in late)


def test_a_redo_short_of_its_confirmation_says_how_many_were_skipped_and_why(
    operator: TestApp, store: Storage
) -> None:
    _, page = redo_confirmed(
        operator, store, 520, lambda ids: store.tasks.requeue("default", "error", ids[:12])
    )
    assert "Redid 508 of the 520 tasks confirmed." in page
    assert "12 skipped: they were redone, deleted or restored meanwhile." in page


def test_a_delete_past_the_trash_says_what_goes_for_good_and_asks(
    operator: TestApp, store: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ztq.core.engine.parts import errors as error_part

    monkeypatch.setattr(error_part, "TRASH_BATCH_MAX", 100)  # the trash of one delete
    big = fail(store, 130, "down")
    g = key(store, big[0])
    url = f"/bulk/confirm?action=delete&source=errors&group={g}&next=/errors"
    confirm = operator.get(url)
    page = text(confirm.text)
    assert "Delete 130 failed tasks?" in page
    assert "100 of them go to the trash and can be restored" in page
    assert "30 cannot be kept and would be deleted for good" in page
    assert "you can restore them" not in page
    # not ticked: only what the trash keeps is deleted
    last = follow_bulk(operator, confirm.forms["confirm"].submit())[1]
    done = text(last.follow().text)
    assert "Deleted 100 of the 130 tasks confirmed." in done
    assert "100 can be restored; 0 deleted for good." in done
    assert "The trash is full: deleting for good was not confirmed." in done
    assert store.client.zcard(store.keys.errors("default")) == 30
    # ticked: what the trash cannot keep goes for good, and it says so
    fail(store, 120, "down", tag="more")
    confirm = operator.get(url)
    assert "Delete 150 failed tasks?" in confirm.text
    assert "50 cannot be kept and would be deleted for good" in text(confirm.text)
    form = confirm.forms["confirm"]
    form["forgood"] = "1"
    done = text(follow_bulk(operator, form.submit())[1].follow().text)
    assert "Deleted 150 tasks." in done and "100 can be restored; 50 deleted for good." in done
    assert store.client.zcard(store.keys.errors("default")) == 0


def test_the_whole_redo_is_followed_past_1000(operator: TestApp, store: Storage) -> None:
    ids = fail(store, 1100, "down")
    confirm = operator.get("/bulk/confirm?action=redo&source=errors&next=/errors")
    assert "Redo 1,100 failed tasks?" in confirm.text
    last = follow_bulk(operator, confirm.forms["confirm"].submit())[1]
    follow_url = last.location
    # 40 fail again, 60 are done, the rest wait
    leases = store.leases.fetch("default", "w1", "x", 60_000, 100)
    assert len(leases) == 100
    again = set()
    for n, lease in enumerate(leases):
        if n < 40:
            store.leases.fail(
                "default", "w1", lease.id, lease.token, "boom", "SMTPError: down", "tb"
            )
            again.add(lease.id)
        else:
            store.leases.ack(
                "default", "w1", [scenario.Finished(lease.id, lease.token, "boom", "1")]
            )
    page = operator.get(follow_url).text
    plain = text(page)
    assert "1,100 tasks put back" in plain
    counts = dict(re.findall(r'class="label">([^<]+)</span><span class="value">([\d,]+)<', page))
    assert counts == {"waiting": "1,000", "running": "0", "done": "60", "failed again": "40"}
    failed_again = operator.get(follow_url + "&state=error&limit=500").text
    shown = set(re.findall(r'href="/tasks/([0-9a-f]{32})', failed_again))
    assert shown == again  # exactly those, none of the done or waiting ones
    assert "The 40 that failed again" in text(failed_again)
    # paged: every task of the redo once
    seen: set[str] = set()
    url: str | None = follow_url + "&limit=500"
    while url:
        got = operator.get(url).text
        seen |= set(re.findall(r'href="/tasks/([0-9a-f]{32})', got))
        m = re.search(r'rel="next" href="([^"]+)"', got)
        url = m.group(1).replace("&amp;", "&") if m else None
    assert seen == set(ids)


def test_the_after_redo_page_says_a_pause_and_a_rate_limit(
    operator: TestApp, store: Storage
) -> None:
    fail(store, 30, "down")
    store.queues.pause("default")
    store.queues.configure("default", rate_limit="10/m")
    confirm = operator.get("/bulk/confirm?action=redo&source=errors&next=/errors")
    last = follow_bulk(operator, confirm.forms["confirm"].submit())[1]
    page = text(last.follow().text)
    assert "Paused: default." in page
    assert "Rate limit 10/m on default: its 30 waiting tasks take about 3m 00s to start." in page


def test_one_exception_from_two_lines_is_one_kind(operator: TestApp, store: Storage) -> None:
    a = fail(store, 7, "down", line=10)
    b = fail(store, 5, "down", line=20)
    assert key(store, a[0]) != key(store, b[0])
    k = key(store, a[0], kind_key)
    assert k == key(store, b[0], kind_key)
    page = operator.get("/errors/groups?by=kind").text
    assert "<strong>12</strong>" in page and "mail.py:10 in send × 7" in page
    assert "mail.py:20 in send × 5" in page
    confirm = operator.get(f"/bulk/confirm?action=redo&source=errors&kind={k}&next=/errors")
    assert "Redo 12 failed tasks?" in confirm.text
    last = follow_bulk(operator, confirm.forms["confirm"].submit())[1]
    assert "Redid 12 tasks." in last.follow().text
    assert all(ztq.ping(i) == "queued" for i in a + b)


def test_a_delete_over_queues_keeps_what_each_queue_s_trash_holds(
    operator: TestApp, store: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ztq.core.engine.parts import errors as error_part

    monkeypatch.setattr(error_part, "TRASH_BATCH_MAX", 50)
    fail(store, 60, "down", queue="alpha")
    fail(store, 60, "down", queue="beta")
    confirm = operator.get("/bulk/confirm?action=delete&source=errors&next=/errors")
    page = text(confirm.text)
    assert "Delete 120 failed tasks?" in page
    assert "100 of them go to the trash" in page and "20 cannot be kept" in page
    done = text(follow_bulk(operator, confirm.forms["confirm"].submit())[1].follow().text)
    assert "Deleted 100 of the 120 tasks confirmed." in done
    assert "100 can be restored; 0 deleted for good." in done
    for q in ("alpha", "beta"):
        assert store.client.zcard(store.keys.errors(q)) == 10
