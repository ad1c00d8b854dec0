"""What durable enqueue costs: one-by-one enqueues with ``replicas=0`` and ``replicas=1``.

``python -m bench.durable_enqueue [--n 3000] [--reps 3]`` starts a master and a replica
(local redis-server processes, asynchronous replication as in production) and times the
two side by side, interleaved, medians of ``reps``. It prints microseconds per enqueue and
the ratio; docs/scaling.md quotes the figures.
"""

from __future__ import annotations

import argparse
import statistics
import time

import redis

from ztq.core import App
from ztq.worker.embedded import RedisProcess


def _sync(replica: RedisProcess) -> None:
    client = redis.Redis(port=replica.port, decode_responses=True)
    deadline = time.monotonic() + 15
    while client.info("replication").get("master_link_status") != "up":
        if time.monotonic() > deadline:
            raise RuntimeError("the replica did not sync")
        time.sleep(0.05)
    client.close()


def measure(n: int, reps: int) -> dict[int, float]:
    master = RedisProcess().start()
    replica = RedisProcess(extra=["--replicaof", "127.0.0.1", str(master.port)]).start()
    try:
        _sync(replica)
        app = App("bench", redis_url=master.url)

        @app.task(name="bench.noop")
        def noop(i: int) -> None: ...

        noop.delay(-1)  # connect and load the scripts outside the timing
        runs: dict[int, list[float]] = {0: [], 1: []}
        for rep in range(reps):
            for replicas in (0, 1):
                started = time.perf_counter()
                for i in range(n):
                    noop.enqueue((rep, replicas, i), replicas=replicas)
                runs[replicas].append((time.perf_counter() - started) / n * 1e6)
        app.connections.close_all()
        return {k: statistics.median(v) for k, v in runs.items()}
    finally:
        replica.stop()
        master.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    got = measure(args.n, args.reps)
    print(f"enqueue one by one, {args.n} tasks, median of {args.reps}:")
    print(f"  replicas=0: {got[0]:7.1f} us per enqueue")
    print(f"  replicas=1: {got[1]:7.1f} us per enqueue ({got[1] / got[0]:.2f}x)")
