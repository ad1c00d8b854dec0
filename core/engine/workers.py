"""Worker presence, commands and the worker event log, as stored in Redis.

Workers write heartbeats and read commands here; the console reads heartbeats and writes
commands here. Neither side knows the other's code: this module is the contract. What the
console builds on it to show a fleet (counts, pages, who serves a queue) is in
``ztq.core.monitor.workers``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from ztq.core.engine.keys import QUEUE_NAME, Keys
from ztq.core.engine.storage import Storage
from ztq.core.errors import InvalidOption

# set_threads pins an autoscaled queue; autoscale gives it back to the autoscaler
COMMANDS = ("refresh", "pause", "resume", "stop", "set_threads", "kill", "autoscale")
DEFAULT_LOST_AFTER = 30.0  # seconds without a heartbeat before a worker shows as lost
DEFAULT_RETENTION = 24 * 3600.0  # seconds before a silent worker is forgotten
EVENTS_MAXLEN = 10_000
COMMAND_TTL_MS = 3_600_000
# a summary's status; its place is its band in the ``workers:state`` zset, whose score is
# band * BAND + the last report (ms): a status's workers, and its lost ones, are one range
STATUSES = ("other", "running", "paused", "stopping", "stopped")
BAND = 10**13


@dataclass
class WorkerInfo:
    """A worker as its last heartbeat described it."""

    id: str
    data: dict[str, Any]
    reported: float  # epoch seconds of the last heartbeat
    lost_after: float = DEFAULT_LOST_AFTER
    now: float = field(default_factory=time.time)

    @property
    def lost(self) -> bool:
        return self.now - self.reported > self.lost_after

    @property
    def status(self) -> str:
        """running / paused / stopping / stopped, or lost when heartbeats stopped coming."""
        status = str(self.data.get("status", "running"))
        if status == "stopped":
            return status
        return "lost" if self.lost else status

    @property
    def age(self) -> float:
        return max(0.0, self.now - self.reported)

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)


def autoscale_of(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The autoscaled queues a heartbeat names (``ztq.worker.scaler.Scaler.describe``):
    queue -> ``{"min", "max", "pool", "pinned", "last"}`` (the last decision: the fields of
    its ``autoscale`` event, ``message`` the line; {} when none), malformed entries left out."""
    raw = data.get("autoscale")
    out: dict[str, dict[str, Any]] = {}
    for q, a in sorted(raw.items()) if isinstance(raw, dict) else ():
        if not (isinstance(q, str) and QUEUE_NAME.match(q) and isinstance(a, dict)):
            continue
        low, high = a.get("min"), a.get("max")
        if type(low) is int and type(high) is int and 0 <= low <= high:
            pool, raw = str(a.get("pool") or "thread")[:16], a.get("last")
            pairs = list(raw.items())[:16] if isinstance(raw, dict) else []
            last = {str(k)[:40]: str(v)[:300] for k, v in pairs}
            out[q] = {"min": low, "max": high, "pool": pool, "pinned": a.get("pinned") is True,
                      "last": last}  # fmt: skip
    return out


def summarize(data: dict[str, Any]) -> str:
    """The one-line summary the heartbeat script keeps next to the heartbeat, which the
    console counts and filters by without reading heartbeats: status (one of
    :data:`STATUSES`, ``other`` for anything else), busy threads, then threads per queue
    (queue names only), e.g. ``running 3 default=2 mail=2``."""
    status = data.get("status")
    parts = [status if isinstance(status, str) and status in STATUSES[1:] else "other"]
    current = data.get("current")
    busy = sum(isinstance(c, dict) for c in current.values()) if isinstance(current, dict) else 0
    parts.append(str(busy))
    threads = data.get("threads")
    for q, n in sorted(threads.items() if isinstance(threads, dict) else (), key=lambda t: t[0]):
        if isinstance(q, str) and QUEUE_NAME.match(q) and type(n) is int and 0 < n <= 10**6:
            parts.append(f"{q}={n}")
    return " ".join(parts)


def parse_summary(text: str | None) -> tuple[str, int, dict[str, int]]:
    """(status, busy threads, threads per queue) of a :func:`summarize` line."""
    status, _, rest = (text or "other 0").partition(" ")
    busy, _, rest = rest.partition(" ")
    threads = {}
    for part in rest.split():
        q, _, n = part.partition("=")
        if n.isdigit():
            threads[q] = int(n)
    return status, int(busy) if busy.isdigit() else 0, threads


def _summary_keys(k: Keys) -> list[str]:
    return [k.worker_summaries, k.worker_states, k.worker_totals, k.worker_names]


def write_heartbeat(
    storage: Storage, worker_id: str, data: dict[str, Any], retention: float = DEFAULT_RETENTION
) -> list[str]:
    """Store a heartbeat; returns ids of workers forgotten after ``retention`` seconds."""
    k = storage.keys
    text = json.dumps(data, separators=(",", ":"), default=str)
    reply = storage.call(
        "heartbeat",
        [k.workers, k.seen, *_summary_keys(k)],
        [worker_id, text, int(retention * 1000), summarize(data)],
    )
    return [str(x) for x in reply]


