"""Worker presence, commands and the worker event log, as stored in Redis.

Workers write heartbeats and read commands here; the console reads heartbeats and writes
commands here. Neither side knows the other's code: this module is the contract.
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
LOST_READ = 10_000  # most lost workers whose summaries one count reads
SHOWN = ("running", "paused", "stopping", "stopped", "lost", "other")  # what pages filter by


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


def _decode(beat: str | None) -> dict[str, Any]:
    try:
        data = json.loads(beat or "")
    except ValueError:
        return {"status": "unreadable heartbeat"}
    return data if isinstance(data, dict) else {"status": "unreadable heartbeat"}


def list_workers(storage: Storage, lost_after: float = DEFAULT_LOST_AFTER) -> list[WorkerInfo]:
    """Every known worker, by id, from every heartbeat: for a few workers (the ``ztq``
    commands); the console counts with :func:`fleet` and pages with :func:`page_workers`."""
    k = storage.keys
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        pipe.hgetall(k.workers)
        pipe.zrange(k.seen, 0, -1, withscores=True)
        beats, seen = pipe.execute()
    reported = {wid: score / 1000.0 for wid, score in seen}
    now = time.time()
    return [
        WorkerInfo(wid, _decode(beats[wid]), reported.get(wid, 0.0), lost_after, now)
        for wid in sorted(beats)
    ]


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
        WorkerInfo(wid, _decode(beat), (score or 0) / 1000.0, lost_after, now)
        for wid, beat, score in zip(ids, beats, scores, strict=True)
        if beat is not None
    ]


def count_key(status: str) -> str:
    """Where :class:`Fleet` counts a worker of this :attr:`WorkerInfo.status`."""
    return status if status in STATUSES[1:] or status == "lost" else "other"


@dataclass
class Fleet:
    """Workers by status (``lost``: silent for ``lost_after`` seconds and not stopped) and
    what the live ones (neither lost nor stopped) have: threads per queue, busy threads."""

    counts: dict[str, int]  # only the statuses some worker has
    threads: dict[str, int]
    busy: int

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class _Unsummarized:
    """Workers whose heartbeat an older ztq wrote: no summary, so their heartbeats are read
    (only while ``seen`` and ``workers:names`` disagree: during an upgrade, or until the
    retention forgets what an older worker left)."""

    def __init__(self, storage: Storage, lost_after: float, now: float) -> None:
        self.storage, self.lost_after, self.now = storage, lost_after, now
        k = storage.keys
        with storage.guard():
            pipe = storage.client.pipeline(transaction=False)
            pipe.zrange(k.seen, 0, -1, withscores=True)
            pipe.zrange(k.worker_names, 0, -1)
            seen, named = pipe.execute()
            known = set(named)
            old = [(wid, score) for wid, score in seen if wid not in known]
            beats = storage.client.hmget(k.workers, [wid for wid, _ in old]) if old else []
        self.ids = sorted(wid for wid, _ in seen)  # every worker, in name order
        # a name that is not UTF-8 comes back with U+FFFD and finds no heartbeat: shown as
        # unreadable, as list_workers shows it
        self.infos = {
            wid: WorkerInfo(wid, _decode(beat), score / 1000.0, lost_after, now)
            for (wid, score), beat in zip(old, beats, strict=True)
        }

    def rows(self, ids: list[str]) -> list[WorkerInfo]:
        """These workers, the ones without a summary as read already."""
        rest = [wid for wid in ids if wid not in self.infos]
        found = {w.id: w for w in read_workers(self.storage, rest, self.lost_after, self.now)}
        found.update(self.infos)
        return [found[wid] for wid in ids if wid in found]


def fleet(storage: Storage, lost_after: float = DEFAULT_LOST_AFTER, now: float = 0.0) -> Fleet:
    """Count the workers from their summaries, never their heartbeats: a range count per
    status in ``workers:state``, the ``workers:totals`` hash, and the summaries of the lost
    workers, whose threads do not count (2 round trips)."""
    now = now or time.time()
    cut = (now - lost_after) * 1000
    k = storage.keys
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        for band in range(len(STATUSES) - 1):
            lo, split = band * BAND, band * BAND + cut
            pipe.zcount(k.worker_states, lo, f"({split}")
            pipe.zrangebyscore(k.worker_states, lo, f"({split}", start=0, num=LOST_READ)
            pipe.zcount(k.worker_states, split, f"({lo + BAND}")
        pipe.zcount(k.worker_states, BAND * 4, f"({BAND * 5}")
        pipe.hgetall(k.worker_totals)
        pipe.zcard(k.seen)
        pipe.zcard(k.worker_names)
        *bands, stopped, totals, n_seen, n_named = pipe.execute()
        lost_ids = [wid for i in range(1, len(bands), 3) for wid in bands[i]]
        lost = storage.client.hmget(k.worker_summaries, lost_ids) if lost_ids else []
    counts = {"lost": sum(bands[0::3]), "stopped": stopped}
    for band, live in enumerate(bands[2::3]):
        counts[STATUSES[band]] = live
    threads = {f[2:]: int(n) for f, n in totals.items() if f.startswith("t:")}
    busy = int(totals.get("busy", 0))
    for summary in lost:
        _, gone_busy, gone_threads = parse_summary(summary)
        busy -= gone_busy
        for q, n in gone_threads.items():
            threads[q] = threads.get(q, 0) - n
    if n_seen != n_named:
        for info in _Unsummarized(storage, lost_after, now).infos.values():
            status = count_key(info.status)
            counts[status] += 1
            if status not in ("lost", "stopped"):
                _, more_busy, more = parse_summary(summarize(info.data))
                busy += more_busy
                for q, n in more.items():
                    threads[q] = threads.get(q, 0) + n
    return Fleet(
        {s: n for s, n in counts.items() if n > 0},
        {q: n for q, n in sorted(threads.items()) if n > 0},
        max(0, busy),
    )


SERVING_READ = 25  # live workers of each status whose summaries `serving` reads


@dataclass
class Serving:
    """Live workers serving each queue: ``workers[queue]`` is ``[(worker id, threads)]`` in
    name order, of the workers read; ``partial`` when some live workers were not read."""

    workers: dict[str, list[tuple[str, int]]]
    partial: bool = False


def serving(
    storage: Storage,
    lost_after: float = DEFAULT_LOST_AFTER,
    now: float = 0.0,
    per_status: int = SERVING_READ,
) -> Serving:
    """Which live workers (neither lost nor stopped) serve each queue, from the summaries of
    the ``per_status`` workers of each status that reported last (2 round trips, the same
    bytes however many workers there are: no index names the workers of a queue, so a
    bigger fleet is named in part; :class:`Fleet` has every queue's thread count to say how
    many threads were not named). Workers an older ztq left without a summary are read as
    :func:`fleet` reads them."""
    now = now or time.time()
    cut = (now - lost_after) * 1000
    k = storage.keys
    with storage.guard():
        pipe = storage.client.pipeline(transaction=False)
        for band in range(len(STATUSES) - 1):  # the live ones of every status but stopped
            top, live = f"({(band + 1) * BAND}", band * BAND + cut
            pipe.zrevrangebyscore(k.worker_states, top, live, start=0, num=per_status)
        pipe.zcard(k.seen)
        pipe.zcard(k.worker_names)
        *bands, n_seen, n_named = pipe.execute()
        ids = sorted({wid for band in bands for wid in band})
        summaries = storage.client.hmget(k.worker_summaries, ids) if ids else []
    out: dict[str, list[tuple[str, int]]] = {}
    for wid, summary in zip(ids, summaries, strict=True):
        for queue, n in parse_summary(summary)[2].items():
            out.setdefault(queue, []).append((wid, n))
    if n_seen != n_named:
        for info in _Unsummarized(storage, lost_after, now).infos.values():
            if count_key(info.status) not in ("lost", "stopped"):
                for queue, n in parse_summary(summarize(info.data))[2].items():
                    out.setdefault(queue, []).append((info.id, n))
    for rows in out.values():
        rows.sort()
    return Serving(out, partial=any(len(band) >= per_status for band in bands))


def worker_ips(storage: Storage, ids: list[str]) -> dict[str, str]:
    """The IP each of these workers reported in its heartbeat (one round trip); workers
    forgotten already are left out."""
    wanted = sorted(set(ids))[:1000]
    return {w.id: str(w.get("ip") or "") for w in read_workers(storage, wanted) if w.get("ip")}


@dataclass
class WorkerPage:
    workers: list[WorkerInfo]
    next: int | None = None  # where the next page starts (a rank in name order)
    scanned: int = 0
    partial: bool = False  # the scan budget ran out before the page filled
    total: int = 0  # workers known


SCAN_CHUNK = 500


def page_workers(
    storage: Storage,
    lost_after: float = DEFAULT_LOST_AFTER,
    *,
    status: str = "",
    start: int = 0,
    limit: int = 50,
    budget: int = 2000,
    now: float = 0.0,
) -> WorkerPage:
    """``limit`` workers in name order from rank ``start``; with ``status`` (as
    :func:`count_key` names it) only those, looking at ``budget`` workers at most by their
    ``workers:state`` scores. Reads the heartbeats of the page only."""
    now = now or time.time()
    k, client = storage.keys, storage.client
    with storage.guard():
        pipe = client.pipeline(transaction=False)
        pipe.zcard(k.seen)
        pipe.zcard(k.worker_names)
        n_seen, n_named = pipe.execute()
    old = _Unsummarized(storage, lost_after, now) if n_seen != n_named else None
    total = len(old.ids) if old else n_named

    def rows(ids: list[str]) -> list[WorkerInfo]:
        return old.rows(ids) if old else read_workers(storage, ids, lost_after, now)

    def window(rank: int, n: int) -> list[str]:
        if old:
            return old.ids[rank : rank + n]
        with storage.guard():
            return list(client.zrange(k.worker_names, rank, rank + n - 1))

    if not status:
        ids = window(start, limit)
        more = start + len(ids) < total
        return WorkerPage(
            rows(ids),
            start + len(ids) if more else None,
            len(ids),
            total=total,
        )
    cut = (now - lost_after) * 1000
    found: list[str] = []
    rank, size = start, max(2 * limit, 100)
    while len(found) < limit and rank - start < budget:
        want = min(size, budget - (rank - start))
        size = min(2 * size, SCAN_CHUNK)
        chunk = window(rank, want)
        if not chunk:
            break
        with storage.guard():
            scores = client.zmscore(k.worker_states, chunk)
        for wid, score in zip(chunk, scores, strict=True):
            rank += 1
            if score is not None:
                band, reported = divmod(int(score), BAND)
                lost = band < 4 and reported < cut
                shown = "lost" if lost else STATUSES[min(band, 4)]
            elif old and wid in old.infos:
                shown = count_key(old.infos[wid].status)
            else:
                continue
            if shown == status:
                found.append(wid)
                if len(found) == limit:
                    break
        if len(chunk) < want:
            break
    more = rank < total
    return WorkerPage(
        rows(found),
        rank if more else None,
        rank - start,
        partial=more and len(found) < limit,
        total=total,
    )


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
