"""Worker configuration: one ini file (ZTQ's ``[server]`` + ``[queues]``) plus flags.

Read in one place and passed down. The worker's settings are declared here
(:data:`SETTINGS`) and, with core's, resolved by :mod:`ztq.core.settings` with the rule
flag > environment (``ZTQ_REDIS_URL``, ``ZTQ_PREFIX``, ``ZTQ_LEASE``, ...) > ini > default.
The ini may be the console's ``app.ini``: the worker then reads ``[ztq:worker]`` /
``[ztq:queues]`` and the ``ztq.<name>`` keys of ``[app:main]`` (``ztq.redis_url``,
``ztq.prefix``, ``ztq.lease``, ...); the two must not disagree.

    [server]
    redis = redis://127.0.0.1:6379/0
    name = pdf-box-1              ; alias shown in the console (default host.pid)
    modules = myapp.tasks, myapp.mail
    active_config = true          ; the console may change the thread allocation
    lease = 15                    ; seconds; see docs/worker.md

    [queues]
    default = 2                   ; two threads for queue "default"
    pdf = 1 process               ; one killable process slot
    crawl = 200 async             ; one event loop running up to 200 async def tasks
    fast = urgent, default        ; one thread named "fast" watching urgent, then default
    mixed = a, b, c fair          ; one thread asking a, b, c in turn (a different one first)
    hot = 8 shards=3              ; eight threads over the three shards of queue "hot"
    mail = 1..8                   ; autoscaled: 1 to 8 threads as the load asks (autoscaling.md)
"""

from __future__ import annotations

import logging
import os
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from ztq.core import settings
from ztq.core.client.app import connection_flags, load_app
from ztq.core.engine.keys import MAX_SHARDS, check_queue, check_shards
from ztq.core.errors import ConfigError, InvalidName
from ztq.core.settings import (
    NAME,
    Setting,
    app_spec,
    boolean,
    host_port,
    module_list,
    number,
    worker_name,
)

log = logging.getLogger(__name__)

MAX_THREADS_ALL = 100_000  # bound of autoscale_threads_max (a worker's threads in all)


def _worker(name: str, parse: Callable[[Any], Any], default: Any, doc: str) -> Setting:
    return Setting(name, parse, default, doc, worker_keys=(name,))


# the worker's own settings; with core's (redis_url, prefix, log_*) they make TABLE
SETTINGS: tuple[Setting, ...] = (
    Setting("app", app_spec, "", "the ztq.core.App (module:attribute) the worker serves; "
            "its own redis_url and prefix count as flags; default: the default app",
            worker_keys=("app",)),
    Setting("name", worker_name, "", "worker name shown in the console (default host.pid)",
            env="ZTQ_WORKER_NAME", app_key=None, worker_keys=("name", "alias")),
    Setting("modules", module_list, (), "modules with tasks the worker imports",
            app_key=None, worker_keys=("modules",)),
    Setting("active_config", boolean, True, "may the console change the worker's threads",
            app_key=None, worker_keys=("active_config",)),
    Setting("health", host_port, "", "serve /livez and /readyz on PORT or HOST:PORT (flag "
            "--health-port; HOST defaults to 0.0.0.0); empty: no health endpoints",
            app_key=None, worker_keys=("health",)),
    _worker("lease", number(0, above=True), 15.0,
            "seconds a fetched task is held without a heartbeat renewing it"),
    _worker("heartbeat", number(0, above=True), 3.0,
            "seconds between heartbeats (lease renewals, reaper, commands)"),
    _worker("max_lost", number(1, 1000, whole=True), 3,
            "a task that lost its worker this often goes to errors (poison pill)"),
    _worker("prefetch", number(1, 10_000, whole=True), 32,
            "most tasks one executor leases in one call"),
    _worker("result_ttl", number(0), 3600.0,
            "seconds a finished record and its result are kept; 0 = dropped at once"),
    _worker("history_maxlen", number(1, whole=True), 10_000,
            "cap of each queue's history stream"),
    _worker("grace", number(0, above=True), 30.0,
            "seconds running tasks get to finish on SIGTERM"),
    _worker("idle_wait", number(0, above=True), 5.0,
            "longest block of an idle executor on the wake lists"),
    _worker("retry_backoff", number(0, above=True), 1.0,
            "seconds before the first retry; doubles per attempt"),
    _worker("lost_after", number(0, above=True), 30.0,
            "read and checked, not used by the worker yet (see console.lost_after)"),
    _worker("broadcast_catch_up", number(0), 0.0,
            "seconds: at start, run the broadcasts sent that long before (0: the app's "
            "broadcast_catch_up, by default none); docs/channels.md"),
    _worker("autoscale_cpu_max", number(0, 100), 85.0,
            "host CPU % from which the autoscaler adds no thread (docs/autoscaling.md)"),
    _worker("autoscale_memory_max", number(0, 100), 90.0,
            "host memory % from which the autoscaler adds no thread and lets one go a beat"),
    _worker("autoscale_threads_max", number(0, MAX_THREADS_ALL, whole=True), 0,
            "most threads the autoscaled queues run together; 0: each queue's maximum only"),
    _worker("autoscale_idle_beats", number(1, 1000, whole=True), 3,
            "heartbeats an autoscaled queue's threads stay unneeded before some are let go"),
)  # fmt: skip
TABLE = settings.by_name(settings.SETTINGS, SETTINGS)
WORKER = (*settings.CONNECTION, *(s.name for s in SETTINGS))  # what load_config resolves


