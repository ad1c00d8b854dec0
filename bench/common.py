"""Shared by the orchestrator and by task modules inside worker processes.

The private redis-server's address comes from ``BENCH_REDIS`` (``redis://127.0.0.1:PORT``);
each peer has its own database number so that peers never see each other's keys, and start
stamps (the only thing a benchmark task writes) go to database 0.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
DB = {"ztq": 1, "rq": 2, "huey": 3, "dramatiq": 4, "celery": 5, "arq": 6}
SLEEP_CONCURRENCY = 200  # tasks at once in the asyncio sleep measure (issue 9)
_stamp_client: redis.Redis | None = None


def base_url() -> str:
    return os.environ["BENCH_REDIS"]


def peer_url(peer: str) -> str:
    return f"{base_url()}/{DB[peer]}"


def stamps_key(peer: str) -> str:
    return f"bench:stamps:{peer}"


def stamp_client() -> redis.Redis:
    global _stamp_client
    if _stamp_client is None:
        _stamp_client = redis.Redis.from_url(f"{base_url()}/0", decode_responses=True)
    return _stamp_client


def record_start(peer: str, i: int) -> None:
    """What a stamp task does first: note when it started, and in which process."""
    now = time.time()
    stamp_client().rpush(stamps_key(peer), f"{i} {now:.6f} {os.getpid()}")


def read_stamps(peer: str) -> list[tuple[int, float, int]]:
    raw = stamp_client().lrange(stamps_key(peer), 0, -1)
    out = []
    for line in raw:
        i, t, pid = line.split()
        out.append((int(i), float(t), int(pid)))
    return out


def wait_stamps(peer: str, count: int, timeout: float) -> list[tuple[int, float, int]]:
    """Poll until ``count`` stamps are in, or ``timeout`` passes; returns what came."""
    deadline = time.monotonic() + timeout
    client = stamp_client()
    while time.monotonic() < deadline:
        if client.llen(stamps_key(peer)) >= count:
            break
        time.sleep(0.01)
    return read_stamps(peer)


def clear_stamps(peer: str) -> None:
    stamp_client().delete(stamps_key(peer))


# -- statistics --------------------------------------------------------------------------------
def percentile(values: Sequence[float], p: float) -> float:
    """Linear-interpolated percentile (p in 0..100) of a non-empty sequence."""
    data = sorted(values)
    if not data:
        return math.nan
    k = (len(data) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return data[lo] + (data[hi] - data[lo]) * (k - lo)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50.0)


# -- the report --------------------------------------------------------------------------------
def write_section(out: Path, heading: str, text: str, before: str | tuple[str, ...]) -> None:
    """Replace the section ``heading`` of ``out`` (to the next ``## ``) with ``text``, or
    insert it before the first heading starting with ``before`` (one of them, when a tuple;
    at the end when there is none); the rest of the file is kept."""
    lines = out.read_text(encoding="utf-8").split("\n") if out.exists() else []
    new = text.split("\n")
    heads = [i for i, line in enumerate(lines) if line.startswith("## ")]
    start = next((i for i in heads if lines[i] == heading), None)
    if start is not None:
        end = next((i for i in heads if i > start), len(lines))
    else:
        later = [i for i in heads if lines[i].startswith(before)]
        start = end = later[0] if later else len(lines)
    out.write_text("\n".join(lines[:start] + new + lines[end:]), encoding="utf-8")


# -- processes ---------------------------------------------------------------------------------
def spawn(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[Any]:
    """Start a worker in its own process group (so its children can be stopped with it)."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    with open(log, "ab") as fh:
        return subprocess.Popen(
            args,
            cwd=ROOT,
            env=full_env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def stop(procs: Sequence[subprocess.Popen[Any]], grace: float = 5.0) -> None:
    """SIGTERM each process group we started, then SIGKILL what is left."""
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=5)
