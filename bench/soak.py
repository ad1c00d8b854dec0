"""A long day (issue 28): many tasks, for a long time, under SIGKILLs and a Redis restart.

``python -m bench.soak [--tasks 1000000] [--minutes 30] [--workers 4] [--kill-every 60]
[--drop-replies 0.02] [--oom-at 0.66 --oom-seconds 60]``

Starts two private redis-servers: the data Redis (append-only file, fsync always, so a
restart keeps what was acknowledged) and a counting Redis that is never faulted. A producer
thread enqueues ``--tasks`` numbered tasks at an even pace over ``--minutes`` (transactions of
at most 500); ``--workers`` worker processes (``soak:4``) run them. Every ``--kill-every``
seconds on average one worker process is SIGKILLed and replaced at once; half-way through,
the data Redis is SIGKILLed and restarted on the same port (the producer holds off while it
is down). Each task marks its number in bitmaps on the counting Redis (``bench.soak_tasks``),
so that at the end *lost* (never ran) and *run twice* are exact counts.

Issue 35 adds two faults. ``--drop-replies P``: the producer (only it; the workers connect
directly) reaches the data Redis through the proxy of ``tests/proxy.py``, which for a share P
of its requests lets Redis run the request and closes the connection before the reply
arrives, so redis-py sends it again (a lost reply to an enqueue). ``--oom-at F
--oom-seconds S``: at that fraction of the run the data Redis's ``maxmemory`` is set to its
``used_memory`` (policy noeviction) for S seconds; the enqueues refused with ``RedisFull``
are counted and sent again after the episode (same ids), so they are not lost. *Run twice
explained by SIGKILLs*: a task whose first run was in a worker process group that the soak
SIGKILLed (``soak:first`` on the counting Redis); the others are listed by number.

Every minute it records the workers' resident memory, the data Redis's ``used_memory``, the
queue depth and the lengths of what ztq keeps (task records, finished-record index, history
stream, worker-event stream): after warm-up these must stay flat, bounded by the documented
caps (``ztq.history_maxlen``, the events stream's 10,000, and ``result_ttl``, which the soak
sets to ``--result-ttl`` = 300 s so that finished records level off within its run). The report is a
Markdown table for docs/benchmarks.md, printed at the end. Not in CI: it takes its minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import redis

from bench.common import spawn, stop

QUEUE = "soak"
CHUNK = 500


@dataclass
class Sample:
    minute: float
    enqueued: int
    ran: int
    depth: int
    rss_mb: list[float]
    used_mb: float
    records: int
    finished_index: int
    history: int
    events: int


@dataclass
class Soak:
    tasks: int
    seconds: float
    workers: int
    kill_every: float
    result_ttl: int
    logs: Path
    data_url: str = ""
    count_url: str = ""
    enqueued: int = 0
    producer_errors: int = 0
    kills: int = 0
    restarts: int = 0
    drop_replies: float = 0.0
    oom_at: float = 0.0
    oom_seconds: float = 60.0
    producer_url: str = ""
    oom_refused: int = 0  # transactions refused with RedisFull (sent again after the episode)
    oom_refused_tasks: int = 0  # distinct task numbers among them
    oom_refused_upto: int = 0
    oom_limit_mb: float = 0.0
    dropped: int = 0  # producer replies the proxy dropped
    killed: set[int] = field(default_factory=set)  # process groups SIGKILLed
    samples: list[Sample] = field(default_factory=list)
    procs: list[subprocess.Popen[Any]] = field(default_factory=list)
    started: int = 0  # worker processes started, replacements included


def spawn_worker(soak: Soak) -> subprocess.Popen[Any]:
    soak.started += 1
    args = [
        sys.executable, "-m", "ztq.worker", "--redis", soak.data_url,
        "--queue", f"{QUEUE}:4", "--import", "bench.soak_tasks",
        "--log-level", "WARNING", "--name", f"soak-{soak.started}",
    ]  # fmt: skip
    env = {
        "SOAK_COUNT": soak.count_url,
        "ZTQ_RESULT_TTL": str(soak.result_ttl),
        "ZTQ_REDIS_URL": soak.data_url,  # directly: only the producer's replies are dropped
    }
    return spawn(args, soak.logs / f"worker-{soak.started}.log", env=env)


def produce(soak: Soak, running: threading.Event, done: threading.Event) -> None:
    """Enqueue at an even pace; while ``running`` is clear (Redis restarting), hold off."""
    import ztq.core as ztq
    from bench import soak_tasks
    from ztq.core import RedisFull, ZtqError, transaction

    ztq.connect(soak.producer_url or soak.data_url)

    start = time.monotonic()
    i = 0
    while i < soak.tasks:
        running.wait()
        due = min(soak.tasks, int(soak.tasks * (time.monotonic() - start) / soak.seconds) + 1)
        if i >= due:
            time.sleep(0.02)
            continue
        end = min(due, i + CHUNK)
        try:
            with transaction():
                for j in range(i, end):
                    soak_tasks.note.delay(j)
        except RedisFull:
            soak.oom_refused += 1  # retried after the episode: the same ids, one task each
            soak.oom_refused_tasks += max(0, end - max(i, soak.oom_refused_upto))
            soak.oom_refused_upto = max(soak.oom_refused_upto, end)
            time.sleep(0.5)
            continue
        except (ZtqError, redis.RedisError):
            soak.producer_errors += 1  # retried: identical tasks are one task (same id)
            time.sleep(0.5)
            continue
        i = soak.enqueued = end
    done.set()


def rss_mb(proc: subprocess.Popen[Any]) -> float:
    try:
        p = psutil.Process(proc.pid)
        return sum(q.memory_info().rss for q in [p, *p.children(recursive=True)]) / 2**20
    except psutil.Error:
        return 0.0


def sample(soak: Soak, t0: float, data: redis.Redis, count: redis.Redis) -> Sample:
    from bench import soak_tasks
    from ztq.core.engine.keys import Keys

    keys = Keys()
    try:
        memory = data.info("memory")["used_memory"] / 2**20
        pipe = data.pipeline(transaction=False)
        pipe.hlen(keys.tasks(QUEUE))
        pipe.zcard(keys.done(QUEUE))
        pipe.xlen(keys.history(QUEUE))
        pipe.xlen(keys.events)
        for ready in keys.ready_all(QUEUE):
            pipe.llen(ready)
        records, finished, history, events, *ready_lens = pipe.execute()
    except redis.RedisError:
        memory, records, finished, history, events, ready_lens = 0.0, -1, -1, -1, -1, [-1]
    s = Sample(
        minute=(time.monotonic() - t0) / 60,
        enqueued=soak.enqueued,
        ran=int(count.bitcount(soak_tasks.SEEN)),
        depth=sum(ready_lens),
        rss_mb=[round(rss_mb(p), 1) for p in soak.procs],
        used_mb=round(memory, 1),
        records=records,
        finished_index=finished,
        history=history,
        events=events,
    )
    soak.samples.append(s)
    print(
        f"soak: {s.minute:5.1f} min  enqueued {s.enqueued:,}  ran {s.ran:,}  depth {s.depth:,}  "
        f"rss {s.rss_mb} MB  redis {s.used_mb} MB  records {s.records:,}  "
        f"history {s.history:,}  events {s.events:,}  kills {soak.kills}",
        flush=True,
    )
    return s


def kill_one(soak: Soak, rng: random.Random) -> None:
    k = rng.randrange(len(soak.procs))
    victim = soak.procs[k]
    with contextlib.suppress(ProcessLookupError):
        os.killpg(victim.pid, signal.SIGKILL)
    victim.wait(timeout=10)
    soak.killed.add(victim.pid)  # its own process group (start_new_session)
    soak.procs[k] = spawn_worker(soak)
    soak.kills += 1


def run(soak: Soak, sample_every: float, drain_timeout: float, seed: int) -> int:
    from bench import soak_tasks
    from ztq.worker.embedded import RedisProcess

    data_server = RedisProcess(appendonly=True).start()
    count_server = RedisProcess().start()
    soak.data_url, soak.count_url = data_server.url, count_server.url
    os.environ["ZTQ_REDIS_URL"] = soak.data_url
    os.environ["SOAK_COUNT"] = soak.count_url
    data = redis.Redis.from_url(soak.data_url)
    count = redis.Redis.from_url(soak.count_url)
    rng = random.Random(seed)
    proxy = None
    if soak.drop_replies:
        from tests.proxy import ReplyDropper

        proxy = ReplyDropper(data_server.port)  # reconnects to the same port after a restart
        proxy.drop_share("", soak.drop_replies, seed)
        soak.producer_url = proxy.url
    print(
        f"soak: data redis {data_server.port}, counting redis {count_server.port}, logs {soak.logs}"
    )
    try:
        soak.procs = [spawn_worker(soak) for _ in range(soak.workers)]
        running, produced = threading.Event(), threading.Event()
        running.set()
        producer = threading.Thread(target=produce, args=(soak, running, produced), daemon=True)
        t0 = time.monotonic()
        producer.start()
        next_kill = t0 + rng.uniform(0.5, 1.5) * soak.kill_every
        next_sample = t0 + sample_every
        restart_at = t0 + soak.seconds / 2
        oom_at = t0 + soak.oom_at * soak.seconds if soak.oom_at else float("inf")
        oom_until = float("inf")
        last_progress, last_ran = time.monotonic(), -1
        while True:
            now = time.monotonic()
            if now >= next_kill:
                kill_one(soak, rng)
                next_kill = now + rng.uniform(0.5, 1.5) * soak.kill_every
            if not soak.restarts and now >= restart_at:
                running.clear()
                data_server.restart()  # SIGKILL, then the same port and append-only file
                soak.restarts += 1
                running.set()
                print("soak: data redis SIGKILLed and restarted", flush=True)
            if now >= oom_at:
                used = int(data.info("memory")["used_memory"])
                data.config_set("maxmemory-policy", "noeviction")
                data.config_set("maxmemory", used)
                soak.oom_limit_mb = used / 2**20
                oom_at, oom_until = float("inf"), now + soak.oom_seconds
                print(f"soak: maxmemory set to used_memory ({used:,} B)", flush=True)
            if now >= oom_until:
                data.config_set("maxmemory", 0)
                oom_until = float("inf")
                print(f"soak: maxmemory lifted; {soak.oom_refused} refusals", flush=True)
            if now >= next_sample:
                sample(soak, t0, data, count)
                next_sample += sample_every
            if produced.is_set():
                ran = int(count.bitcount(soak_tasks.SEEN))
                if ran >= soak.tasks:
                    break
                if ran != last_ran:
                    last_ran, last_progress = ran, now
                elif now - last_progress > drain_timeout:
                    print(f"soak: no progress for {drain_timeout:.0f} s; stopping", flush=True)
                    break
            time.sleep(0.25)
        wall = time.monotonic() - t0
        sample(soak, t0, data, count)
        soak.dropped = proxy.dropped if proxy else 0
        return report(soak, data, count, wall)
    finally:
        stop(soak.procs)
        if proxy:
            proxy.close()
        data_server.cleanup()
        count_server.cleanup()


def bits(count: redis.Redis, key: str, n: int) -> list[int]:
    """The task numbers below ``n`` whose bit is set in bitmap ``key``."""
    raw = count.get(key) or b""
    return [i for i in range(min(n, len(raw) * 8)) if raw[i // 8] >> (7 - i % 8) & 1]


def report(soak: Soak, data: redis.Redis, count: redis.Redis, wall: float) -> int:
    from bench import soak_tasks
    from ztq.core.engine.keys import Keys

    seen = set(bits(count, soak_tasks.SEEN, soak.tasks))
    twice_ids = bits(count, soak_tasks.TWICE, soak.tasks)
    lost_ids = [i for i in range(soak.tasks) if i not in seen]
    first = count.hmget(soak_tasks.FIRST, twice_ids) if twice_ids else []
    pgids = zip(twice_ids, first, strict=True)
    unexplained = [i for i, g in pgids if int(g or 0) not in soak.killed]
    twice, lost = len(twice_ids), len(lost_ids)
    try:
        totals = {k.decode(): v.decode() for k, v in data.hgetall(Keys().totals(QUEUE)).items()}
    except redis.RedisError:
        totals = {}
    picks = [soak.samples[0], soak.samples[len(soak.samples) // 2], soak.samples[-1]]
    print()
    print(f"| measure | {' | '.join(f'{s.minute:.0f} min' for s in picks)} |")
    print(f"|---|{'---|' * len(picks)}")
    rows = [
        ("workers' resident memory, MB (each)", lambda s: " / ".join(f"{m:.0f}" for m in s.rss_mb)),
        ("Redis used_memory, MB", lambda s: f"{s.used_mb:.1f}"),
        ("queued (ready lists)", lambda s: f"{s.depth:,}"),
        ("task records (hash)", lambda s: f"{s.records:,}"),
        ("finished-record index", lambda s: f"{s.finished_index:,}"),
        (
            "used_memory / task records, B",
            lambda s: f"{s.used_mb * 2**20 / max(s.records, 1):,.0f}",
        ),
        ("history stream", lambda s: f"{s.history:,}"),
        ("worker-event stream", lambda s: f"{s.events:,}"),
    ]
    for label, cell in rows:
        print(f"| {label} | {' | '.join(cell(s) for s in picks)} |")
    print()
    print(
        f"soak: {soak.tasks:,} tasks in {wall / 60:.1f} min ({soak.tasks / wall:,.0f}/s), "
        f"{soak.workers} workers, {soak.kills} SIGKILLs, {soak.restarts} Redis restart(s), "
        f"{soak.producer_errors} producer retries: lost {lost}, run twice {twice}"
    )
    print()
    print("| fault run | count |")
    print("|---|---|")
    for label, value in [
        ("tasks", f"{soak.tasks:,}"),
        ("lost", lost),
        ("run twice", twice),
        ("run twice, first run in a SIGKILLed worker", twice - len(unexplained)),
        ("run twice, not explained by a SIGKILL", len(unexplained)),
        ("SIGKILLs (workers)", soak.kills),
        ("data Redis restarts (SIGKILL)", soak.restarts),
        ("producer replies dropped", soak.dropped),
        ("producer retries (ConnectionFailed etc.)", soak.producer_errors),
        (
            f"OOM refusals (transactions / tasks), maxmemory {soak.oom_limit_mb:.1f} MB for "
            f"{soak.oom_seconds:.0f} s",
            f"{soak.oom_refused} / {soak.oom_refused_tasks:,}",
        ),
        ("oom_compact (totals)", totals.get("oom_compact", "0")),
        ("oom_dropped (totals)", totals.get("oom_dropped", "0")),
    ]:
        print(f"| {label} | {value} |")
    if lost_ids:
        print(f"soak: lost (first 50): {lost_ids[:50]}")
    if unexplained:
        print(f"soak: run twice, not explained (first 50): {unexplained[:50]}")
    return 0 if lost == 0 and not unexplained else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=1_000_000)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--kill-every", type=float, default=60.0, help="mean seconds between kills")
    ap.add_argument("--sample-every", type=float, default=60.0, help="seconds between samples")
    ap.add_argument("--drain-timeout", type=float, default=180.0)
    ap.add_argument("--result-ttl", type=int, default=300, help="the workers' result_ttl")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--drop-replies", type=float, default=0.0, help="share of producer replies")
    ap.add_argument("--oom-at", type=float, default=0.0, help="fraction of the run; 0: none")
    ap.add_argument("--oom-seconds", type=float, default=60.0)
    args = ap.parse_args(argv)
    logs = Path(tempfile.mkdtemp(prefix="ztq-soak-"))
    soak = Soak(args.tasks, args.minutes * 60, args.workers, args.kill_every, args.result_ttl, logs)
    soak.drop_replies, soak.oom_at = args.drop_replies, args.oom_at
    soak.oom_seconds = args.oom_seconds
    return run(soak, args.sample_every, args.drain_timeout, args.seed)


if __name__ == "__main__":
    sys.exit(main())
