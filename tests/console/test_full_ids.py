"""Issue 36, point 6: lists show task ids whole. The error list cut them to 18 characters:
an operator could neither read nor copy one."""

from __future__ import annotations

import pytest
from webtest import TestApp

from tests import sample_tasks as t
from tests.console import scenario
from ztq.core.engine.storage import Storage


@pytest.mark.slow
def test_the_error_list_shows_every_task_id_whole(operator: TestApp, store: Storage) -> None:
    long_id = "order-" + "7" * 122  # the longest id a task may have (128 characters)
    ids = [t.boom.enqueue(("disk",), id=long_id).id, t.boom.delay("full").id]
    scenario.work(store, fail=lambda p: p["args"][0])
    assert len(ids[0]) == 128 and len(ids[1]) == 32
    for url in ("/errors", "/errors?queue=default", "/errors?q=disk"):
        page = operator.get(url).html
        for cell in page.select("table.errors tbody td[data-label=Task]"):
            shown = cell.select_one("[data-copy]")
            assert shown is not None and shown["data-copy"] in ids, (url, cell)
            assert shown.get_text() == shown["data-copy"], url  # all of it, and copied whole