def forget_worker(storage: Storage, worker_id: str) -> bool:
    k = storage.keys
    keys = [k.workers, k.seen, k.worker_cmd(worker_id), *_summary_keys(k)]
    return bool(storage.call("forget", keys, [worker_id]))


def decode_heartbeat(beat: str | None) -> dict[str, Any]:
    """A heartbeat's fields; one that is not a JSON object (anyone sharing the Redis may
    have written it) reads as the status ``unreadable heartbeat``, never as an error."""
    try:
        data = json.loads(beat or "")
    except ValueError:
        return {"status": "unreadable heartbeat"}
    return data if isinstance(data, dict) else {"status": "unreadable heartbeat"}


def get_worker(
    storage: Storage, worker_id: str, lost_after: float = DEFAULT_LOST_AFTER
) -> WorkerInfo | None:
    found = read_workers(storage, [worker_id], lost_after)
    return found[0] if found else None


def read_workers(
    storage: Storage, ids: list[str], lost_after: float = DEFAULT_LOST_AFTER, now: float = 0.0
) -> list[WorkerInfo]:
    """The heartbeats of these workers, in this order (the ones not known left out)."""
    if not ids:
        return []
    k = storage.keys
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        pipe.hmget(k.workers, ids)
        pipe.zmscore(k.seen, ids)
        beats, scores = pipe.execute()
    now = now or time.time()
    return [
        WorkerInfo(wid, decode_heartbeat(beat), (score or 0) / 1000.0, lost_after, now)
        for wid, beat, score in zip(ids, beats, scores, strict=True)
        if beat is not None
    ]


def send_command(storage: Storage, worker_id: str, command: str, **args: Any) -> bool:
    """Queue a command for a worker; False if no such worker is known."""
    if command not in COMMANDS:
        raise InvalidOption(f"unknown worker command {command!r}; known: {', '.join(COMMANDS)}")
    body = json.dumps(
        {"cmd": command, **args, "at": int(time.time() * 1000)}, separators=(",", ":")
    )
    k = storage.keys
    return bool(
        storage.call(
            "command", [k.worker_cmd(worker_id), k.seen], [worker_id, body, COMMAND_TTL_MS]
        )
    )


def nudge_commands(storage: Storage, worker_id: str) -> None:
    """A token on the worker's command list (not a command: :func:`take_commands` drops it),
    so that its command thread, blocked reading the list, returns now: a stopping worker
    joins that thread, which would otherwise hold the stop for up to its read's timeout."""
    k = storage.keys
    storage.call("command", [k.worker_cmd(worker_id), k.seen], [worker_id, "1", COMMAND_TTL_MS])


def take_commands(storage: Storage, worker_id: str, timeout: float = 0.0) -> list[dict[str, Any]]:
    """Commands for this worker, oldest first; blocks up to ``timeout`` when there are none."""
    key = storage.keys.worker_cmd(worker_id)
    with storage.guard():
        if timeout > 0:
            first = storage.client.blpop([key], timeout=min(timeout, 8.0))
            if first is None:
                return []
            raw = [first[1]]
            raw += storage.client.lpop(key, 100) or []
        else:
            raw = storage.client.lpop(key, 100) or []
    out = []
    for text in raw:
        try:
            cmd = json.loads(text)
        except ValueError:
            continue
        if isinstance(cmd, dict) and cmd.get("cmd") in COMMANDS:
            out.append(cmd)
    return out


def log_event(
    storage: Storage, kind: str, worker_id: str, message: str = "", **fields: Any
) -> None:
    """Append to the worker event log (start, stop, reboot, lost, config, command)."""
    flat = {"kind": kind, "worker": worker_id, "message": message}
    flat.update({key: str(value) for key, value in fields.items()})
    with storage.guard():
        storage.client.xadd(storage.keys.events, flat, maxlen=EVENTS_MAXLEN, approximate=True)


def publish_cron_entries(storage: Storage, entries: list[dict[str, Any]]) -> None:
    """Publish the cron entries a worker fires (name -> JSON) for the console."""
    if not entries:
        return
    mapping = {str(e["name"]): json.dumps(e, separators=(",", ":"), default=str) for e in entries}
    with storage.guard():
        storage.client.hset(storage.keys.cron, mapping=mapping)


def set_cron_enabled(storage: Storage, name: str, enabled: bool, by: str = "") -> None:
    """Disable a cron entry on every worker (they skip its ticks), or enable it again."""
    with storage.guard():
        if enabled:
            storage.client.hdel(storage.keys.cron_off, name)
        else:
            note = json.dumps({"by": by, "at": int(time.time() * 1000)}, separators=(",", ":"))
            storage.client.hset(storage.keys.cron_off, name, note)


def disabled_cron(storage: Storage) -> set[str]:
    """Names of the cron entries an operator disabled."""
    with storage.guard():
        return set(storage.client.hkeys(storage.keys.cron_off))
