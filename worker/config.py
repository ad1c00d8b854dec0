"""Worker configuration: one ini file (ZTQ's ``[server]`` + ``[queues]``) plus flags.

Read in one place and passed down. The ini may be the console's ``app.ini``: the worker then
reads ``[ztq:worker]`` / ``[ztq:queues]`` and takes ``ztq.redis_url`` from ``[app:main]``.
``ZTQ_REDIS_URL`` overrides the file; a flag overrides both.

    [server]
    redis = redis://127.0.0.1:6379/0
    name = pdf-box-1              ; alias shown in the console (default host.pid)
    modules = myapp.tasks, myapp.mail
    active_config = true          ; the console may change the thread allocation
    lease = 15                    ; seconds; see docs/worker.md

    [queues]
    default = 2                   ; two threads for queue "default"
    pdf = 1 process               ; one killable process slot
    fast = urgent, default        ; one thread named "fast" watching urgent, then default
"""

from __future__ import annotations

import configparser
import os
import re
import socket
from dataclasses import dataclass, replace
from pathlib import Path

from ztq.core.errors import ConfigError, InvalidName
from ztq.core.keys import check_queue

ENV_URL = "ZTQ_REDIS_URL"


@dataclass(frozen=True)
class ThreadSpec:
    """One executor: the queues it watches in order, and how it runs tasks."""

    name: str
    queues: tuple[str, ...]
    pool: str = "thread"  # or "process": a killable child process slot


@dataclass(frozen=True)
class WorkerConfig:
    redis_url: str = "redis://127.0.0.1:6379/0"
    prefix: str = "ztq"
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
        return seen

    def with_changes(self, **changes: object) -> WorkerConfig:
        return replace(self, **changes)  # type: ignore[arg-type]


NAME = re.compile(r"^[A-Za-z0-9_.:\-]{1,64}$")
SERVER_SECTIONS = ("server", "ztq:worker")
QUEUE_SECTIONS = ("queues", "ztq:queues")
_FLOATS = ("lease", "heartbeat", "result_ttl", "grace", "idle_wait", "lost_after", "retry_backoff")
_INTS = ("max_lost", "prefetch", "history_maxlen")
_KNOWN = {"redis", "name", "alias", "prefix", "modules", "active_config", *_FLOATS, *_INTS}


def _line_of(path: Path, section: str, key: str) -> int:
    """The line number of ``key`` in ``[section]`` (configparser does not keep them)."""
    current = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            current = stripped[1:-1].strip()
        elif current == section and stripped.split("=", 1)[0].strip().lower() == key.lower():
            return number
    return 0


def parse_queue_entry(key: str, value: str, where: str = "") -> list[ThreadSpec]:
    """``default = 2`` / ``pdf = 1 process`` / ``fast = urgent, default`` → thread specs."""
    words = value.replace(",", " ").split()
    pool = "thread"
    if words and words[-1] in ("thread", "process"):
        pool = words.pop()
    if not words:
        raise ConfigError(f"{where}queue entry {key!r} has no value")
    try:
        if len(words) == 1 and words[0].isdigit():
            count = int(words[0])
            check_queue(key)
            if count < 0 or count > 256:
                raise ConfigError(f"{where}thread count for {key!r} must be 0-256, not {count}")
            return [ThreadSpec(f"{key}-{i}", (key,), pool) for i in range(count)]
        for q in words:
            check_queue(q)
        if not NAME.match(key):
            raise ConfigError(f"{where}thread name {key!r} is not allowed")
        return [ThreadSpec(key, tuple(words), pool)]
    except InvalidName as exc:
        raise ConfigError(f"{where}{exc}") from exc


def load_config(path: str | os.PathLike[str] | None = None, **overrides: object) -> WorkerConfig:
    """Read the ini (if any), then ``ZTQ_REDIS_URL``, then ``overrides`` (CLI flags)."""
    values: dict[str, object] = {}
    threads: list[ThreadSpec] = []
    if path is not None:
        file = Path(path)
        if not file.is_file():
            raise ConfigError(f"config file {file} does not exist")
        parser = configparser.ConfigParser(inline_comment_prefixes=(";", "#"), interpolation=None)
        try:
            parser.read(file, encoding="utf-8")
        except configparser.Error as exc:
            raise ConfigError(f"{file}: {exc}") from exc
        server = next((s for s in SERVER_SECTIONS if parser.has_section(s)), None)
        queues = next((s for s in QUEUE_SECTIONS if parser.has_section(s)), None)
        if parser.has_section("app:main") and parser.has_option("app:main", "ztq.redis_url"):
            values["redis_url"] = parser.get("app:main", "ztq.redis_url")
        if server is None and queues is None and "redis_url" not in values:
            raise ConfigError(f"{file}: no [server] or [queues] section")
        if server is not None:
            for key, raw in parser.items(server):
                where = f"{file}:{_line_of(file, server, key)}: "
                values.update(_server_option(key, raw, where))
        if queues is not None:
            for key, raw in parser.items(queues):
                where = f"{file}:{_line_of(file, queues, key)}: "
                threads += parse_queue_entry(key, raw, where)
    env_url = os.environ.get(ENV_URL)
    if env_url:
        values["redis_url"] = env_url
    if threads:
        values["threads"] = tuple(threads)
    values.update({k: v for k, v in overrides.items() if v not in (None, (), [])})
    cfg = WorkerConfig(**values)  # type: ignore[arg-type]
    if not cfg.threads:
        cfg = cfg.with_changes(threads=(ThreadSpec("default-0", ("default",)),))
    if cfg.name and not NAME.match(cfg.name):
        raise ConfigError(f"worker name {cfg.name!r} is not allowed")
    if cfg.lease < 2 * cfg.heartbeat:
        raise ConfigError(
            f"lease ({cfg.lease}s) must be at least twice the heartbeat ({cfg.heartbeat}s)"
        )
    return cfg


def _server_option(key: str, raw: str, where: str) -> dict[str, object]:
    if key not in _KNOWN:
        raise ConfigError(f"{where}unknown option {key!r}; known: {', '.join(sorted(_KNOWN))}")
    if key == "redis":
        if "://" not in raw:
            raise ConfigError(
                f"{where}redis must be a URL such as redis://host:6379/0, not {raw!r}"
            )
        return {"redis_url": raw}
    if key in ("name", "alias"):
        return {"name": raw}
    if key == "prefix":
        return {"prefix": raw}
    if key == "modules":
        return {"imports": tuple(m for m in raw.replace(",", " ").split() if m)}
    if key == "active_config":
        if raw.lower() not in ("true", "false", "yes", "no", "1", "0", "on", "off"):
            raise ConfigError(f"{where}active_config must be true or false, not {raw!r}")
        return {"active_config": raw.lower() in ("true", "yes", "1", "on")}
    try:
        number: float = int(raw) if key in _INTS else float(raw)
    except ValueError:
        kind = "a whole number" if key in _INTS else "a number"
        raise ConfigError(f"{where}{key} must be {kind}, not {raw!r}") from None
    if number <= 0:
        raise ConfigError(f"{where}{key} must be > 0, not {raw!r}")
    return {key: number}
