"""The drain of a rate-limited queue against its limit (docs/queue-controls.md, "A rate
limit").

    python -m bench.rate_limit [--tasks 2000] [--rate 200/s] [--workers 2] [--threads 4]

Starts a private redis-server (killed by PID at the end), sets the queue's ``rate_limit``,
enqueues ``--tasks`` no-op tasks (not timed), starts ``--workers`` worker processes of
``--threads`` threads, and waits until every task is done. The starts come from the queue's
history (the lease times, Redis's clock): the measured rate is (starts - burst) over the
time from the first start to the last; the busiest 2 s window is checked against the
documented bound (2 x rate/s + burst). Also: the fetches the limit held back (the
``throttled`` counter) per task started, i.e. what sleeping until the next token costs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, spawn, stop

QUEUE = "paced"


def busiest(times: list[int], window_ms: int) -> int:
    """The most starts in any window of ``window_ms`` (closed), from sorted times."""
    top, lo = 0, 0
    for hi, t in enumerate(times):
        while t - times[lo] > window_ms:
            lo += 1
        top = max(top, hi - lo + 1)
    return top


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rate_limit")
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--rate", default="200/s")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args(argv)

    import ztq.core as ztq
    from ztq.core.client.calls import TaskCall
    from ztq.core.engine.queue_limits import Rate
    from ztq.worker.embedded import RedisProcess

    rate = Rate.parse(args.rate)
    server = RedisProcess().start()
    procs = []
    try:
        storage = ztq.connect(server.url)
        ztq.configure_queue(QUEUE, rate_limit=str(rate))
        for lo in range(0, args.tasks, 500):
            with ztq.transaction():
                for i in range(lo, min(args.tasks, lo + 500)):
                    TaskCall("bench.rate_tasks.call_api", (i,), queue=QUEUE).enqueue()
        logs = Path(tempfile.mkdtemp(prefix="ztq-bench-rate-"))
        cmd = [sys.executable, "-m", "ztq.worker", "--redis", server.url, "--import",
               "bench.rate_tasks", "--queue", f"{QUEUE}:{args.threads}", "--log-level",
               "warning"]  # fmt: skip
        procs = [spawn([*cmd, "--name", f"w{n}"], logs / f"w{n}.log") for n in range(args.workers)]
        history = storage.keys.history(QUEUE)
        deadline = time.monotonic() + 10 + 3 * args.tasks / rate.per_second
        while storage.client.xlen(history) < args.tasks and time.monotonic() < deadline:
            time.sleep(0.2)
        entries = storage.client.xrange(history, "-", "+")
        times = sorted(int(f["started"]) for _, f in entries)
        workers = {str(f["worker"]) for _, f in entries}
        throttled = int(storage.client.hget(storage.keys.totals(QUEUE), "throttled") or 0)
    finally:
        stop(procs)
        ztq.disconnect_all()
        server.cleanup()
    span = (times[-1] - times[0]) / 1000
    measured = (len(times) - rate.burst) / span
    top = busiest(times, 2000)
    print()
    print(f"## A rate-limited queue ({len(times):,} no-op tasks, `rate_limit=\"{rate}\"`, "
          f"{args.workers} worker processes x {args.threads} threads)")  # fmt: skip
    print()
    print("| limit (tasks/s) | measured (tasks/s) | of the limit | busiest 2 s | bound 2 s "
          "| workers that started tasks | throttled fetches per task |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    share = measured / rate.per_second
    print(f"| {rate.per_second:,.0f} | {measured:,.1f} | {share:.1%} | {top} | {rate.bound(2.0)} "
          f"| {len(workers)} | {throttled / len(times):.2f} |")  # fmt: skip
    print()
    print(f"(from the history's start times, Redis's clock; ran {span:.1f} s; repo {ROOT.name})")
    return 0 if top <= rate.bound(2.0) and len(times) == args.tasks else 1


if __name__ == "__main__":
    sys.exit(main())
