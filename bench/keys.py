"""Keyed tasks: fair turns at scale, and what a keyed fetch costs against a plain one
(docs/queue-controls.md, "Per-key limits and fair turns").

    python -m bench.keys [--keys 1000] [--per-key 100] [--tasks 20000]

Starts a private redis-server (killed by PID at the end) and drives the scripts through
``Storage`` from this process (no worker processes: what is measured is the scripts' order
and cost, not a fleet's scheduling).

1. **Turns.** ``--keys`` keys x ``--per-key`` tasks, enqueued key after key (the worst order
   for a FIFO queue: the last key's first task is the last but ``--per-key`` - 1). One
   executor drains them by fetches of 32, acking each batch with the next fetch's call; it
   notes how many tasks started before the first task of the last key, and when, against
   one round of keys (``--keys`` starts) and the whole drain.
2. **Cost.** ``--tasks`` tasks in a plain queue, the same number in a keyed queue (spread over
   ``--keys`` keys), fetched by batches of 1 and of 32 and acked: wall time and Redis CPU
   (``INFO cpu``) per task, side by side.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from bench.common import ROOT

BATCH = 32


def _enqueue(storage: Any, queue: str, items: list[tuple[str, str | None]]) -> None:
    """(id, key) pairs, 500 per script call."""
    from ztq.core.engine.queue_limits import keyed_level
    from ztq.core.engine.storage import EnqueueEntry

    payload = '["bench.noop",[]]'
    for lo in range(0, len(items), 500):
        entries = [EnqueueEntry(i, payload, keyed_level("normal", k, None, None) if k else "normal")
                   for i, k in items[lo:lo + 500]]  # fmt: skip
        storage.call(*storage.tasks.enqueue_op(queue, entries))


def _drain(
    storage: Any, queue: str, batch: int, watch: str = "", round_n: int = 0
) -> dict[str, Any]:
    """Fetch and ack until the queue is empty; with ``watch``, the position (tasks started
    before it) and time of the first task whose id starts with it; with ``round_n``, when
    that many tasks had started."""
    from ztq.core.engine.storage import Finished

    started = 0
    seen: dict[str, Any] = {}
    begin = time.perf_counter()
    while True:
        got = storage.leases.fetch(queue, "bench", "t", 600_000, batch)
        if not got:
            break
        if watch and "at" not in seen:
            for n, lease in enumerate(got):
                if lease.id.startswith(watch):
                    seen.update(at=started + n, seconds=time.perf_counter() - begin)
                    break
        started += len(got)
        storage.leases.ack(queue, "bench", [Finished(x.id, x.token, "bench.noop") for x in got],
                    result_ttl_ms=0)  # fmt: skip
        if round_n and "round" not in seen and started >= round_n:
            seen["round"] = time.perf_counter() - begin
    seen.update(total=started, seconds_all=time.perf_counter() - begin)
    return seen


def _cpu(storage: Any) -> float:
    info = storage.client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def _cost(storage: Any, queue: str, n: int, batch: int) -> tuple[float, float]:
    """µs per task of wall time and of Redis CPU, fetching by ``batch`` and acking."""
    cpu, t0 = _cpu(storage), time.perf_counter()
    done = _drain(storage, queue, batch)["total"]
    wall, used = time.perf_counter() - t0, _cpu(storage) - cpu
    assert done == n, (done, n)
    return wall / n * 1e6, used / n * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.keys")
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--per-key", type=int, default=100)
    parser.add_argument("--tasks", type=int, default=20000)
    args = parser.parse_args(argv)

    import ztq.core as ztq
    from ztq.worker.embedded import RedisProcess

    server = RedisProcess().start()
    try:
        storage = ztq.connect(server.url)
        # 1. turns: key after key, the last key's first task against one round of keys
        items = [(f"k{k:05d}-{n:05d}", f"k{k:05d}") for k in range(args.keys)
                 for n in range(args.per_key)]  # fmt: skip
        _enqueue(storage, "turns", items)
        last = f"k{args.keys - 1:05d}-"
        turns = _drain(storage, "turns", BATCH, watch=last, round_n=args.keys)
        # 2. cost: the same tasks plain and keyed, by batches of 1 and 32
        rows = []
        for batch in (1, BATCH):
            plain = [(f"p{batch}-{i}", None) for i in range(args.tasks)]
            keyed = [(f"q{batch}-{i}", f"k{i % args.keys}") for i in range(args.tasks)]
            _enqueue(storage, f"plain{batch}", plain)
            _enqueue(storage, f"keyed{batch}", keyed)
            rows.append((batch, _cost(storage, f"plain{batch}", args.tasks, batch),
                         _cost(storage, f"keyed{batch}", args.tasks, batch)))  # fmt: skip
    finally:
        ztq.disconnect_all()
        server.cleanup()
    total = args.keys * args.per_key
    print()
    print(f"## Fair turns: {args.keys:,} keys x {args.per_key} tasks, enqueued key after key "
          f"(one executor, fetches of {BATCH})")  # fmt: skip
    print()
    print("| | tasks started before it | time |")
    print("|---|---|---|")
    print(f"| first task of the last key | {turns['at']:,} | {turns['seconds'] * 1000:,.0f} ms |")
    print(f"| one round of keys ({args.keys:,} starts) | {args.keys:,} | "
          f"{turns['round'] * 1000:,.0f} ms |")  # fmt: skip
    print(f"| FIFO order (a plain queue) would start it after | {total - args.per_key:,} | |")
    print(f"| the whole drain | {turns['total']:,} | {turns['seconds_all'] * 1000:,.0f} ms |")
    print()
    print(f"## A keyed fetch against a plain one ({args.tasks:,} tasks each, keyed over "
          f"{args.keys:,} keys; fetch + ack, µs per task)")  # fmt: skip
    print()
    print("| batch | plain: wall | plain: Redis CPU | keyed: wall | keyed: Redis CPU |")
    print("|---|---|---|---|---|")
    for batch, (pw, pc), (kw, kc) in rows:
        print(f"| {batch} | {pw:.1f} | {pc:.1f} | {kw:.1f} | {kc:.1f} |")
    print()
    print(f"(one private redis-server, this machine; repo {ROOT.name})")
    return 0 if turns["at"] <= args.keys and turns["total"] == total else 1


if __name__ == "__main__":
    sys.exit(main())