@dataclass(frozen=True)
class ThreadSpec:
    """One executor: the queues it watches in order, and how it runs tasks."""

    name: str
    queues: tuple[str, ...]
    pool: str = "thread"  # "process": a killable child process slot; "async": an event loop
    concurrency: int = 1  # tasks in flight at once (an async pool's coroutines)
    shards: int = 1  # the queue's shard count, when the entry gives one (docs/scaling.md)
    fair: bool = False  # several queues: ask a different one first at each fetch (rotate)


@dataclass(frozen=True)
class ScaleSpec:
    """An autoscaled queue (``mail = 1..8``): between ``low`` and ``high`` threads (process
    slots; an async pool's tasks at once), as :mod:`ztq.worker.autoscale` decides. ``low``
    may be 0: the queue is served on demand."""

    queue: str
    low: int
    high: int
    pool: str = "thread"
    shards: int = 1

    def initial(self) -> list[ThreadSpec]:
        """The executors the worker starts with: the minimum."""
        if self.pool == "async":
            return [ThreadSpec(f"{self.queue}-0", (self.queue,), "async", self.low,
                               self.shards)] if self.low else []  # fmt: skip
        return [
            ThreadSpec(f"{self.queue}-{i}", (self.queue,), self.pool, 1, self.shards)
            for i in range(self.low)
        ]


@dataclass(frozen=True)
class WorkerConfig:
    redis_url: str = "redis://127.0.0.1:6379/0"
    prefix: str = "ztq"
    app: str = ""  # module:attribute of the App served; "" = the default app
    name: str = ""
    imports: tuple[str, ...] = ()
    threads: tuple[ThreadSpec, ...] = ()
    active_config: bool = True
    lease: float = 15.0  # seconds a fetched task is held without a heartbeat renewing it
    heartbeat: float = 3.0  # seconds between heartbeats (lease renewals, reaper, commands)
    max_lost: int = 3  # a task that lost its worker this often is a poison pill
    prefetch: int = 32  # most tasks one executor leases in one call (adaptive, see executor)
    result_ttl: float = 3600.0
    history_maxlen: int = 10_000
    grace: float = 30.0  # seconds running tasks get to finish on SIGTERM
    idle_wait: float = 5.0  # longest block on the wake lists
    retry_backoff: float = 1.0  # seconds before the first retry; doubles per attempt
    burst: bool = False
    lost_after: float = 30.0
    health: str = ""  # PORT or HOST:PORT of /livez and /readyz (worker/health.py)
    scaled: tuple[ScaleSpec, ...] = ()  # autoscaled queues (their minimum is in ``threads``)
    broadcast_catch_up: float = 0.0  # seconds of older broadcasts a starting worker runs
    autoscale_cpu_max: float = 85.0  # host CPU % from which the autoscaler adds nothing
    autoscale_memory_max: float = 90.0  # host memory % from which it adds nothing, sheds one
    autoscale_threads_max: int = 0  # most threads of the autoscaled queues together; 0: no cap
    autoscale_idle_beats: int = 3  # heartbeats threads stay unneeded before they are let go

    @property
    def worker_id(self) -> str:
        return self.name or f"{socket.gethostname()}.{os.getpid()}"

    @property
    def queues(self) -> list[str]:
        seen: list[str] = []
        for spec in self.threads:
            for q in spec.queues:
                if q not in seen:
                    seen.append(q)
        return seen + [s.queue for s in self.scaled if s.queue not in seen]

    @property
    def shards(self) -> dict[str, int]:
        """The shard counts the ``[queues]`` entries give (``hot = 8 shards=3``)."""
        out: dict[str, int] = {}
        given = [(t.queues[0], t.shards) for t in self.threads]
        for queue, shards in given + [(s.queue, s.shards) for s in self.scaled]:
            if shards > 1:
                out[queue] = max(shards, out.get(queue, 1))
        return out

    def with_changes(self, **changes: object) -> WorkerConfig:
        return replace(self, **changes)  # type: ignore[arg-type]


