"""A Redis Cluster failover under load: three masters with a replica each, a real worker
process draining six queues while a producer keeps enqueueing, one master SIGKILLed. The
replica takes over; the worker carries on without a restart. The test counts what every
operator asks afterwards — lost, ran twice, how long nothing ran — and prints it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import ztq.core as ztq
from tests import sample_tasks as t
from tests.redis_cluster import LocalCluster
from tests.worker.conftest import wait_for
from ztq.core.errors import ZtqError

pytestmark = [pytest.mark.slow, pytest.mark.cluster]
ROOT = Path(__file__).resolve().parents[2]
QUEUES = [f"fo{n}" for n in range(6)]


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    c = LocalCluster(replicas=1, node_timeout_ms=1000).start()
    try:
        yield c
    finally:
        c.stop()


def _cluster_ok(cluster: LocalCluster, killed: int) -> bool:
    for node in cluster.nodes:
        if node.port == killed or node.proc is None or node.proc.poll() is not None:
            continue
        c = redis.Redis(port=node.port, decode_responses=True, socket_timeout=1)
        try:
            return c.execute_command("CLUSTER INFO").get("cluster_state") == "ok"
        except redis.RedisError:
            return False
        finally:
            c.close()
    return False


def test_a_master_dies_under_load_and_the_worker_carries_on(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    ztq.connect(cluster.url)
    ran = tmp_path / "ran"
    log = open(tmp_path / "worker.log", "ab")  # noqa: SIM115 - closed below
    args = [sys.executable, "-m", "ztq.worker", "--redis", cluster.url, "--name", "fo-worker",
            "--import", "tests.sample_tasks", "--lease", "3", "--heartbeat", "0.5",
            "--grace", "2"]  # fmt: skip
    for q in QUEUES:
        args += ["--queue", f"{q}:2"]
    worker = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=log)

    acked: list[str] = []  # ids whose enqueue Redis confirmed
    stop = threading.Event()
    errors: Counter[str] = Counter()

    def produce() -> None:
        n = 0
        while not stop.is_set():
            q = QUEUES[n % len(QUEUES)]
            try:
                acked.append(t.record.enqueue((str(ran), f"{n}"), queue=q).id)
                n += 1
            except ZtqError as exc:  # the failover window: try the same call again
                errors[type(exc).__name__] += 1
                time.sleep(0.05)
            time.sleep(0.002)

    producer = threading.Thread(target=produce, daemon=True)
    seen: list[tuple[float, int]] = []  # (when, runs so far), sampled every 10 ms

    def runs() -> int:
        return len(ran.read_text().splitlines()) if ran.exists() else 0

    try:
        producer.start()
        wait_for(lambda: runs() > 200, timeout=30)
        # a master other than the one the URL names: a worker whose URL names the master
        # that dies exits (code 2, "cannot reach Redis"; seen once in CI when an earlier
        # failover test had made the URL's node a master of these queues) — a known fault,
        # not what this test measures (docs/scaling.md, "Cluster")
        seed = cluster.nodes[0].port
        keys = ztq.get_storage().keys
        masters = [cluster.master_of(keys.tasks(q)) for q in QUEUES]
        victim = next(m for m in masters if m.port != seed)
        assert victim.pid is not None
        os.kill(victim.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        while time.monotonic() - killed_at < 30:
            seen.append((time.monotonic(), runs()))
            if _cluster_ok(cluster, victim.port) and len(seen) > 50 and runs() > seen[0][1] + 200:
                break
            time.sleep(0.01)
        failover = time.monotonic() - killed_at
        assert _cluster_ok(cluster, victim.port), "the replica did not take over in 30 s"
        after_failover = len(acked)
        wait_for(lambda: len(acked) > after_failover + 300, timeout=30)
        stop.set()
        producer.join(10)
        assert worker.poll() is None, "the worker died in the failover"
        # everything acknowledged after the failover must run; before it, count the losses
        late = set(acked[after_failover:])
        values = lambda: Counter(ran.read_text().splitlines())  # noqa: E731
        wait_for(lambda: len(values()) >= len(set(acked)) - 50, timeout=60, every=0.2)
        time.sleep(1.0)  # the last in-flight runs land
        counts = values()
        acked_values = {str(n) for n in range(len(acked))}
        ran_values = set(counts)
        lost = acked_values - ran_values
        twice = sum(1 for v, c in counts.items() if c > 1)
        pause = max((b[0] - a[0] for a, b in zip(seen, seen[1:], strict=False)
                     if b[1] == a[1]), default=0.0)  # fmt: skip
        longest_still = 0.0
        start = None
        for when, count in seen:
            if start is None or count != start[1]:
                start = (when, count)
            longest_still = max(longest_still, when - start[0])
        print(f"\ncluster failover: replica promoted and serving {failover:.1f} s after the "
              f"SIGKILL; no task finished for {longest_still:.1f} s at most; "
              f"{len(acked)} enqueues confirmed, {len(lost)} lost, {twice} ran twice; "
              f"producer retries: {dict(errors)}")  # fmt: skip
        assert pause >= 0
        late_values = {str(n) for n in range(after_failover, len(acked))}
        assert late_values <= ran_values, "tasks enqueued after the failover did not all run"
        assert len(late) == len(late_values)
        assert len(lost) < 200  # only the replication window can lose confirmed enqueues
    finally:
        stop.set()
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(15)
            except subprocess.TimeoutExpired:
                worker.kill()
        log.close()
        ztq.disconnect_all()
