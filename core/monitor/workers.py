"""Workers as the console and the ``ztq`` commands show them: counts by status, pages in
name order, who serves each queue, every worker for a few.

Read from what the worker/console contract (``ztq.core.engine.workers``) keeps in Redis:
the one-line summaries next to the heartbeats, so that a count or a filter never reads
every heartbeat, and the heartbeats of the workers shown.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from ztq.core.engine.read_models import fleet_reads as reads
from ztq.core.engine.storage import Storage
from ztq.core.engine.workers import (
    BAND,
    COMMANDS,
    DEFAULT_LOST_AFTER,
    STATUSES,
    WorkerInfo,
    decode_heartbeat,
    parse_summary,
    read_workers,
    summarize,
)

LOST_READ = 10_000  # most lost workers whose summaries one count reads
SHOWN = ("running", "paused", "stopping", "stopped", "lost", "other")  # what pages filter by


def list_workers(storage: Storage, lost_after: float = DEFAULT_LOST_AFTER) -> list[WorkerInfo]:
    """Every known worker, by id, from every heartbeat: for a few workers (the ``ztq``
    commands); the console counts with :func:`fleet` and pages with :func:`page_workers`."""
    beats, seen = reads.heartbeats_and_seen(storage)
    reported = {wid: score / 1000.0 for wid, score in seen}
    now = time.time()
    return [
        WorkerInfo(wid, decode_heartbeat(beats[wid]), reported.get(wid, 0.0), lost_after, now)
        for wid in sorted(beats)
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
    paused: dict[str, int] = field(default_factory=dict)  # of ``threads``: paused workers'

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class _Unsummarized:
    """Workers whose heartbeat an older ztq wrote: no summary, so their heartbeats are read
    (only while ``seen`` and ``workers:names`` disagree: during an upgrade, or until the
    retention forgets what an older worker left)."""

    def __init__(self, storage: Storage, lost_after: float, now: float) -> None:
        self.storage, self.lost_after, self.now = storage, lost_after, now
        seen, old, beats = reads.unsummarized(storage)
        self.ids = sorted(wid for wid, _ in seen)  # every worker, in name order
        # a name that is not UTF-8 comes back with U+FFFD and finds no heartbeat: shown as
        # unreadable, as list_workers shows it
        self.infos = {
            wid: WorkerInfo(wid, decode_heartbeat(beat), score / 1000.0, lost_after, now)
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
    r = reads.fleet_reads(storage, cut, LOST_READ)
    totals, lost = r.totals, r.lost_summaries
    counts = {"lost": sum(n for n, _, _ in r.bands), "stopped": r.stopped}
    for band, (_, _, live) in enumerate(r.bands):
        counts[STATUSES[band]] = live
    threads = {f[2:]: int(n) for f, n in totals.items() if f.startswith("t:")}
    paused = {f[2:]: int(n) for f, n in totals.items() if f.startswith("p:")}  # heartbeat.lua
    busy = int(totals.get("busy", 0))
    for summary in lost:
        status, gone_busy, gone_threads = parse_summary(summary)
        busy -= gone_busy
        for q, n in gone_threads.items():
            threads[q] = threads.get(q, 0) - n
            if status == "paused":
                paused[q] = paused.get(q, 0) - n
    if r.n_seen != r.n_named:
        for info in _Unsummarized(storage, lost_after, now).infos.values():
            status = count_key(info.status)
            counts[status] += 1
            if status not in ("lost", "stopped"):
                _, more_busy, more = parse_summary(summarize(info.data))
                busy += more_busy
                for q, n in more.items():
                    threads[q] = threads.get(q, 0) + n
                    if status == "paused":
                        paused[q] = paused.get(q, 0) + n
    return Fleet(
        {s: n for s, n in counts.items() if n > 0},
        {q: n for q, n in sorted(threads.items()) if n > 0},
        max(0, busy),
        {q: min(n, threads.get(q, 0)) for q, n in sorted(paused.items()) if n > 0},
    )


def forget_queue(storage: Storage, queue: str, lost_after: float = DEFAULT_LOST_AFTER) -> str:
    """Forget a queue that holds nothing and no live worker serves (a lost worker's threads
    do not count, as everywhere): "" when it is gone, else why not, in one line (see
    ``Queues.forget_idle_queue``)."""
    served = fleet(storage, lost_after).threads.get(queue, 0)
    if served:
        return f"{served} live worker thread(s) serve {queue} (see ztq workers)"
    return storage.queues.forget_idle_queue(queue)


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
    bands, n_seen, n_named, ids, summaries = reads.serving_reads(storage, cut, per_status)
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
    n_seen, n_named = reads.worker_counts(storage)
    old = _Unsummarized(storage, lost_after, now) if n_seen != n_named else None
    total = len(old.ids) if old else n_named

    def rows(ids: list[str]) -> list[WorkerInfo]:
        return old.rows(ids) if old else read_workers(storage, ids, lost_after, now)

    def window(rank: int, n: int) -> list[str]:
        if old:
            return old.ids[rank : rank + n]
        return reads.worker_names(storage, rank, n)

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
        scores = reads.worker_states(storage, chunk)
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


PENDING_READ = 20  # commands of one worker's list that a page reads


def pending_commands(storage: Storage, ids: list[str]) -> dict[str, list[dict[str, object]]]:
    """The commands sent to each of these workers that it has not taken yet, oldest first
    (what the pages show as pending: "pausing…", "threads → 3…"), read from their command
    lists without taking them (1 round trip). A worker takes its commands within moments
    and then writes a heartbeat: a command still listed is one the worker has not confirmed.
    Wake-up tokens and anything unreadable are left out; workers with none are too."""
    if not ids:
        return {}
    lists = reads.command_lists(storage, ids, PENDING_READ)
    found: dict[str, list[dict[str, object]]] = {}
    for wid, raw in zip(ids, lists, strict=True):
        out = [cmd for cmd in map(_pending, raw) if cmd is not None]
        if out:
            found[wid] = out
    return found


def _pending(text: str) -> dict[str, object] | None:
    try:
        cmd = json.loads(text)
    except ValueError:
        return None
    if not isinstance(cmd, dict) or cmd.get("cmd") not in COMMANDS:
        return None
    at, threads = cmd.get("at"), cmd.get("threads")
    return {
        "cmd": str(cmd["cmd"]),
        "queue": str(cmd.get("queue", ""))[:64],
        "threads": threads if type(threads) is int else None,
        "task_id": str(cmd.get("task_id", ""))[:128],
        "at": at if type(at) is int else 0,
    }


def pending_effects(pending: list[dict[str, object]]) -> dict[str, object]:
    """What the pending commands will change once the worker takes them: ``status`` the
    change under way (``pausing``, ``resuming``, ``stopping``; the last one sent wins, a
    stop over all), ``threads`` queue -> the count asked for, ``auto`` the queues given back
    to the autoscaler, ``kills`` the task ids to kill, ``since`` when the oldest was sent
    (ms), ``sig`` a short text that changes when any of it does (what the page's script
    compares)."""
    status = ""
    threads: dict[str, int] = {}
    auto: list[str] = []
    kills: list[str] = []
    for c in pending:
        name = c["cmd"]
        if name == "stop" or (name in ("pause", "resume") and status != "stopping"):
            status = {"stop": "stopping", "pause": "pausing", "resume": "resuming"}[str(name)]
        elif name == "set_threads" and isinstance(c["threads"], int):
            threads[str(c["queue"])] = c["threads"]
        elif name == "autoscale":
            auto.append(str(c["queue"]))
        elif name == "kill":
            kills.append(str(c.get("task_id", "")))
    since = min((int(str(c["at"])) for c in pending), default=0)
    sig = ",".join(f"{c['cmd']}:{c['queue']}:{c['threads']}:{c['at']}" for c in pending)
    return {"status": status, "threads": threads, "auto": auto, "kills": kills,
            "since": since, "sig": sig}  # fmt: skip