# WorkerConfig fields that are not named like their setting
FIELD = {"modules": "imports"}


POOLS = ("thread", "process", "async")
MAX_THREADS = 256
MAX_ASYNC = 10_000  # coroutines of one async pool


def take_shards(words: list[str], key: str, where: str) -> int:
    """Remove the ``shards=N`` words of an entry; the last one's N (1 when none)."""
    shards = 1
    for word in [w for w in words if w.startswith("shards=")]:
        words.remove(word)
        try:
            shards = check_shards(int(word[len("shards=") :]))
        except (ValueError, InvalidName):
            raise ConfigError(
                f"{where}queue entry {key!r}: {word!r} is not a shard count (1-{MAX_SHARDS})"
            ) from None
    return shards


def parse_queue_entry(
    key: str, value: str, where: str = "", *, ztq_style: bool = False
) -> list[ThreadSpec]:
    """``default = 2`` / ``pdf = 1 process`` / ``crawl = 200 async`` / ``fast = urgent,
    default`` / ``hot = 8 shards=3`` → executor specs. ``N async`` is one thread running up
    to N ``async def`` tasks at once on its event loop; ``shards=N`` says the queue is
    spread over N shards (each of its threads fetches from all of them in turn); a list of
    queues may end with ``fair`` (ask a different queue first at each fetch) or ``strict``
    (the default: always in the order written).

    In a ZTQ file (``ztq_style``: its ``[server]`` gives ``host``/``port``/``db``) an entry
    of whole numbers is ZTQ's: one thread per number, the number being the seconds ZTQ's
    thread paused after each task (``default = 0`` is one thread, ``mail = 0, 0`` two). ztq
    threads never pause, so a pause other than 0 is logged and not kept."""
    words = value.replace(",", " ").split()
    if words and all(w.isdigit() for w in words) and (ztq_style or len(words) > 1):
        return ztq_queue_entry(key, value, words, where, ztq_style)
    order = words.pop() if words and words[-1] in ("fair", "strict") else "strict"
    fair = order == "fair"
    shards = take_shards(words, key, where)
    pool = "thread"
    if words and words[-1] in POOLS:
        pool = words.pop()
    if not words:
        raise ConfigError(f"{where}queue entry {key!r} has no value")
    try:
        if len(words) == 1 and words[0].isdigit():
            count = int(words[0])
            check_queue(key)
            if fair:
                raise ConfigError(f"{where}'fair' rotates between several queues: "
                                  f"'{key} = a, b fair', not {key!r} = {value!r}")  # fmt: skip
            if pool == "async":
                if count > MAX_ASYNC:
                    raise ConfigError(
                        f"{where}async tasks for {key!r} must be 0-{MAX_ASYNC}, not {count}"
                    )
                return [ThreadSpec(f"{key}-0", (key,), pool, count, shards)] if count else []
            if count > MAX_THREADS:
                raise ConfigError(
                    f"{where}thread count for {key!r} must be 0-{MAX_THREADS}, not {count}"
                )
            return [ThreadSpec(f"{key}-{i}", (key,), pool, 1, shards) for i in range(count)]
        if shards > 1:
            raise ConfigError(
                f"{where}shards=N goes with a thread count ('{words[0]} = 4 shards={shards}'), "
                f"not with a list of queues ({key!r} = {value!r})"
            )
        for q in words:
            check_queue(q)
        if not NAME.match(key):
            raise ConfigError(f"{where}thread name {key!r} is not allowed")
        if pool == "async":
            raise ConfigError(
                f"{where}an async pool serves one queue, with a number of tasks: "
                f"'{words[0]} = 100 async', not {key!r} = {value!r}"
            )
        return [ThreadSpec(key, tuple(words), pool, fair=fair)]
    except InvalidName as exc:
        raise ConfigError(f"{where}{exc}") from exc


