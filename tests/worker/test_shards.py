"""A worker serving a sharded queue: the config's ``shards=N``, fetching from every shard in
turn, waking for a task in any shard, shards learnt from producers, and burst mode."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from tests.worker.conftest import wait_for
from ztq.core.errors import ConfigError
from ztq.worker.cli.commands import _queue_flag
from ztq.worker.config import ThreadSpec, WorkerConfig, load_config, parse_queue_entry
from ztq.worker.worker import Worker

SHARDS = ["hot", "hot~1", "hot~2"]


def test_the_config_gives_a_queue_its_shards(tmp_path: Path) -> None:
    ini = tmp_path / "w.ini"
    ini.write_text("[queues]\nhot = 4 shards=3\nmail = 2\ncrawl = 50 async shards=2\n")
    cfg = load_config(ini)
    assert cfg.shards == {"hot": 3, "crawl": 2}
    assert [s.name for s in cfg.threads if s.queues == ("hot",)] == [f"hot-{i}" for i in range(4)]
    assert _queue_flag("hot:8:shards=3") == parse_queue_entry("hot", "8 shards=3")
    assert _queue_flag("hot:shards=3")[0].shards == 3
    for entry, why in (
        ("shards=0", "not a shard count"),
        ("2 shards=x", "not a shard count"),
        ("2 shards=65", "not a shard count"),
        ("a, b shards=2", "shards=N goes with a thread count"),
    ):
        with pytest.raises(ConfigError, match=why):
            parse_queue_entry("hot", entry)
    with pytest.raises(ConfigError, match="the form is"):
        _queue_flag("hot:2:thread:extra")


def test_a_worker_registers_the_shards_of_its_config(redis_url: str) -> None:
    storage = ztq.get_storage()
    cfg = WorkerConfig(imports=("tests.sample_tasks",),
                       threads=(ThreadSpec("cold-0", ("cold",), shards=4),))  # fmt: skip
    worker = Worker(cfg, storage)
    worker.setup()
    assert worker.shards["cold"] == ("cold", "cold~1", "cold~2", "cold~3")
    assert storage.queues.shards_of("cold") == ["cold", "cold~1", "cold~2", "cold~3"]


def test_one_thread_takes_from_every_shard_in_turn(redis_url: str, tmp_path: Path) -> None:
    storage = ztq.get_storage()
    marker = tmp_path / "order"
    shard_of = {n: t.spread.delay(n, str(marker)).queue for n in range(90)}
    worker = Worker(WorkerConfig(imports=("tests.sample_tasks",), prefetch=1), storage)
    assert worker.drain(["hot"]) == 90
    order = [int(line) for line in marker.read_text().split()]
    assert sorted(order) == list(range(90))
    first = [shard_of[n] for n in order[:9]]
    assert set(first) == set(SHARDS), first  # not one shard drained before the next
    assert [shard_of[n] for n in order[:3]] != [first[0]] * 3


@pytest.mark.slow
def test_an_idle_thread_wakes_for_a_task_in_any_shard(
    redis_url: str, start_worker: Callable[..., Worker], tmp_path: Path
) -> None:
    worker = start_worker({"hot": 1}, idle_wait=6.0)
    wait_for(lambda: worker.shards.get("hot") == tuple(SHARDS))
    for n in range(12):  # at least one task per shard (the ids are fixed by the arguments)
        time.sleep(0.3)  # the thread is idle, blocked on the wake lists
        h = t.spread.delay(n)
        started = time.monotonic()
        assert h.get(timeout=3) == n
        assert time.monotonic() - started < 1.0, f"{h.queue} woke the thread late"


def test_shards_a_producer_added_are_served_after_a_heartbeat(
    redis_url: str, start_worker: Callable[..., Worker]
) -> None:
    worker = start_worker({"wide": 1})  # no shards in its config
    assert worker.shards["wide"] == ("wide",)
    handles = [t.add.prepare((n, 0), queue="wide", shards=3).enqueue() for n in range(12)]
    assert {h.queue for h in handles} == {"wide", "wide~1", "wide~2"}
    for h in handles:
        assert h.get(timeout=5) == int(h.id and h.record().args[0])  # type: ignore[union-attr]
    assert worker.shards["wide"] == ("wide", "wide~1", "wide~2")


@pytest.mark.slow
def test_burst_mode_waits_for_every_shard(redis_url: str) -> None:
    storage = ztq.get_storage()
    handles = [t.spread.delay(n) for n in range(15)]
    # tasks due soon in the other shards only: a burst worker that looked at the first
    # shard alone would stop before they were due
    later = [h for h in (t.spread.enqueue((n,), delay=0.5) for n in range(100, 112))]
    for h in later:
        if h.queue == "hot":
            storage.tasks.remove("hot", [h.id])
    later = [h for h in later if h.queue != "hot"]
    assert {h.queue for h in later} == {"hot~1", "hot~2"}
    cfg = WorkerConfig(imports=("tests.sample_tasks",), burst=True, heartbeat=0.2, lease=2.0,
                       threads=(ThreadSpec("hot-0", ("hot",)),))  # fmt: skip
    worker = Worker(cfg, storage)
    worker.run()  # returns when every shard is empty
    assert all(h.state.value == "done" for h in handles + later)


def test_the_cli_shows_and_acts_on_a_sharded_queue_as_one(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.console import scenario
    from ztq.worker.cli.commands import main

    storage = ztq.get_storage()
    for n in range(30):
        t.spread.delay(n)
    for q in SHARDS:  # one task of each shard fails
        scenario.work(storage, q, fail=lambda p: "bad", limit=1)

    def run(*argv: str) -> str:
        assert main([*argv, "--redis", redis_url]) == 0
        return capsys.readouterr().out

    [row] = json.loads(run("info", "--json"))["queues"]
    assert (row["name"], row["shards"], row["pending"], row["errors"]) == ("hot", SHARDS, 27, 3)
    assert len(json.loads(run("errors", "--queue", "hot", "--json"))) == 3
    assert "3 of 3 error(s) back in hot" in run("redo", "hot", "--all")
    assert "30 task(s) deleted from hot ready" in run("queue", "purge", "hot", "--yes")
    assert sum(storage.queues.pending_count(q) for q in SHARDS) == 0
    run("queue", "pause", "hot")
    assert all(storage.queues.is_paused(q) for q in SHARDS)


def test_the_cli_sets_shows_and_lifts_a_running_limit(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from ztq.worker.cli.commands import main

    storage = ztq.get_storage()
    t.serial_write.delay("/dev/null", 1)

    def run(*argv: str) -> tuple[int, str]:
        code = main([*argv, "--redis", redis_url])
        out, err = capsys.readouterr()
        return code, out + err

    assert run("queue", "limit", "xapian", "--max-running", "2") == (
        0, "xapian: at most 2 running at once; no pending limit\n")  # fmt: skip
    assert storage.queues.queue_config("xapian") == {"max_running": 2}
    assert run("queue", "limit", "xapian")[1] == (
        "xapian: at most 2 running at once; no pending limit\n")  # fmt: skip
    code, out = run("queue", "limit", "xapian", "--max-running", "0")
    assert code != 0 and "from 1 to 10000, or none" in out
    assert run("queue", "limit", "xapian", "--max-running", "none")[1] == (
        "xapian: no running limit; no pending limit\n")  # fmt: skip
    assert run("queue", "limit", "xapian", "--max-pending", "100", "--when-full", "buffer") == (
        0, "xapian: no running limit; at most 100 waiting, then the overflow buffer\n")  # fmt: skip
    assert storage.queues.queue_config("xapian") == {"max_pending": 100, "when_full": "buffer"}
    code, out = run("queue", "limit", "xapian", "--max-pending", "x")
    assert code != 0 and "--max-pending must be a number from 1 to 100000000, or none" in out
    code, out = run("queue", "limit", "xapian", "--block-timeout", "0")
    assert code != 0 and "block_timeout must be seconds" in out
    assert run("queue", "limit", "xapian", "--max-pending", "none")[0] == 0
    assert storage.queues.queue_config("xapian") == {}
    t.spread.delay(1)
    code, out = run("queue", "limit", "hot", "--max-running", "1")
    assert code != 0 and "is sharded" in out


def test_a_run_in_a_shard_shows_its_progress_on_the_workers_page(
    redis_url: str, start_worker: Callable[..., Worker], tmp_path: Path
) -> None:
    from ztq.core.client.calls import TaskCall
    from ztq.core.engine import keys
    from ztq.core.monitor import overview

    worker = start_worker({"hot": 1})
    release = tmp_path / "release"
    task = "tests.sample_tasks.reports_then_waits"
    args = next(  # arguments whose id hashes to a shard other than the first
        a
        for a in ([str(release), f"page {n}", 40] for n in range(20))
        if keys.shard_for("hot", ztq.task_id_for("hot", task, a, {}), 3) != "hot"
    )
    h = TaskCall(task, tuple(args), queue="hot", shards=3).enqueue()
    assert h.queue != "hot"

    def shown() -> dict | None:
        rows = overview.workers(ztq.get_storage(), 30)
        runs = [c for r in rows if r["id"] == worker.id for c in r["current"] if c["id"] == h.id]
        return runs[0] if runs and runs[0]["progress"] else None

    run = wait_for(shown)
    assert run["queue"] == h.queue and run["progress"]["pct"] == 40
    release.write_text("go")
    assert h.get(timeout=10) == "released"
