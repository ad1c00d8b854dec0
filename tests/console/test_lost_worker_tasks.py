"""A lost worker's last tasks are shown as what they are now (issue 36, point 7): read from
their records, not from the worker's last heartbeat — re-run elsewhere, back in the queue,
done, failed — and their runtime stops at the worker's last report instead of growing."""

from __future__ import annotations

import json
import time

import pytest
from webtest import TestApp

from tests import sample_tasks as t
from tests.console import scenario
from ztq.core.engine.storage import Finished, Storage


@pytest.mark.slow
def test_a_lost_workers_tasks_show_their_state_now(operator: TestApp, store: Storage) -> None:
    ids = [t.add.delay(i, i).id for i in range(5)]
    leases = {lease.id: lease for lease in store.leases.fetch("default", "w-lost", "t", 60_000, 5)}
    leased, elsewhere, queued, done, failed = ids
    store.leases.release("default", "w-lost", [(i, leases[i].token) for i in (elsewhere, queued)])
    assert [lease.id for lease in store.leases.fetch("default", "w-2", "t", 60_000, 1)] == [
        elsewhere
    ]
    store.leases.ack("default", "w-lost",
                     [Finished(done, leases[done].token, "tests.sample_tasks.add",
                               json.dumps(2))])  # fmt: skip
    store.leases.fail("default", "w-lost", failed, leases[failed].token, "tests.sample_tasks.add",
               "ValueError: no", "")  # fmt: skip
    started = time.time() - 600
    current = {f"t{n}": {"queue": "default", "id": i, "task": "tests.sample_tasks.add",
                         "started": started} for n, i in enumerate(ids)}  # fmt: skip
    scenario.heartbeat(store, "w-lost", threads={"default": 5}, current=current)
    scenario.make_lost(store, "w-lost", 300)
    for url in ("/workers/w-lost", "/workers?status=lost"):
        page = operator.get(url)
        rows = {i: row.get_text(" ") for row in page.html.select("tr, .thread")
                for i in ids if i in row.get_text() and len(row.get_text()) < 2000}  # fmt: skip
        assert "still leased here" in rows[leased], url
        assert "running again on w-2" in rows[elsewhere], url
        assert "back in its queue" in rows[queued], url
        assert "done" in rows[done] and "failed" in rows[failed], url
    # the runtime stops at the last report (5 min after the start), it does not grow
    page = operator.get("/workers/w-lost")
    assert "5m" in page.text and "10m" not in page.text