RANGE = re.compile(r"^(\d+)\.\.(\d+)$")


def parse_scale_entry(key: str, value: str, where: str = "") -> ScaleSpec | None:
    """``mail = 1..8`` / ``pdf = 0..4 process`` / ``crawl = 10..200 async`` / ``hot = 2..8
    shards=3`` → an autoscaled queue; None when ``value`` gives no range (a plain entry)."""
    words = value.replace(",", " ").split()
    found = [w for w in words if RANGE.match(w)]
    if not found:
        return None
    rest = [w for w in words if w not in found]
    shards = take_shards(rest, key, where)
    pool = rest.pop() if rest and rest[-1] in POOLS else "thread"
    if len(found) > 1 or rest or words.index(found[0]) != 0:
        raise ConfigError(
            f"{where}an autoscaled queue is 'QUEUE = MIN..MAX [thread|process|async] "
            f"[shards=N]', one queue a line, not {key!r} = {value.strip()!r}"
        )
    try:
        check_queue(key)
    except InvalidName as exc:
        raise ConfigError(f"{where}{exc}") from exc
    m = RANGE.match(found[0])
    assert m is not None
    low, high = int(m.group(1)), int(m.group(2))
    top = MAX_ASYNC if pool == "async" else MAX_THREADS
    if not 0 <= low <= high or not 1 <= high <= top:
        raise ConfigError(
            f"{where}autoscaled {key!r}: {found[0]} must be MIN..MAX with 0 <= MIN <= MAX and "
            f"1 <= MAX <= {top}" + (" (an async pool's tasks at once)" if pool == "async" else "")
        )
    return ScaleSpec(key, low, high, pool, shards)


def check_scaled(cfg: WorkerConfig) -> None:
    """An autoscaled queue is written once, and is not also given a fixed thread count (a
    list of queues served by one thread may name it); the minima fit in
    ``autoscale_threads_max``."""
    seen: set[str] = set()
    for s in cfg.scaled:
        if s.queue in seen:
            raise ConfigError(f"autoscaled queue {s.queue!r} is given twice")
        seen.add(s.queue)
    for s in cfg.scaled:
        mine = [t for t in cfg.threads if t.queues == (s.queue,)]
        if mine != s.initial():
            raise ConfigError(
                f"queue {s.queue!r} is autoscaled ({s.low}..{s.high}) and also given a thread "
                "count: keep one of the two"
            )
    fixed = sum(s.low for s in cfg.scaled if s.pool != "async")
    if cfg.autoscale_threads_max and fixed > cfg.autoscale_threads_max:
        raise ConfigError(
            f"the autoscaled queues' minima add up to {fixed} threads, more than "
            f"autoscale_threads_max ({cfg.autoscale_threads_max})"
        )


