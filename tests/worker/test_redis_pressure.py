"""A worker process under a Redis that refuses it (issue 28): full (``maxmemory`` reached,
policy ``noeviction``), and restarted with and without its data.

Each test has its own redis-server (its memory limit and restarts touch no other test),
counts task runs in a file, waits on events (log lines, ``/readyz``, Redis state polled
with a deadline) and kills what it started by PID.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import ztq.core as ztq
from tests import sample_tasks as t
from tests.worker.conftest import wait_for
from tests.worker.test_health import free_port, get
from ztq.worker.embedded import RedisProcess

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
FULL = "Redis is full"


def shown(section: str) -> list[str]:
    """The lines of the ``text`` blocks of a section (``### title``) of docs/deploy.md:
    what it says an operator sees."""
    text = (ROOT / "docs" / "deploy.md").read_text("utf-8")
    part = text.split(f"\n### {section}\n", 1)[1].split("\n### ", 1)[0]
    blocks = re.findall(r"^```text\n(.*?)^```", part, re.S | re.M)
    return [line for block in blocks for line in block.splitlines()]


def shape(line: str) -> str:
    """A line with what differs between runs (times, run ids, numbers, ports) blanked."""
    line = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}", "T", line)
    line = re.sub(r"\b[0-9a-f]{8}\b", "H", line)
    return re.sub(r"\d+(\.\d+)?", "N", line)


def as_documented(section: str, *seen: str) -> None:
    """Every line docs/deploy.md shows for ``section`` is one of the lines ``seen``."""
    real = {shape(line) for text in seen for line in text.splitlines()}
    for line in shown(section):
        assert shape(line) in real, f"docs/deploy.md, {section}: {line}"


@pytest.fixture
def server() -> Iterator[RedisProcess]:
    """A private redis-server (with an append-only file: a restart keeps its data), set as
    the tests' default connection."""
    with RedisProcess(appendonly=True) as srv:
        ztq.connect(srv.url)
        try:
            yield srv
        finally:
            ztq.disconnect_all()


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., tuple[subprocess.Popen[bytes], str]]]:
    """Start ``ztq worker`` processes with a health port: (process, its base URL)."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(url: str, name: str, queue: str = "default:2") -> tuple[subprocess.Popen[bytes], str]:
        port = free_port()
        log = open(tmp_path / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        args = [sys.executable, "-m", "ztq.worker", "--redis", url, "--name", name,
                "--import", "tests.sample_tasks", "--queue", queue, "--lease", "6",
                "--heartbeat", "0.2", "--grace", "2",
                "--health-port", f"127.0.0.1:{port}"]  # fmt: skip
        procs.append(subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=log))
        return procs[-1], f"http://127.0.0.1:{port}"

    yield start
    for proc in procs:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)


def fill(srv: RedisProcess) -> Callable[[], None]:
    """Fill Redis with 3 MB, then give it a ``maxmemory`` 1 MB below what it uses (policy
    ``noeviction``): every write that may grow it is refused with OOM until what frees
    the memory (returned) runs."""
    client = redis.Redis(port=srv.port)
    client.config_set("maxmemory-policy", "noeviction")
    fillers = [f"filler:{i}" for i in range(30)]
    for key in fillers:
        client.set(key, "x" * 100_000)
    client.config_set("maxmemory", int(client.info("memory")["used_memory"]) - 1_000_000)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        client.set("one more", "x")
    return lambda: client.delete(*fillers) and None


def alive(proc: subprocess.Popen[bytes], check: Callable[[], object]) -> Callable[[], object]:
    """``check``, failing at once if the worker process exited meanwhile."""

    def probe() -> object:
        assert proc.poll() is None, f"the worker exited with {proc.returncode}"
        return check()

    return probe


def test_a_full_redis_does_not_stop_a_worker_and_no_task_runs_twice(
    server: RedisProcess, spawn, tmp_path: Path
) -> None:
    marker, release, out = tmp_path / "held", tmp_path / "release", tmp_path / "runs"
    held = [t.held.delay(str(marker), f"{release}{i}") for i in range(2)]
    quick = [t.slow_record.delay(str(out), str(i), 0.01) for i in range(30)]
    proc, base = spawn(server.url, "full")
    log = tmp_path / "full.log"
    wait_for(alive(proc, lambda: marker.exists() and marker.read_text().count("start") == 2))
    free = fill(server)  # both threads hold a task whose lease must be renewed
    wait_for(alive(proc, lambda: FULL in log.read_text()), timeout=15)
    status, reason = get(base + "/readyz")
    assert status == 503 and "OOM command not allowed when used memory" in reason, reason
    for i in range(2):  # the held runs end while Redis is full; their acks wait or go through
        Path(f"{release}{i}").touch()
    wait_for(alive(proc, lambda: marker.read_text().count("end") == 2), timeout=15)
    free()
    wait_for(alive(proc, lambda: all(ztq.ping(h) == "done" for h in held + quick)), timeout=30)
    wait_for(alive(proc, lambda: get(base + "/readyz")[0] == 200), timeout=15)
    runs = Counter(out.read_text().split())
    assert runs == Counter({str(i): 1 for i in range(30)})  # each quick task ran once
    assert marker.read_text().count("start") == 2  # the held ones too
    text = log.read_text()
    assert "Traceback" not in text and "ack of" not in text, text
    # once per thread and kind, not once per call
    assert 1 <= text.count(FULL) <= 6, text
    assert "takes its calls again" in text
    metrics = get(base + "/metrics")[1]
    assert 'ztq_worker_redis_errors_total{kind="oom"}' in metrics
    assert proc.poll() is None
    as_documented("A full Redis", text, reason)


def test_a_worker_starts_under_a_full_redis_and_serves_its_queues(
    server: RedisProcess, spawn, tmp_path: Path
) -> None:
    out = tmp_path / "runs"
    handles = [t.slow_record.delay(str(out), str(i), 0.01) for i in range(10)]
    free = fill(server)
    proc, base = spawn(server.url, "late", "default:1")
    log = tmp_path / "late.log"
    wait_for(alive(proc, lambda: "registering the worker: Redis is full" in log.read_text()),
             timeout=20)  # fmt: skip
    reason = wait_for(alive(proc, lambda: "OOM command" in get(base + "/readyz")[1] and
                            get(base + "/readyz")[1]), timeout=15)  # fmt: skip
    assert "registering the worker" in str(reason)
    free()
    wait_for(alive(proc, lambda: all(ztq.ping(h) == "done" for h in handles)), timeout=30)
    wait_for(alive(proc, lambda: get(base + "/readyz")[0] == 200), timeout=15)
    storage = ztq.get_storage()
    events = [e[1] for e in storage.client.xrange(storage.keys.events)]
    assert [e["kind"] for e in events if e["worker"] == "late"] == ["start"]
    assert Counter(out.read_text().split()) == Counter({str(i): 1 for i in range(10)})


def test_a_redis_back_without_its_data_is_reported_once(
    server: RedisProcess, spawn, tmp_path: Path
) -> None:
    marker, release = tmp_path / "held", tmp_path / "release"
    held = t.held.delay(str(marker), str(release))
    proc, base = spawn(server.url, "watcher", "default:1")
    log = tmp_path / "watcher.log"
    wait_for(alive(proc, lambda: marker.exists()), timeout=15)
    server.restart()  # with its data (the append-only file): not a loss
    wait_for(alive(proc, lambda: "restarted or failed over with its data" in log.read_text()),
             timeout=15)  # fmt: skip
    assert ztq.ping(held) == "running"
    server.stop()  # and now without it
    shutil.rmtree(Path(server.dir) / "appendonlydir")
    server.start()
    wait_for(alive(proc, lambda: "back without its data" in log.read_text()), timeout=15)
    release.touch()  # the run ends; its ack is refused: the task went with the data
    wait_for(alive(proc, lambda: marker.read_text().count("end") == 1))
    later = t.add.delay(40, 2)  # the worker carries on
    wait_for(alive(proc, lambda: ztq.ping(later) == "done"), timeout=15)
    text = log.read_text()
    errors = [line for line in text.splitlines() if " ERROR " in line]
    assert len(errors) == 1, text
    assert "held 1 task lease (default 1)" in errors[0]
    assert "refused" not in text and "lost the lease" not in text, text
    assert "ztq_worker_redis_data_lost_total 1" in get(base + "/metrics")[1]
    storage = ztq.get_storage()

    def kinds() -> list[str]:
        events = [e[1] for e in storage.client.xrange(storage.keys.events)]
        return [e["kind"] for e in events if e["worker"] == "watcher"]

    # the event is a deferred write of the worker's main loop: it may come after the task
    wait_for(alive(proc, lambda: kinds() != []), timeout=15)
    assert kinds() == ["redis"]
    assert "default" in storage.queues.names()  # registered again
    as_documented("Redis restarted empty", text)


def test_acks_redis_ran_before_it_refused_the_fetch_are_not_sent_again(
    server: RedisProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """An ack and the next fetch go in one round trip; when Redis runs the ack and refuses
    the fetch (here: a key of the fetched queue of the wrong type), the ack is done and
    must not be kept and sent again: it would be refused the second time."""
    from ztq.core.engine.fault_kinds import kind
    from ztq.worker.config import ThreadSpec, WorkerConfig
    from ztq.worker.executors.threads import Executor
    from ztq.worker.worker import Worker

    cfg = WorkerConfig(redis_url=server.url, name="inline", imports=("tests.sample_tasks",),
                       idle_wait=0.2, threads=(ThreadSpec("t", ("other",), "thread"),))  # fmt: skip
    storage = ztq.get_storage()
    worker = Worker(cfg, storage)
    ex = Executor(worker, cfg.threads[0])
    h = t.add.delay(1, 2)
    [lease] = storage.leases.fetch("default", worker.id, "t", 5000, 1)
    ex.hold([lease])
    ex.run_one(lease)  # its ack waits for the next round trip
    broken = storage.keys.ready_all("other")[0]
    storage.client.set(broken, "not a list")
    with pytest.raises(Exception) as refused:
        ex.flush()  # the ack, then the fetch of "other"
    assert kind(refused.value) == "error"
    assert ztq.ping(h) == "done"  # the ack went through...
    assert not ex.pending.acks and not ex.held  # ...and is not kept to be sent again
    storage.client.delete(broken)
    with caplog.at_level("WARNING"):
        assert ex.flush() == []
    assert "refused" not in caplog.text


def test_every_kind_of_redis_fault_is_told_apart(server: RedisProcess) -> None:
    """The faults a worker's threads live through, as real redis-py errors of a real Redis
    (LOADING as redis-py raises it: a restart of a large data set is too slow to stage
    here), each with its kind and Redis's own words: what the logs and /readyz show."""
    import threading

    from ztq.core.engine.fault_kinds import KINDS, describe, kind
    from ztq.core.errors import ConnectionFailed

    client = redis.Redis(port=server.port, socket_timeout=0.3)

    def error(call: Callable[[], object]) -> Exception | None:
        try:
            call()
        except Exception as exc:
            return exc
        return None

    def busy() -> Exception:
        client.config_set("busy-reply-threshold", 10)
        script = redis.Redis(port=server.port)
        looping = threading.Thread(
            target=error, args=(lambda: script.eval("while true do end", 0),)
        )
        looping.start()
        try:
            got = wait_for(lambda: (e := error(client.ping)) and "BUSY" in str(e) and e)
            return got  # type: ignore[no-any-return]
        finally:
            wait_for(lambda: not error(client.script_kill))
            looping.join(5)

    def stalled() -> Exception | None:
        other = redis.Redis(port=server.port)
        other.client_pause(5000, all=False)  # writes wait; CLIENT UNPAUSE does not
        try:
            no_retry = Retry(NoBackoff(), 0)
            impatient = redis.Redis(port=server.port, socket_timeout=0.2, retry=no_retry)
            return error(lambda: impatient.set("x", "1"))
        finally:
            other.client_unpause()

    free = fill(server)
    faults = [("oom", error(lambda: client.set("x", "1")))]
    free()
    client.config_set("maxmemory", 0)
    faults.append(("busy", busy()))
    client.replicaof("127.0.0.1", free_port())
    faults.append(("readonly", error(lambda: client.set("x", "1"))))
    client.replicaof("NO", "ONE")
    faults += [
        ("timeout", stalled()),
        ("connection", error(lambda: redis.Redis(port=free_port(), retry=None).ping())),
        ("connection", ConnectionFailed("cannot reach Redis at redis://127.0.0.1:1/0")),
        ("loading", redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory")),
    ]
    said = {}
    for expected, exc in faults:
        assert kind(exc) == expected, (expected, exc)
        said[expected] = describe(exc)
    assert said["oom"] == "redis: OOM command not allowed when used memory > 'maxmemory'"
    assert said["busy"].startswith("redis: BUSY Redis is busy running a script")
    assert said["readonly"] == "redis: READONLY You can't write against a read only replica"
    assert said["timeout"] == "redis: Timeout reading from socket"
    assert said["loading"] == "redis: LOADING Redis is loading the dataset in memory"
    assert kind(ValueError("a bug")) is None
    threads = ("maintenance", "scheduler", "executor default-0")
    logged = "\n".join(f"2026-11-26 13:40:02,118 WARNING ztq.worker {where}: {KINDS[k]} "
                       f"({said[k]}); retrying with backoff, keeping the tasks it holds"
                       for k in said for where in threads)  # fmt: skip
    for section in (
        "A read-only replica (a failover)",
        "Redis loading its data",
        "A stalled Redis",
    ):
        as_documented(section, logged)
