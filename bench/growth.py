"""How cost grows (issue 12): the per-task and per-page costs with a big queue behind them.

``python -m bench.growth [--queued 0,100000,1000000] [--errors 10000,100000] [--reps 5]
[--json OUT]`` starts a private redis-server and, for each scenario (a queue already holding
0, 100k or 1M ready tasks, or 10k or 100k failed ones), fills it in ztq's stored format
(``bench.console.fill_queue``: pipelined raw writes, seconds for a million) and times:

- enqueue: ``fn.delay`` one by one through an App (µs per task, one round trip each);
- fetch + ack: a worker's loop through ``ztq.core.engine.storage`` (the acks of a batch of 10
  travel with the next fetch, one round trip per batch; µs per task);
- the console: every GET route of ``bench.console`` in-process through WebTest (server time,
  median of ``reps``): the slowest page and the queue's page ``/queues/default``;
- deleting one queued task at the head, the middle and the tail of the ready list
  (``storage.tasks.remove``, what ``handle.cancel`` and the console's delete run) and moving one
  to the head (``first=True``, the console's "run first"): wall µs and the Redis-side µs
  of the script (``INFO commandstats``), median of 20;
- purging: ``storage.tasks.remove(purge=...)`` in batches of 1,000 (µs per task).

Each must stay flat: O(1) per task, O(page) per page. ``run()`` returns the numbers,
``section()`` renders them as markdown (bench/run.py can include it); run alone, the
module prints the section.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import redis

from bench.common import median, percentile
from bench.console import _id, fill_queue, time_routes
from ztq.core.engine.record import payload_list

Q = "default"  # the queue the console routes of bench.console look at
ENQUEUES = 2000  # per round of the enqueue measure
FETCHED = 2000  # per round of the fetch + ack measure
BATCH = 10  # tasks per fetch, as a busy worker's grown batch
ROUNDS = 3
DELETES = 20  # per position
PURGED = 10_000
PAYLOAD = json.dumps(payload_list("app.mail.send", [0, "user0@example.org"]), separators=(",", ":"))


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": median(values), "p10": percentile(values, 10), "p90": percentile(values, 90)}


def _redis_us(client: redis.Redis, fn: Callable[[], Any]) -> tuple[float, float]:
    """Wall µs of ``fn()`` and the µs Redis spent in the scripts it ran (commandstats)."""
    client.config_resetstat()
    t0 = time.perf_counter()
    fn()
    wall = (time.perf_counter() - t0) * 1e6
    stats = client.info("commandstats")
    spent = sum(
        float(v["usec"])
        for k, v in stats.items()
        if k in ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_fcall")  # enqueue is a function
    )
    return wall, spent


def _scenario(url: str, name: str, queued: int, errors: int, reps: int) -> dict[str, Any]:
    from bench.console import beat
    from ztq.core import App
    from ztq.core.engine.storage import EnqueueEntry, Finished

    client = redis.Redis.from_url(url, decode_responses=True)
    client.flushdb()
    started = time.monotonic()
    pipe = client.pipeline(transaction=False)
    fill_queue(pipe, Q, queued, errors, int(time.time() * 1000))
    pipe.execute()
    del pipe
    # The fill's million commands leave Python's collector with a backlog that a console
    # process never has: measured here, /workers took 20.6 ms after a 1M fill, 15.1 ms
    # once collected (13.7 ms with nothing queued).
    gc.collect()
    beat(client, 100)
    out: dict[str, Any] = {"name": name, "queued": queued, "errors": errors}
    out["fill_s"] = time.monotonic() - started
    print(f"growth: {name}: filled in {out['fill_s']:.0f} s", flush=True)

    # the console first, on the data as filled
    rows = [r for r in time_routes(url, reps, queue=Q) if r.ms]
    out["routes"] = {_route(r.path): _spread(r.ms) for r in rows}
    slowest = max(rows, key=lambda r: r.median)
    out["slowest"] = {"path": _route(slowest.path), **_spread(slowest.ms)}
    out["queue_page"] = out["routes"][f"/queues/{Q}"]

    app = App("growth", redis_url=url)

    @app.task(queue=Q, name="app.mail.send")
    def send(i: int, to: str) -> None: ...

    storage = app.connections.get()
    send.delay(-1, "warm-up")  # scripts loaded, queue known
    if queued > 10 * DELETES:  # before the measures below take tasks off the head
        for what in ("delete", "first"):
            skip = 0 if what == "delete" else 5 * DELETES  # the ones deleted are not moved
            at = {"head": skip, "middle": queued // 2 + skip, "tail": queued - 1 - skip}
            out[what] = {}
            for pos, index in at.items():
                walls, spent = [], []
                for j in range(DELETES):
                    tid = _id(Q, index - j if pos == "tail" else index + j)
                    if what == "delete":
                        w, s = _redis_us(client, partial(storage.tasks.remove, Q, [tid]))
                    else:
                        entry = [EnqueueEntry(tid, PAYLOAD, first=True)]
                        w, s = _redis_us(
                            client, partial(storage.call, *storage.tasks.enqueue_op(Q, entry))
                        )
                    walls.append(w)
                    spent.append(s)
                out[what][pos] = {"wall": _spread(walls), "redis": _spread(spent)}

    per_round = []
    for r in range(ROUNDS):
        t0 = time.perf_counter()
        for i in range(ENQUEUES):
            send.delay(r * ENQUEUES + i, f"user{i}@example.org")
        per_round.append((time.perf_counter() - t0) * 1e6 / ENQUEUES)
    out["enqueue_us"] = _spread(per_round)

    per_round = []
    for _ in range(ROUNDS):
        done: list[Finished] = []
        taken = 0
        t0 = time.perf_counter()
        while taken < FETCHED:
            ops = [storage.leases.ack_op(Q, "growth-w", done)] if done else []
            ops.append(storage.leases.fetch_op(Q, "growth-w", "default-0", 60_000, BATCH))
            leased = storage.leases.parse_fetch(Q, storage.execute(ops)[-1])
            done = [Finished(x.id, x.token, "app.mail.send", "") for x in leased]
            taken += len(leased)
            if not leased:
                break
        if done:
            storage.leases.ack(Q, "growth-w", done)
        per_round.append((time.perf_counter() - t0) * 1e6 / max(taken, 1))
    out["fetch_ack_us"] = _spread(per_round)

    length = client.llen(storage.keys.ready(Q, "normal"))
    purge = "ready" if length > PURGED else ("errors" if errors >= PURGED else "")
    if purge:
        t0 = time.perf_counter()
        removed = 0
        while removed < PURGED:
            removed += storage.tasks.remove(Q, purge=purge, limit=1000)[0]
        out["purge_us"] = (time.perf_counter() - t0) * 1e6 / removed
        out["purged"] = purge
    storage.close()
    client.close()
    return out


def run(
    queued: Sequence[int] = (0, 100_000, 1_000_000),
    errors: Sequence[int] = (10_000, 100_000),
    reps: int = 5,
    url: str | None = None,
) -> dict[str, Any]:
    """Measure every scenario; ``url`` names a Redis database to use (flushed before each
    scenario), else a private redis-server is started and stopped."""
    server = None
    if url is None:
        from ztq.worker.embedded import RedisProcess

        server = RedisProcess().start()
        url = server.url
    load = os.getloadavg()
    try:
        scenarios = [(_label(n), n, 0) for n in queued]
        scenarios += [(f"{_label(e)} errors", 0, e) for e in errors]
        results = [_scenario(url, name, n, e, reps) for name, n, e in scenarios]
        client = redis.Redis.from_url(url)
        version = str(client.info("server")["redis_version"])
        client.flushdb()
        client.close()
    finally:
        if server is not None:
            server.cleanup()
    return {
        "scenarios": results,
        "redis": version,
        "load": [*load, *os.getloadavg()],
        "cpus": os.cpu_count(),
    }


def _route(path: str) -> str:
    """A route without the task id it names (``/tasks/<id>``), to compare scenarios."""
    parts = path.split("/")
    if len(parts) > 2 and parts[-2] == "tasks":
        parts[-1] = "<id>" + ("?" + parts[-1].split("?", 1)[1] if "?" in parts[-1] else "")
    return "/".join(parts)


def _label(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1000 and n % 1000 == 0:
        return f"{n // 1000}k"
    return str(n)


def _cell(s: dict[str, float] | None, digits: int = 0) -> str:
    if not s:
        return "—"
    return f"{s['median']:.{digits}f} ({s['p10']:.{digits}f}–{s['p90']:.{digits}f})"


def section(results: dict[str, Any]) -> str:
    """The results as markdown: the growth table, ratios of the biggest queue to the empty
    one, and the delete table."""
    sc = results["scenarios"]
    base = next((s for s in sc if s["queued"] == 0 and s["errors"] == 0), sc[0])
    big = max((s for s in sc if s["errors"] == 0), key=lambda s: s["queued"])
    lines = [
        "## How cost grows",
        "",
        f"`python -m bench.growth`: one queue already holding the tasks named (ready, or "
        f"failed), written in ztq's stored format; Redis {results['redis']}, "
        f"{results['cpus']} CPUs, load {results['load'][0]:.2f} at the start and "
        f"{results['load'][3]:.2f} at the end (the machine is shared: the spreads are p10–p90).",
        "",
        "| measure | " + " | ".join(s["name"] for s in sc) + f" | {big['name']} / {base['name']} |",
        "|---|" + "---|" * (len(sc) + 1),
    ]

    def row(label: str, get: Callable[[dict[str, Any]], dict[str, float] | None], d: int) -> None:
        cells = [_cell(get(s), d) for s in sc]
        a, b = get(big), get(base)
        ratio = f"{a['median'] / b['median']:.2f}" if a and b and b["median"] else "—"
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {ratio} |")

    row("enqueue, µs per task", lambda s: s["enqueue_us"], 0)
    row("fetch + ack, µs per task", lambda s: s["fetch_ack_us"], 0)
    row("console: /queues/default, ms", lambda s: s["queue_page"], 1)
    row("console: slowest page, ms", lambda s: s["slowest"], 1)
    same = big["slowest"]["path"]  # the big queue's slowest page, on the empty queue
    at_base = base.get("routes", {}).get(same)
    ratio = f"{big['slowest']['median'] / at_base['median']:.2f}" if at_base else "—"
    lines.append(
        "| slowest page | "
        + " | ".join(f"`{s['slowest']['path']}`" for s in sc)
        + f" | {ratio} (`{same}` on both) |"
    )
    lines.append(
        "| purge, µs per task | "
        + " | ".join(f"{s['purge_us']:.1f} ({s['purged']})" if "purge_us" in s else "—" for s in sc)
        + " | |"
    )
    deleted = [s for s in sc if "delete" in s]
    if deleted:
        lines += [
            "",
            "Deleting one queued task (`storage.tasks.remove`, as `handle.cancel` and the console "
            "do) and moving one to the head (`first=True`, the console's *run first*), by where it "
            "is in the ready list: wall µs (one round trip) and Redis-side µs of the script, "
            f"median of {DELETES} (p10–p90).",
            "",
            "| move | where | "
            + " | ".join(f"{s['name']} wall | {s['name']} Redis" for s in deleted)
            + " |",
            "|---|---|" + "---|---|" * len(deleted),
        ]  # fmt: skip
        for what in ("delete", "first"):
            for pos in ("head", "middle", "tail"):
                cells = [f"{_cell(s[what][pos]['wall'])} | {_cell(s[what][pos]['redis'])}"
                         for s in deleted]  # fmt: skip
                lines.append(f"| {what} | {pos} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.growth", description=__doc__.split("\n")[0])
    ap.add_argument("--queued", default="0,100000,1000000", help="ready tasks per scenario")
    ap.add_argument("--errors", default="10000,100000", help="failed tasks per scenario")
    ap.add_argument("--reps", type=int, default=5, help="GETs per console route")
    ap.add_argument("--url", help="a Redis database to use instead of a private server")
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args(argv)
    ints = lambda text: [int(x) for x in text.split(",") if x]  # noqa: E731
    results = run(ints(args.queued), ints(args.errors), args.reps, args.url)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print(section(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
