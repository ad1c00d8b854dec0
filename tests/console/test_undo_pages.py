"""Undo you can use (issue 36, point 6): the delete confirmation and the trash say what each
task is (task, arguments, error), the trash is searched on the server and paged (no script
needed), and Restore returns to the delete it came from."""

from __future__ import annotations

import pytest
from webtest import TestApp

import ztq.core as ztq
from tests import sample_tasks as t
from tests.console.conftest import post
from tests.console.test_actions import failed
from tests.console.test_trash import batch_of, delete
from ztq.core.engine.storage import Storage


def test_the_delete_confirmation_shows_task_arguments_and_error(
    operator: TestApp, store: Storage
) -> None:
    ids = failed(store, 2, "smtp refused")
    r = post(operator, "/errors/selected",
             [("action", "delete"), *(("task", f"default:{i}") for i in ids)])  # fmt: skip
    assert r.status_int == 200
    table = r.html.find("table", class_="selected-tasks")
    assert table is not None
    text = table.get_text(" ")
    assert "tests.sample_tasks.boom" in text and 'boom("smtp refused 0")' in text
    assert "ValueError: smtp refused 1" in text and all(i in text for i in ids)


@pytest.mark.slow
def test_the_trash_shows_arguments(operator: TestApp, store: Storage) -> None:
    ids = failed(store, 1, "quota")
    page = delete(operator, ids)
    text = page.html.find("table", class_="trash").get_text(" ")
    assert 'boom("quota 0")' in text and "ValueError: quota 0" in text


@pytest.mark.slow
def test_the_trash_is_searched_by_name_id_and_error_and_paged(
    operator: TestApp, store: Storage
) -> None:
    mail = failed(store, 70, "smtp down")
    other = failed(store, 3, "disk full", task=t.flaky)
    delete(operator, mail[:40])
    delete(operator, mail[40:] + other)
    # by error text, across both deletes, a page at a time with a plain link
    seen: set[str] = set()
    page = operator.get("/trash", {"q": "smtp down"})
    pages = 0
    while True:
        pages += 1
        rows = page.html.select("table.trash tbody tr")
        assert rows and all("smtp down" in row.get_text() for row in rows)
        seen.update(i for i in mail if i in page.text)
        link = page.html.find("a", rel="next")
        if link is None:
            break
        page = operator.get(link["href"])
    assert seen == set(mail) and pages >= 2
    assert not any(i in page.text for i in other)
    # by task name and by id
    by_name = operator.get("/trash", {"q": "flaky"})
    assert all(i in by_name.text for i in other) and not any(i in by_name.text for i in mail)
    by_id = operator.get("/trash", {"q": mail[3][:12]})
    assert mail[3] in by_id.text and len(by_id.html.select("table.trash tbody tr")) == 1
    assert "No deleted task matches" in operator.get("/trash", {"q": "nothing-like-it"}).text


@pytest.mark.slow
def test_restore_returns_to_the_delete_it_came_from(operator: TestApp, store: Storage) -> None:
    first = failed(store, 2, "one")
    batch = batch_of(delete(operator, first))
    delete(operator, failed(store, 2, "two"))
    # one task, restored from a search over every delete
    found = operator.get("/trash", {"q": first[0]})
    form = next(f for f in found.forms.values() if f.get("id", default=None) is not None)
    r = form.submit()
    assert r.status_int == 303 and r.location.endswith(f"/trash?batch={batch}&queue=default")
    r = r.follow()
    assert "Restored 1 task." in r.text and first[1] in r.text and first[0] not in r.text
    assert ztq.ping(first[0]) == "error"
