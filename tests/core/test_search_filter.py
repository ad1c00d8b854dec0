"""The console's search rules records out from their raw text before parsing them
(core/monitor/filters.py, TaskMatch.may_match): the same rows as matching every parsed record, for
texts in any field, of records written by ztq's scripts, by other clients and broken ones."""

from __future__ import annotations

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from ztq.core.engine import record
from ztq.core.engine.record import TaskRecord
from ztq.core.engine.storage import Storage
from ztq.core.monitor import queues as monitor
from ztq.core.monitor.filters import TaskMatch, task_matcher

Q = "default"


def records(storage: Storage) -> list[str]:
    """Records of every shape the search meets; returns their ids."""
    ids = [t.add.delay(i, 1000 + i).id for i in range(40)]
    ids.append(t.send.delay('Ünïcode/path "quoted" text').id)
    failing = t.add.delay(7, 7007)
    leases = storage.leases.fetch(Q, "w", "t", 60_000, 100)
    lease = next(x for x in leases if x.id == failing.id)
    storage.leases.fail(Q, "w", lease.id, lease.token, "tests.sample_tasks.add",
                 'IOError: disk /dev/sda1 is "full"', "Traceback: at /srv/app.py")  # fmt: skip
    ids += [t.add.delay(i, 2000 + i).id for i in range(5)]  # queued
    ids += [t.add.enqueue((i, 3000 + i), delay=600).id for i in range(2)]  # delayed
    tasks = storage.keys.tasks(Q)
    others = {  # written by hand: another client's escapes and spacing, broken records
        "e" * 32: '{"state":"error","error":"\\u0041lpha failed"}\n'
        '{"task":"other.client","args":["caf\\u00e9 Zebra"]}',
        "b" * 32: "not a record at all: zebra",
        "c" * 32: '{"state":"queued"}\n{"args":[1]}',
        "d" * 32: '{"state": "done", "result": 1}\n{"task":"other.spaced","args":[]}',
        "f" * 32: '{"progress":{"state":"done"},"state":"running"}\n{"task":"x.nested"}',
        "a" * 32: '{"state":"queued"\n{"task":"x.broken.meta","args":[]}',
        "9" * 32: '{"state":"bogus"}\n{"task":"x.bogus","args":[]}',
        "8" * 32: '{"progress":{"state":"done"}}\n{"task":"x.stateless","args":[]}',
        "7" * 32: '1795546918890\n{"task":"x.bare.meta.long.payload","args":["zebra"]}',
        "6" * 32: '\u0661\u0662\n["x.arabic.digits",[]]',  # not a bare time: no JSON meta
    }
    storage.client.hset(tasks, mapping=others)
    return [*ids, failing.id, *others]


NEEDLES = [
    "add", "ADD", "sample_tasks.send", "1007", "[3,", "disk", "/dev/sda1", 'is "full"',
    "sda1", "srv", "app.py", "ünïcode", "CAFÉ", "café", "zebra", "other.client", "?",
    "payloaderror", "no meta line", "alpha", "eeee", "bbbbbbbb", "queued", "error", "nothing-here",
    "1 0",
]  # fmt: skip


# the servers of the storage fixture, memory:// marked slow here: fakeredis's Lua takes a
# second or two over these records, left out of make test-fast (make test runs it)
ON_EVERY_ENGINE = pytest.mark.parametrize(
    "storage",
    [
        "redis",
        "redis-6.2",
        pytest.param("cluster", marks=pytest.mark.cluster),
        pytest.param("memory", marks=pytest.mark.slow),
    ],
    indirect=True,
)


@ON_EVERY_ENGINE
@pytest.mark.parametrize("needle", NEEDLES)
def test_a_search_finds_what_matching_every_record_finds(storage: Storage, needle: str) -> None:
    records(storage)
    fast = task_matcher(text=needle)
    assert isinstance(fast, TaskMatch)

    def parsed_only(rec: TaskRecord) -> bool:  # no may_match: every record parsed
        return fast(rec)

    def found(match: monitor.Match) -> list[str]:
        return sorted(r.id for r in monitor.search(storage, match, limit=500).rows)

    assert found(fast) == found(parsed_only)
    task_only = task_matcher(task=needle)
    assert task_only is not None
    assert found(task_only) == found(lambda rec: task_only(rec))


@ON_EVERY_ENGINE
@pytest.mark.parametrize("state", ["queued", "delayed", "running", "error", "done", "none"])
def test_a_search_by_state_finds_what_matching_every_record_finds(
    storage: Storage, state: str
) -> None:
    records(storage)
    for text in ("", "add", "x."):
        fast = task_matcher(text=text, state=state)
        assert fast is not None

        def parsed_only(rec: TaskRecord, fast: TaskMatch = fast) -> bool:
            return fast(rec)

        rows = [sorted(r.id for r in monitor.search(storage, m, limit=500).rows)
                for m in (fast, parsed_only)]  # fmt: skip
        assert rows[0] == rows[1], (state, text)


def test_a_search_parses_only_the_records_that_may_match(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = ztq.get_storage()
    ids = records(storage)
    parsed: list[str] = []
    real = TaskRecord.from_raw

    def counted(queue: str, task_id: str, raw: str) -> TaskRecord:
        parsed.append(task_id)
        return real(queue, task_id, raw)

    monkeypatch.setattr(record.TaskRecord, "from_raw", staticmethod(counted))
    match = task_matcher(text="1007")
    assert match is not None
    rows = monitor.search(storage, match, limit=500).rows
    escaped = "e" * 32  # a \\u escape in its raw text: left to the parsed match
    assert [r.id for r in rows] == [ids[7]] and sorted(parsed) == sorted([ids[7], escaped])
