"""What a batch costs its producer: the same enqueues one by one, in a ``transaction()``,
and in a ``batch()`` (docs/batches.md).

``python -m bench.batches [--n 5000] [--reps 3]`` starts a private redis-server and times
``n`` no-op enqueues each way, interleaved, medians of ``reps``: microseconds per task, on
the producer's clock (the write of the block included). ``make bench`` runs it;
docs/batches.md quotes the figures.
"""

from __future__ import annotations

import argparse
import statistics
import time

from ztq.core import App, transaction
from ztq.worker.embedded import RedisProcess

WAYS = ("one by one", "transaction", "batch")


def measure(n: int, reps: int) -> dict[str, float]:
    server = RedisProcess().start()
    try:
        app = App("bench", redis_url=server.url)

        @app.task(name="bench.noop")
        def noop(i: int) -> None: ...

        noop.delay(-1)  # connect and load the scripts outside the timing
        runs: dict[str, list[float]] = {w: [] for w in WAYS}
        for rep in range(reps):
            for way in WAYS:
                started = time.perf_counter()
                if way == "one by one":
                    for i in range(n):
                        noop.delay((rep, way, i))
                elif way == "transaction":
                    with transaction():
                        for i in range(n):
                            noop.delay((rep, way, i))
                else:
                    with app.batch(description="bench"):
                        for i in range(n):
                            noop.delay((rep, way, i))
                runs[way].append((time.perf_counter() - started) / n * 1e6)
        app.connections.close_all()
        return {k: statistics.median(v) for k, v in runs.items()}
    finally:
        server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    got = measure(args.n, args.reps)
    print(f"enqueue of {args.n} no-op tasks, median of {args.reps}, us per task:")
    for way in WAYS:
        print(f"  {way:12} {got[way]:7.1f}  ({got[way] / got['one by one']:.2f}x one by one)")