def ztq_queue_entry(
    key: str, value: str, words: list[str], where: str, ztq_style: bool
) -> list[ThreadSpec]:
    """ZTQ's ``[queues]`` entry: one thread per number (its pause after each task)."""
    if not ztq_style:
        raise ConfigError(
            f"{where}queue entry {key} = {value.strip()!r} is ZTQ's list of threads (one per "
            "number), read so only in a file that gives ZTQ's host/port/db; here write "
            f"{key} = {len(words)}"
        )
    try:
        check_queue(key)
    except InvalidName as exc:
        raise ConfigError(f"{where}{exc}") from exc
    if len(words) > MAX_THREADS:
        raise ConfigError(
            f"{where}thread count for {key!r} must be 0-{MAX_THREADS}, not {len(words)}"
        )
    if any(int(w) for w in words):
        log.warning(
            "%s%s = %s: ZTQ's pause after each task is not kept (ztq threads never pause); "
            "%d thread(s) for %s", where, key, value.strip(), len(words), key,
        )  # fmt: skip
    return [ThreadSpec(f"{key}-{i}", (key,)) for i in range(len(words))]


def load_config(path: str | os.PathLike[str] | None = None, **overrides: object) -> WorkerConfig:
    """The worker's settings: ``overrides`` (flags) > environment > the ini at ``path`` > default.

    ``overrides`` are :class:`WorkerConfig` fields; ``None``, ``()`` and ``[]`` mean "not
    given". ``threads`` come from the flags, else ``[queues]``, else one thread on
    ``default``; ``burst`` is a flag only.
    """
    known = {f.name for f in fields(WorkerConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise TypeError(f"load_config() got unknown settings: {', '.join(unknown)}")
    given = {k: v for k, v in overrides.items() if v is not None and v != () and v != []}
    ini = settings.read_ini(path, TABLE) if path is not None else None
    ours = {*settings.WORKER_SECTIONS, *settings.QUEUE_SECTIONS, settings.APP_SECTION}
    if ini is not None and not ini.sections & ours:
        raise ConfigError(f"{ini.path}: no [server] or [queues] section")
    flags = {name: given.get(FIELD.get(name, name)) for name in WORKER}
    got = settings.resolve(TABLE, WORKER, flags=flags, ini=ini.values if ini else None)
    if got["app"].value:  # an app's own Redis URL and prefix are flags (docs/settings.md)
        app = load_app(got["app"].value)
        url, prefix = connection_flags(app, flags["redis_url"], flags["prefix"])
        if (url, prefix) != (flags["redis_url"], flags["prefix"]):
            flags |= {"redis_url": url, "prefix": prefix}
            got = settings.resolve(TABLE, WORKER, flags=flags, ini=ini.values if ini else None)
    values: dict[str, object] = {FIELD.get(n, n): r.value for n, r in got.items()}
    threads: list[ThreadSpec] = []
    scaled: list[ScaleSpec] = []
    for entry in ini.queues if ini else ():
        scale = parse_scale_entry(entry.key, entry.raw, f"{entry.where}: ")
        if scale is not None:
            scaled.append(scale)
            threads += scale.initial()
            continue
        threads += parse_queue_entry(
            entry.key, entry.raw, f"{entry.where}: ", ztq_style=ini is not None and ini.ztq_style
        )
    if ini is not None and "log" in ini.sections:
        log.warning(
            "%s: [log] is ZTQ's logging section and is not read: ztq logs to stderr "
            "(--log-level, --log-format or ZTQ_LOG_LEVEL; redirect stderr to a file)",
            ini.path,
        )
    flag_threads: Sequence[ThreadSpec] = given.get("threads") or ()  # type: ignore[assignment]
    flag_scaled: Sequence[ScaleSpec] = given.get("scaled") or ()  # type: ignore[assignment]
    if flag_threads or flag_scaled:  # the flags' queues replace the file's
        threads = [*flag_threads, *(t for s in flag_scaled for t in s.initial())]
        scaled = list(flag_scaled)
    values["scaled"] = tuple(scaled)
    values["threads"] = tuple(threads) or (
        () if scaled else (ThreadSpec("default-0", ("default",)),)
    )
    values.update({k: v for k, v in given.items() if k not in values})  # burst
    cfg = WorkerConfig(**values)  # type: ignore[arg-type]
    check_scaled(cfg)
    if cfg.lease < 2 * cfg.heartbeat:
        raise ConfigError(
            f"lease ({cfg.lease:g}s, from {got['lease'].source}) must be at least twice the "
            f"heartbeat ({cfg.heartbeat:g}s, from {got['heartbeat'].source})"
        )
    return cfg
