"""A page never fails whole because one stored entry is malformed (issue 36, point 7): each
list page is read with one entry another writer (or an older ztq) left malformed — wrong
JSON, missing fields, a batch id in another format — beside good ones; the page answers 200,
shows the good entries as usual and the bad one as unreadable."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from webtest import TestApp

import ztq.core as ztq
from tests import sample_tasks as t
from tests.console import scenario
from tests.console.test_actions import failed
from tests.console.test_trash import delete
from ztq.core.client.batch import Batch
from ztq.core.engine.storage import Storage
from ztq.core.monitor.bulk import new_batch

UNREADABLE = "unreadable"


def now_ms() -> int:
    return int(time.time() * 1000)


def plant_trash(store: Storage) -> str:
    """A good delete, a batch named in another format (an older console's), and entries of
    the good batch that are not ``at TAB record``."""
    good = failed(store, 2, "good one")
    store.errors.trash_errors("default", new_batch(), good)
    plant_odd_batch(store)
    return good[0]


def plant_odd_batch(store: Storage) -> None:
    k, c = store.keys, store.client
    c.hset(k.trash("default", "old-style-batch"), mapping={"x1": "not a number\t{", "x2": ""})
    c.zadd(k.trash_index("default"), {"old-style-batch": now_ms() + 3_600_000})


def plant_errors(store: Storage) -> str:
    k, c = store.keys, store.client
    good = failed(store, 1, "good one")
    c.hset(k.tasks("default"), mapping={"bad-json": "{not json\n{", "bad-list": "[1, 2]\n[]"})
    c.zadd(k.errors("default"), {"bad-json": now_ms(), "bad-list": now_ms(), "no-record": 1})
    return good[0]


def plant_history(store: Storage) -> str:
    k, c = store.keys, store.client
    good = t.add.delay(1, 2).id
    scenario.work(store)
    c.xadd(k.history("default"), {"id": "odd", "ended": "yesterday", "runtime_ms": "[1"})
    c.xadd(k.history("default"), {"nothing": "usual"})
    return good


def plant_batches(store: Storage) -> str:
    k, c = store.keys, store.client
    with Batch(description="good batch") as b:
        t.add.delay(1, 1)
    c.zadd(k.batches, {"other format!": now_ms(), "no-fields": now_ms() + 1})
    c.hset(k.batch("other format!"), mapping={"total": "many", "created": "today"})
    c.hset(k.batch("no-fields"), mapping={"description": "half a record"})
    return str(b.id)


def plant_workers(store: Storage) -> str:
    k, c = store.keys, store.client
    scenario.heartbeat(store, "good-worker")
    c.hset(k.workers, mapping={"bad-json": "{not json", "bad-list": "[1, 2]"})
    c.zadd(k.seen, {"bad-json": now_ms(), "bad-list": now_ms()})
    return "good-worker"


def plant_audit(store: Storage) -> str:
    from ztq.core.monitor.streams import write_audit

    k, c = store.keys, store.client
    write_audit(store, "ann", "redo", queue="default", count=3, detail="good entry")
    c.xadd(k.audit, {"at": "never", "count": "a few", "ids": "[not json"})
    c.xadd(k.audit, {"nothing": "usual"})
    return "good entry"


def plant_events(store: Storage) -> str:
    k, c = store.keys, store.client
    scenario.log(store, "start", "good-worker", "good event")
    c.xadd(k.events, {"at": "never", "kind": "start", "fields": "[not json"})
    c.xadd(k.events, {"nothing": "usual"})
    return "good event"


PAGES: dict[str, tuple[str, Callable[[Storage], str]]] = {
    "trash": ("/trash", plant_trash),
    "errors": ("/errors", plant_errors),
    "history": ("/history", plant_history),
    "batches": ("/batches", plant_batches),
    "workers": ("/workers", plant_workers),
    "audit": ("/audit", plant_audit),
    "events": ("/log", plant_events),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PAGES))
def test_a_malformed_entry_shows_as_unreadable_and_the_rest_as_usual(
    name: str, operator: TestApp, store: Storage
) -> None:
    url, plant = PAGES[name]
    good = plant(store)
    page = operator.get(url, status="*")
    assert page.status_int == 200, page.text[-2000:]
    assert good in page.text
    assert UNREADABLE in page.text


@pytest.mark.slow
def test_a_trash_batch_in_another_format_can_be_read_and_its_good_batch_restored(
    operator: TestApp, store: Storage
) -> None:
    ids = failed(store, 2, "gone wrong")
    page = delete(operator, ids)
    plant_odd_batch(store)
    trash = operator.get("/trash")
    assert all(i in trash.text for i in ids) and UNREADABLE in trash.text
    # the good delete is restored as usual; the odd one offers no restore (it would 404)
    forms = [f for f in trash.forms.values() if "Restore all" in f.text]
    assert [f["batch"].value for f in forms] == [page.request.params["batch"]]
    forms[0].submit().follow()
    assert [ztq.ping(i) for i in ids] == ["error", "error"]
