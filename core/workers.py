"""Worker presence, commands and the worker event log, as stored in Redis.

Workers write heartbeats and read commands here; the console reads heartbeats and writes
commands here. Neither side knows the other's code: this module is the contract.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from ztq.core.errors import InvalidOption
from ztq.core.storage import Storage

COMMANDS = ("refresh", "pause", "resume", "stop", "set_threads", "kill")
DEFAULT_LOST_AFTER = 30.0  # seconds without a heartbeat before a worker shows as lost
DEFAULT_RETENTION = 24 * 3600.0  # seconds before a silent worker is forgotten
EVENTS_MAXLEN = 10_000
COMMAND_TTL_MS = 3_600_000


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


def write_heartbeat(
    storage: Storage, worker_id: str, data: dict[str, Any], retention: float = DEFAULT_RETENTION
) -> list[str]:
    """Store a heartbeat; returns ids of workers forgotten after ``retention`` seconds."""
    k = storage.keys
    text = json.dumps(data, separators=(",", ":"), default=str)
    reply = storage.call("heartbeat", [k.workers, k.seen], [worker_id, text, int(retention * 1000)])
    return [str(x) for x in reply]


def forget_worker(storage: Storage, worker_id: str) -> bool:
    k = storage.keys
    return bool(storage.call("forget", [k.workers, k.seen, k.worker_cmd(worker_id)], [worker_id]))


def list_workers(storage: Storage, lost_after: float = DEFAULT_LOST_AFTER) -> list[WorkerInfo]:
    """Every known worker, by id (100 workers is one round trip and a few ms)."""
    k = storage.keys
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        pipe.hgetall(k.workers)
        pipe.zrange(k.seen, 0, -1, withscores=True)
        beats, seen = pipe.execute()
    reported = {wid: score / 1000.0 for wid, score in seen}
    now = time.time()
    out = []
    for wid in sorted(beats):
        try:
            data = json.loads(beats[wid])
        except ValueError:
            data = {"status": "unreadable heartbeat"}
        out.append(WorkerInfo(wid, data, reported.get(wid, 0.0), lost_after, now))
    return out


def get_worker(
    storage: Storage, worker_id: str, lost_after: float = DEFAULT_LOST_AFTER
) -> WorkerInfo | None:
    k = storage.keys
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        pipe.hget(k.workers, worker_id)
        pipe.zscore(k.seen, worker_id)
        beat, score = pipe.execute()
    if beat is None:
        return None
    try:
        data = json.loads(beat)
    except ValueError:
        data = {"status": "unreadable heartbeat"}
    return WorkerInfo(worker_id, data, (score or 0) / 1000.0, lost_after)


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
