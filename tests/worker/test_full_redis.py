"""A full Redis at the default settings (issue 35): ``maxmemory`` reached, policy
``noeviction``, the default ``result_ttl``. Tasks already queued drain to 0 and none runs
twice: fetch, ack, fail and renew go through as their allow-oom twins, finished records and
history yield (docs/design.md, "A full Redis"). Also the relay's warnings during an outage.

Each test has its own redis-server, counts runs in a file (an append per run), waits on
events with a deadline and kills what it started by PID.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import ztq.core as ztq
from tests import sample_tasks as t
from tests.worker.conftest import wait_for
from tests.worker.test_redis_pressure import alive, fill, spawn  # noqa: F401 - a fixture
from ztq.core.engine.parts.leases import Finished
from ztq.core.errors import RedisFull
from ztq.worker.embedded import RedisProcess

pytestmark = pytest.mark.slow
PAD = "x" * 3000  # ~3 KB per task: a 20 MB Redis fills with a few thousand


@pytest.fixture
def server() -> Iterator[RedisProcess]:
    with RedisProcess() as srv:
        ztq.connect(srv.url)
        try:
            yield srv
        finally:
            ztq.disconnect_all()


def test_a_full_redis_drains_to_zero_at_the_defaults_and_nothing_runs_twice(
    server: RedisProcess,
    spawn,  # noqa: F811 - the fixture of test_redis_pressure
    tmp_path: Path,
) -> None:
    client = redis.Redis(port=server.port)
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", 20 * 1024 * 1024)
    out = tmp_path / "runs"
    accepted = 0
    with pytest.raises(RedisFull):  # the producer is told, clearly
        for i in range(100_000):
            t.slow_record.delay(str(out), f"{i}-{PAD}", 0)
            accepted += 1
    assert accepted > 3000
    proc, _ = spawn(server.url, "drain", "default:4")
    storage = ztq.get_storage()
    k = storage.keys

    def drained() -> bool:
        c = storage.client
        return (sum(c.llen(key) for key in k.ready_all("default")) == 0
                and c.zcard(k.running("default")) == 0)  # fmt: skip

    wait_for(alive(proc, drained), timeout=45)
    runs = Counter(line.split("-")[0] for line in out.read_text().splitlines())
    assert len(runs) == accepted and max(runs.values()) == 1, runs.most_common(3)
    totals = client.hgetall(k.totals("default"))
    assert int(totals.get(b"oom_compact", 0)) > 0  # what yielded is counted
    log = (tmp_path / "drain.log").read_text()
    assert log.count("Redis reached maxmemory") == 1 and "lost" not in log, log[-3000:]


def test_a_renewal_and_an_ack_go_through_under_oom_with_one_warning(
    server: RedisProcess, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ztq.core.engine.fault_kinds import FULL

    monkeypatch.setattr(FULL, "quiet", 0.0)  # the episode ends at the first plain call
    storage = ztq.get_storage()
    handles = [t.add.delay(i, 1) for i in range(30)]
    leases = storage.leases.fetch("default", "w1", "t", 5000, 30)
    assert len(leases) == 30
    free = fill(server)
    before = storage.client.zscore(storage.keys.running("default"), leases[0].id)
    with caplog.at_level(logging.INFO, logger="ztq.redis"):
        assert (
            storage.leases.renew("default", "w1", 60_000, [(x.id, x.token) for x in leases]) == []
        )
        assert storage.client.zscore(storage.keys.running("default"), leases[0].id) > before
        for lease in leases:  # one ack per task: one WARNING for them all
            assert (
                storage.leases.ack("default", "w1", [Finished(lease.id, lease.token, "add", "2")])
                == []
            )
        free()
        t.add.delay(100, 1)
        [later] = storage.leases.fetch("default", "w1", "t", 5000, 1)
        storage.leases.ack("default", "w1", [Finished(later.id, later.token, "add", "101")])
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "Redis reached maxmemory" in warnings[0].getMessage()
    assert any("takes writes under maxmemory again" in r.getMessage() for r in caplog.records)
    assert all(ztq.ping(h) == "done" for h in handles)  # a compact record: state kept
    assert "101" in storage.client.hget(storage.keys.tasks("default"), later.id)  # kept whole
    compact = storage.client.hget(storage.keys.tasks("default"), leases[0].id)
    assert '"compact":2' in compact and compact.endswith('\n["add",[]]'), compact
    totals = storage.client.hgetall(storage.keys.totals("default"))
    assert int(totals["oom_compact"]) == 30
    assert storage.client.xlen(storage.keys.history("default")) == 1  # only the later one


def test_a_failed_relay_during_an_outage_is_told_once(
    server: RedisProcess, caplog: pytest.LogCaptureFixture
) -> None:
    from ztq.worker.executors.batches import relay_ends
    from ztq.worker.resilience.faults import Faults

    storage = ztq.get_storage()
    faults = Faults(lease=6)
    server.stop()
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            relay_ends(storage, None, ["default"], faults)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and warnings[0].exc_info is None, caplog.text
    assert "Traceback" not in caplog.text
    server.start()
    with caplog.at_level(logging.WARNING):
        wait_for(lambda: relay_ends(storage, None, ["default"], faults) or not faults.active)
    assert "takes its calls again" in caplog.text


def test_ztq_info_shows_memory_what_yielded_and_warns_from_80_percent(
    server: RedisProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from ztq.worker.cli.commands import main

    storage = ztq.get_storage()
    handles = [t.add.delay(i, 1) for i in range(10)]
    leases = storage.leases.fetch("default", "w1", "t", 5000, 10)
    free = fill(server)  # ~97% of maxmemory: past the warning's 80%
    storage.leases.ack("default", "w1", [Finished(x.id, x.token, "add", "2") for x in leases])
    assert main(["info", "--redis", server.url, "--json"]) == 0
    memory = json.loads(capsys.readouterr().out)["redis_memory"]
    assert memory["maxmemory"] and memory["used"] >= 0.8 * memory["maxmemory"]
    assert memory["oom_compact"] == 10 and "shorten result_ttl" in memory["warning"]
    assert main(["info", "--redis", server.url]) == 0
    out = capsys.readouterr().out
    assert "Redis memory: " in out and "maxmemory (" in out
    assert "under maxmemory 10 ends kept compact" in out and "shorten result_ttl" in out
    free()
    assert all(ztq.ping(h) == "done" for h in handles)


def test_compact_finished_keeps_state_and_times_not_the_result(server: RedisProcess) -> None:
    """The ``compact_finished`` setting (docs/settings.md): the ack keeps the compact record
    it keeps under maxmemory, outside any episode, and writes its history entry as ever."""
    storage = ztq.get_storage()
    h = t.add.delay(1, 2)
    [lease] = storage.leases.fetch("default", "w1", "t", 5000, 1)
    op = storage.leases.ack_op("default", "w1", [Finished(lease.id, lease.token, "add", "3")],
                        compact=True)  # fmt: skip
    assert storage.call(*op) == []
    raw = storage.client.hget(storage.keys.tasks("default"), lease.id)
    assert raw.endswith('\n["add",[]]') and '"compact":1' in raw and '"result"' not in raw
    assert ztq.ping(h) == "done" and storage.client.xlen(storage.keys.history("default")) == 1
    assert not storage.client.hget(storage.keys.totals("default"), "oom_compact")


def test_a_worker_with_compact_finished_keeps_no_result(
    start_worker,
    redis_url: str,  # the session's Redis, as the start_worker fixture's
) -> None:
    start_worker({"default": 1}, compact_finished=True)
    h = t.add.delay(40, 2)
    wait_for(lambda: ztq.ping(h) == "done")
    storage = ztq.get_storage()
    raw = storage.client.hget(storage.keys.tasks("default"), h.id)
    assert '"compact":1' in raw and '"result"' not in raw


def test_the_pipeline_and_asyncio_paths_send_the_twins_too(server: RedisProcess) -> None:
    """Packed calls are the sync worker's path; a pipeline (``WAIT``, a Cluster) and the
    asyncio pool's ``acall_many`` send refused calls again as their twins by EVAL."""
    import asyncio

    import redis.asyncio as aredis

    from ztq.core.engine.aio.scripts import acall_many
    from ztq.core.engine.scripts import SCRIPTS

    storage = ztq.get_storage()
    handles = [t.add.delay(i, 1) for i in range(3)]
    a, b, c = storage.leases.fetch("default", "w1", "t", 5000, 3)
    free = fill(server)
    ack = storage.leases.ack_op
    replies = SCRIPTS.call_many(storage.client, [ack("default", "w1", [Finished(a.id, a.token,
                                "add", "1")])], wait=(0, 10))  # fmt: skip
    assert replies[0] == []
    aclient = aredis.Redis.from_url(server.url, decode_responses=True)

    async def both() -> list:
        try:
            renew = ("renew", [storage.keys.tasks("default"), storage.keys.running("default")],
                     ["w1", 60_000, c.id, c.token])  # fmt: skip
            return await acall_many(
                aclient, [ack("default", "w1", [Finished(b.id, b.token, "add", "2")]), renew]
            )
        finally:
            await aclient.aclose()

    assert asyncio.run(both()) == [[], []]
    free()
    assert [ztq.ping(h) for h in handles] == ["done", "done", "running"]
