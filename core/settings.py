"""Every ztq setting, resolved in one place by one rule: flag > environment > ini > default.

The worker (``ztq.worker.config.load_config``), the console (``ztq.console.config.load``),
the ``ztq`` commands and :func:`ztq.core.connect` all resolve through :func:`resolve`, so a
worker and a console started with the same environment and ini look at the same Redis keys.

- **flag**: an explicit argument (a command-line flag, ``connect(url, prefix=...)``,
  ``load_config(path, lease=...)``). ``None`` or ``""`` means "not given".
- **environment**: ``ZTQ_<NAME>`` (``ZTQ_REDIS_URL``, ``ZTQ_PREFIX``, ``ZTQ_LEASE``, ...;
  the console's keep ``ZTQ_CONSOLE_<NAME>``), read when resolving, never at import time. An
  empty variable counts as unset.
- **ini**: ``ztq.<name>`` in ``[app:main]`` of ``app.ini`` (for the console these are the
  Pyramid settings), and the worker's short keys in ``[server]`` or ``[ztq:worker]``
  (``redis``, ``prefix``, ``lease``, ``name``/``alias``, ``modules``, ...). A setting given in
  both places with different values is a :class:`ConfigError` naming both: a worker and a
  console reading one ``app.ini`` must never disagree. An empty value counts as unset.
- **default**: the ``default`` of the :data:`SETTINGS` table.

Every bad value raises :class:`ConfigError` naming the setting and where the value came
from: ``flag lease``, ``environment variable ZTQ_LEASE``, ``worker.ini:5``.
"""

from __future__ import annotations

import configparser
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ztq.core.alerts.rules import parse_rules
from ztq.core.engine.keys import PREFIX_NAME
from ztq.core.errors import ConfigError

NAME = re.compile(r"^[A-Za-z0-9_.:\-]{1,64}$")  # worker and thread names
APP_SECTION = "app:main"
WORKER_SECTIONS = ("server", "ztq:worker")
QUEUE_SECTIONS = ("queues", "ztq:queues")
MAX_THREADS_ALL = 100_000  # bound of autoscale_threads_max (a worker's threads in all)


# -- parsers: raw (a string, or an already typed flag value) -> value, or ValueError(reason) --
def number(
    low: float = 0.0, high: float = math.inf, *, whole: bool = False, above: bool = False
) -> Callable[[Any], float]:
    """A number in ``[low, high]`` (``(low, high]`` when ``above``); ``whole``: an int."""
    kind = "a whole number" if whole else "a number"
    if high != math.inf:
        bounds = f"between {low:g} and {high:g}"
    else:
        bounds = f"> {low:g}" if above else f">= {low:g}"

    def parse(raw: Any) -> float:
        value: float
        try:
            if isinstance(raw, bool):
                raise ValueError
            if not whole:
                value = float(raw)
            elif isinstance(raw, float):
                if not raw.is_integer():
                    raise ValueError
                value = int(raw)
            else:
                value = int(raw) if isinstance(raw, int) else int(str(raw).strip())
        except (TypeError, ValueError):
            raise ValueError(f"must be {kind}, not {raw!r}") from None
        if not math.isfinite(value) or not low <= value <= high or (above and value == low):
            raise ValueError(f"must be {kind} {bounds}, not {raw!r}")
        return value

    return parse


def boolean(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text not in ("true", "false", "yes", "no", "1", "0", "on", "off"):
        raise ValueError(f"must be true or false, not {raw!r}")
    return text in ("true", "yes", "1", "on")


def redis_url(raw: Any) -> str:
    if not isinstance(raw, str) or "://" not in raw:
        raise ValueError(f"must be a URL such as redis://host:6379/0, not {raw!r}")
    url = raw.strip()
    if url.startswith("redis+sentinel://"):
        from ztq.core.engine.connection import parse_sentinel_url  # it imports this module

        try:
            parse_sentinel_url(url)
        except ConfigError as exc:
            raise ValueError(f"is not valid: {exc}") from None
    return url


def key_prefix(raw: Any) -> str:
    if not isinstance(raw, str) or not PREFIX_NAME.match(raw):
        raise ValueError(f"must be 1-32 of A-Z a-z 0-9 _ . -, not {raw!r}")
    return raw


def worker_name(raw: Any) -> str:
    if not isinstance(raw, str) or not NAME.match(raw):
        raise ValueError(f"must be 1-64 of A-Z a-z 0-9 _ . : -, not {raw!r}")
    return raw


def module_list(raw: Any) -> tuple[str, ...]:
    if isinstance(raw, (tuple, list)):
        return tuple(str(m) for m in raw)
    return tuple(m for m in str(raw).replace(",", " ").split() if m)


def host_port(raw: Any) -> str:
    """``8080`` or ``HOST:8080`` (checked here, split by the worker), or empty."""
    value = str(raw).strip()
    if not value:
        return ""
    _, _, port = value.rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"must be PORT or HOST:PORT, not {raw!r}")
    return value


def text(raw: Any) -> str:
    return str(raw)


def webhook_url(raw: Any) -> str:
    """An ``http://`` or ``https://`` URL, or empty (no webhook)."""
    value = str(raw).strip()
    if value and not re.match(r"^https?://[^\s/]+(/\S*)?$", value):
        raise ValueError(f"must be an http:// or https:// URL, not {raw!r}")
    return value


def choice(*allowed: str) -> Callable[[Any], str]:
    def parse(raw: Any) -> str:
        value = str(raw).strip().lower()
        if value not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}, not {raw!r}")
        return value

    return parse


SYSTEM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,31}$")  # a path segment of the console


def system_name(raw: Any) -> str:
    """A system's name, or empty (none chosen)."""
    if not isinstance(raw, str) or not (raw.strip() == "" or SYSTEM_NAME.match(raw.strip())):
        raise ValueError(f"must be 1-32 of A-Z a-z 0-9 _ - (a letter or digit first), not {raw!r}")
    return raw.strip()


def system_list(raw: Any) -> tuple[tuple[str, str, str], ...]:
    """``NAME URL [PREFIX]`` a line (``;`` separates them too; blank lines and ``#``
    comments skipped) -> ((name, url, prefix or ""), ...), each part checked; a repeated
    name is an error (two on the same Redis and prefix: see :func:`systems_of`)."""
    if isinstance(raw, tuple):
        return raw
    out: list[tuple[str, str, str]] = []
    for number_, line in enumerate(re.split(r"[\n;]", str(raw)), start=1):
        parts = line.split("#", 1)[0].split()
        if not parts:
            continue
        where = f"entry {number_} ({line.strip()!r})"
        if len(parts) not in (2, 3):
            raise ValueError(f"{where}: must be 'NAME URL [PREFIX]', found {len(parts)} fields")
        try:
            name, url = system_name(parts[0]), redis_url(parts[1])
            prefix = key_prefix(parts[2]) if len(parts) == 3 else ""
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        if any(other == name for other, _, _ in out):
            raise ValueError(f"{where}: the name {name!r} is given twice")
        out.append((name, url, prefix))
    return tuple(out)


def app_spec(raw: Any) -> str:
    value = str(raw).strip()
    module, sep, attr = value.partition(":")
    if not (module and sep and attr.isidentifier()):
        raise ValueError(f"must be module:attribute such as myproj.tasks:app, not {raw!r}")
    return value


@dataclass(frozen=True)
class Setting:
    """One setting: where it may be given, how it is checked, its default and meaning."""

    name: str
    parse: Callable[[Any], Any] = field(repr=False)
    default: Any
    doc: str
    env: str = ""  # default: ZTQ_<NAME> (dots become underscores)
    app_key: str | None = ""  # key in [app:main] / Pyramid settings; default ztq.<name>
    worker_keys: tuple[str, ...] = ()  # keys in [server] / [ztq:worker]
    secret: bool = False  # never echoed in error messages

    def __post_init__(self) -> None:
        if not self.env:
            object.__setattr__(self, "env", "ZTQ_" + self.name.upper().replace(".", "_"))
        if self.app_key == "":
            object.__setattr__(self, "app_key", f"ztq.{self.name}")


def _worker(name: str, parse: Callable[[Any], Any], default: Any, doc: str) -> Setting:
    return Setting(name, parse, default, doc, worker_keys=(name,))


SETTINGS: tuple[Setting, ...] = (
    Setting("redis_url", redis_url, "redis://127.0.0.1:6379/0",
            "Redis URL (redis+cluster://host:port for a Cluster)", worker_keys=("redis",)),
    _worker("prefix", key_prefix, "ztq", "prefix of every Redis key"),
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
    Setting("systems", system_list, (), "more Redis systems the console and the ztq "
            "commands can watch: one 'NAME URL [PREFIX]' a line (';' separates them too; "
            "PREFIX defaults to prefix); docs/systems.md", app_key="ztq.systems"),
    Setting("system", system_name, "", "the system of ztq.systems a ztq command works on "
            "(flag --system); default: the one redis_url and prefix give", app_key=None),
    Setting("log_level", choice("debug", "info", "warning", "error", "critical"), "info",
            "level of the worker's and the ztq commands' log: info writes one line per run, "
            "debug a start line too", worker_keys=("log_level",)),
    Setting("log_format", choice("text", "json"), "text",
            "text lines, or JSON lines with the running task's id, name, queue and attempt",
            worker_keys=("log_format",)),
    Setting("console.secret", text, "", "keys the session handles in Redis (changing it ends "
            "every session); the console refuses to start without a long random one",
            secret=True),
    Setting("console.users", text, "", "one 'NAME ROLE HASH' a line (';' separates them "
            "too); the console refuses to start without users unless SSO is set",
            secret=True),
    Setting("console.secure_cookies", boolean, False, "cookies over HTTPS only"),
    Setting("console.session_hours", number(0.1, 24 * 30), 12.0,
            "a session ends this long after its sign-in (hours)"),
    Setting("console.session_idle_minutes", number(1, 24 * 60 * 30), 60.0,
            "a session ends after this long without a request (minutes)"),
    Setting("console.trusted_proxies", text, "", "addresses or networks of reverse proxies "
            "(space separated): only they may send X-Forwarded-For and the SSO headers"),
    Setting("console.sso_header", text, "", "header naming the user that the authenticating "
            "proxy sets, e.g. X-Forwarded-User (empty: no SSO)"),
    Setting("console.sso_groups_header", text, "X-Forwarded-Groups",
            "header with the user's groups (comma separated)"),
    Setting("console.sso_roles", text, "", "one 'GROUP ROLE' a line (';' separates them "
            "too): the role of SSO users in GROUP; '*' matches every user"),
    Setting("console.lost_after", number(1, 86400), 30.0,
            "seconds without a heartbeat before the console shows a worker as lost"),
    Setting("console.page_size", number(5, 500, whole=True), 50, "rows per page"),
    Setting("console.bulk_batch", number(1, 10_000, whole=True), 500,
            "tasks per script call of a bulk action"),
    Setting("console.bulk_seconds", number(0, 30), 0.5,
            "seconds a bulk request works before it shows progress"),
    Setting("console.login_attempts", number(1, 100, whole=True), 5,
            "failed logins of a user name or client address before the first lock"),
    Setting("console.login_lock_max", number(1, 86400), 900.0,
            "the longest login lock (seconds; locks start at 1 s and double per failure)"),
    Setting("alerts.rules", parse_rules, (), "alert rules, one a line (';' separates them "
            "too): error_rate, oldest_wait, no_worker, worker_lost (docs/alerts.md)"),
    Setting("alerts.webhook", webhook_url, "", "URL that alerts are POSTed to as JSON "
            "(Slack-compatible 'text'); empty: alerts are only shown", secret=True),
    Setting("alerts.every", number(0.1, 3600), 30.0, "seconds between two evaluations"),
    Setting("alerts.repeat_minutes", number(0, 7 * 24 * 60), 0.0,
            "remind of an alert still firing every this many minutes; 0: never"),
    Setting("alerts.timeout", number(0.1, 60), 5.0,
            "seconds one webhook attempt may take"),
    Setting("alerts.attempts", number(1, 10, whole=True), 3,
            "webhook attempts per message before it counts as failed (retried next round)"),
)  # fmt: skip
BY_NAME = {s.name: s for s in SETTINGS}
BY_APP_KEY = {s.app_key: s for s in SETTINGS if s.app_key}
BY_WORKER_KEY = {k: s for s in SETTINGS for k in s.worker_keys}
CONNECTION = ("redis_url", "prefix")
LOGGING = ("log_level", "log_format")  # read by the ztq command before it runs one
WORKER = tuple(s.name for s in SETTINGS if s.worker_keys and s.name not in LOGGING)
CONSOLE = (*CONNECTION, "systems", *(s.name for s in SETTINGS if s.name.startswith("console.")))
ALERTS = tuple(s.name for s in SETTINGS if s.name.startswith("alerts."))


@dataclass(frozen=True)
class IniValue:
    """A raw value from an ini file or the Pyramid settings, and where it was written."""

    raw: str
    where: str  # "app.ini:12", or "ini" when the line is unknown
    key: str  # as written: "ztq.lease", "lease", "alias"


@dataclass(frozen=True)
class Resolved:
    value: Any
    source: str  # "flag lease", "environment variable ZTQ_LEASE", "app.ini:12", "default"


@dataclass(frozen=True)
class ConnectionSettings:
    redis_url: str
    prefix: str


DEFAULT_SYSTEM = "default"


@dataclass(frozen=True)
class System:
    """One Redis system (a Redis and a key prefix) that the console and the ``ztq``
    commands can watch, by name; ``default``: the one ``redis_url`` and ``prefix`` give."""

    name: str
    redis_url: str
    prefix: str
    default: bool = False


def systems_of(default: ConnectionSettings, listed: Resolved) -> tuple[System, ...]:
    """The default system first (named by the entry of ``systems`` on its URL and prefix,
    else ``default``), then the other entries of ``systems`` in their order; an entry
    without a prefix takes the default's."""
    first = System(DEFAULT_SYSTEM, default.redis_url, default.prefix, default=True)
    others: list[System] = []
    seen: dict[tuple[str, str], str] = {}
    for name, url, prefix in listed.value:
        system = System(name, url, prefix or default.prefix)
        where = (system.redis_url, system.prefix)
        if where in seen:
            raise ConfigError(
                f"{listed.source}: systems {seen[where]!r} and {name!r} are the same Redis and "
                "prefix: keep one"
            )
        seen[where] = name
        if where == (first.redis_url, first.prefix):
            first = System(name, first.redis_url, first.prefix, default=True)
        else:
            others.append(system)
    for system in others:
        if system.name == first.name:
            raise ConfigError(
                f"{listed.source}: systems names {system.name!r} a Redis or prefix other than "
                f"the default system's ({first.name}: redis_url and prefix): rename it"
            )
    return (first, *others)


def _fail(setting: Setting, label: str, source: str, reason: str) -> ConfigError:
    if setting.secret:
        reason = reason.split(", not ", 1)[0]
    return ConfigError(f"{source}: {label} {reason}")


def parse(setting: Setting, raw: Any, source: str, label: str = "") -> Any:
    """``raw`` checked by the setting's parser; ConfigError names ``source`` otherwise."""
    try:
        return setting.parse(raw)
    except ValueError as exc:
        raise _fail(setting, label or setting.name, source, str(exc)) from None


def resolve(
    names: Iterable[str],
    *,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    ini: Mapping[str, IniValue] | None = None,
) -> dict[str, Resolved]:
    """Each named setting from the first place that gives it: flag, environment, ini, default.

    ``environ`` defaults to ``os.environ`` as it is now; ``ini`` is keyed by setting name
    (see :func:`app_values`, :class:`IniFile`).
    """
    flags = flags or {}
    environ = os.environ if environ is None else environ
    ini = ini or {}
    out: dict[str, Resolved] = {}
    for name in names:
        s = BY_NAME[name]
        flag = flags.get(name)
        if flag is not None and flag != "" and flag != ():
            source = f"flag {name}"
            out[name] = Resolved(parse(s, flag, source, name), source)
        elif environ.get(s.env):
            source = f"environment variable {s.env}"
            out[name] = Resolved(parse(s, environ[s.env], source, name), source)
        elif name in ini:
            v = ini[name]
            out[name] = Resolved(parse(s, v.raw, v.where, v.key), v.where)
        else:
            out[name] = Resolved(s.default, "default")
    return out


def line_of(path: Path, section: str, key: str) -> int:
    """The line number of ``key`` in ``[section]`` (configparser does not keep them)."""
    current = None
    for number_, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            current = stripped[1:-1].strip()
        elif current == section and stripped.split("=", 1)[0].strip().lower() == key.lower():
            return number_
    return 0


def _where(path: Path | None, section: str, key: str) -> str:
    if path is None:
        return "ini"
    return f"{path}:{line_of(path, section, key)}" if path.is_file() else str(path)


def app_values(settings: Mapping[str, Any], path: Path | None = None) -> dict[str, IniValue]:
    """The ``ztq.*`` keys of ``[app:main]`` (or of Pyramid settings), by setting name.

    An unknown ``ztq.`` key is an error (a typo would otherwise be ignored silently).
    """
    out: dict[str, IniValue] = {}
    for key, raw in settings.items():
        if not key.startswith("ztq.") or raw is None or str(raw).strip() == "":
            continue
        where = _where(path, APP_SECTION, key)
        setting = BY_APP_KEY.get(key)
        if setting is None:
            known = ", ".join(sorted(BY_APP_KEY))
            raise ConfigError(f"{where}: unknown setting {key!r}; known: {known}")
        out[setting.name] = IniValue(str(raw), where, key)
    return out


# ZTQ's worker file gave the Redis as `host`, `port` and `db` (its `setup_redis` arguments)
ZTQ_REDIS_KEYS = ("host", "port", "db")


def ztq_redis_url(given: Mapping[str, IniValue]) -> IniValue:
    """ZTQ's ``host``/``port``/``db`` as the ``redis_url`` ini value (missing ones: ZTQ's
    defaults, localhost, 6379 and 0); a bad one is an error naming its line."""
    host = given["host"].raw.strip() if "host" in given else "localhost"
    if not re.fullmatch(r"[A-Za-z0-9_.\-]{1,253}|[0-9A-Fa-f:.]{2,45}", host):
        raise ConfigError(
            f"{given['host'].where}: host must be a host name or address, not {host!r}"
        )
    numbers = {}
    for key, default, low, high in (("port", 6379, 1, 65535), ("db", 0, 0, 1_000_000)):
        value = given.get(key)
        if value is None:
            numbers[key] = default
            continue
        try:
            numbers[key] = int(number(low, high, whole=True)(value.raw))
        except ValueError as exc:
            raise ConfigError(f"{value.where}: {key} {exc}") from None
    first = next(given[k] for k in ZTQ_REDIS_KEYS if k in given)
    address = f"[{host}]" if ":" in host else host
    url = f"redis://{address}:{numbers['port']}/{numbers['db']}"
    return IniValue(url, first.where, "host/port/db")


def worker_values(
    path: Path, section: str, items: Iterable[tuple[str, str]]
) -> dict[str, IniValue]:
    """The keys of ``[server]`` / ``[ztq:worker]``, by setting name; unknown keys are errors.

    ZTQ's ``host``, ``port`` and ``db`` make the ``redis_url`` value; giving them with
    ``redis`` is an error (which one would the worker use?).
    """
    out: dict[str, IniValue] = {}
    ztq: dict[str, IniValue] = {}
    for key, raw in items:
        where = _where(path, section, key)
        if key in ZTQ_REDIS_KEYS:
            if raw.strip():
                ztq[key] = IniValue(raw, where, key)
            continue
        setting = BY_WORKER_KEY.get(key)
        if setting is None:
            known = ", ".join(sorted([*BY_WORKER_KEY, *ZTQ_REDIS_KEYS]))
            raise ConfigError(f"{where}: unknown option {key!r}; known: {known}")
        if raw.strip() == "":
            continue
        if setting.name in out:
            raise ConfigError(f"{where}: {key} repeats {out[setting.name].key} of the same section")
        out[setting.name] = IniValue(raw, where, key)
    if ztq:
        if "redis_url" in out:
            keys = "/".join(k for k in ZTQ_REDIS_KEYS if k in ztq)
            raise ConfigError(
                f"{out['redis_url'].where}: give redis = URL or ZTQ's host, port and db, not "
                f"both ({keys} at {ztq[next(iter(ztq))].where})"
            )
        out["redis_url"] = ztq_redis_url(ztq)
    return out


def merge(app: Mapping[str, IniValue], worker: Mapping[str, IniValue]) -> dict[str, IniValue]:
    """One ini layer from ``[app:main]`` and the worker section; they must agree."""
    merged = dict(app)
    for name, w in worker.items():
        a = merged.get(name)
        if a is not None:
            s = BY_NAME[name]
            if parse(s, a.raw, a.where, a.key) != parse(s, w.raw, w.where, w.key):
                raise ConfigError(
                    f"{name} is set twice with different values: {a.key} = {a.raw!r} at "
                    f"{a.where} and {w.key} = {w.raw!r} at {w.where}; a worker and a console "
                    "reading this file would disagree: keep one"
                )
        merged[name] = w
    return merged


@dataclass(frozen=True)
class IniFile:
    """An ini file read once: its ztq settings (one layer) and its ``[queues]`` entries."""

    path: Path
    values: dict[str, IniValue]  # [app:main] and the worker section, merged
    worker: dict[str, IniValue]  # the worker section alone
    queues: tuple[IniValue, ...]  # key = queue or thread name, raw = the entry
    sections: frozenset[str]
    # the worker section gives ZTQ's host/port/db: a ZTQ file, whose [queues] entries may be
    # ZTQ's lists of pauses (one thread each, see ztq.worker.config.parse_queue_entry)
    ztq_style: bool = False


def read_ini(path: str | os.PathLike[str]) -> IniFile:
    """Read ``path`` (a worker file or ``app.ini``); ConfigError on a missing or bad file."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"config file {file} does not exist")
    # [DEFAULT] is read as a section of its own (ours ignore it): its keys (pserve's `here`,
    # logging paths) must not turn up as unknown options of the worker section
    parser = configparser.ConfigParser(
        inline_comment_prefixes=(";", "#"), interpolation=None, default_section="\x00none"
    )
    try:
        parser.read(file, encoding="utf-8")
    except configparser.Error as exc:
        raise ConfigError(f"{file}: {exc}") from exc
    app = dict(parser.items(APP_SECTION)) if parser.has_section(APP_SECTION) else {}
    values = app_values(app, file)
    both = [s for s in WORKER_SECTIONS if parser.has_section(s)]
    if len(both) > 1:
        raise ConfigError(
            f"{file}: give the worker's settings in [server] or [ztq:worker], not both"
        )
    section = both[0] if both else None
    worker = worker_values(file, section, parser.items(section)) if section else {}
    values = merge(values, worker)
    queues: list[IniValue] = []
    qsection = next((s for s in QUEUE_SECTIONS if parser.has_section(s)), None)
    if qsection is not None:
        queues = [IniValue(raw, _where(file, qsection, k), k) for k, raw in parser.items(qsection)]
    ztq_style = section is not None and any(parser.has_option(section, k) for k in ZTQ_REDIS_KEYS)
    return IniFile(file, values, worker, tuple(queues), frozenset(parser.sections()), ztq_style)


def connection(
    url: str | None = None,
    prefix: str | None = None,
    *,
    path: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> ConnectionSettings:
    """The Redis URL and key prefix: ``url``/``prefix`` (flags), environment, ``path``, default."""
    ini = read_ini(path).values if path is not None else None
    got = resolve(CONNECTION, flags={"redis_url": url, "prefix": prefix}, environ=environ, ini=ini)
    return ConnectionSettings(got["redis_url"].value, got["prefix"].value)


def command_connection(
    url: str | None = None,
    prefix: str | None = None,
    *,
    system: str | None = None,
    path: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[ConnectionSettings, System | None]:
    """What a ``ztq`` command connects to: the system ``system`` (the flag ``--system``) or
    ``ZTQ_SYSTEM`` names (see :func:`systems`), else :func:`connection`. Naming a system
    with ``url`` or ``prefix`` is an error. Only the commands read ``ZTQ_SYSTEM``: an
    application's ``connect()`` never does."""
    chosen = resolve(["system"], flags={"system": system}, environ=environ)["system"]
    if not chosen.value:
        return connection(url, prefix, path=path, environ=environ), None
    if url or prefix:
        raise ConfigError(
            f"{chosen.source}: give a system or a Redis URL and prefix (--redis, --prefix, "
            "--app with its own), not both"
        )
    found = systems(path=path, environ=environ)
    for s in found:
        if s.name == chosen.value:
            return ConnectionSettings(s.redis_url, s.prefix), s
    names = ", ".join(s.name for s in found)
    raise ConfigError(f"{chosen.source}: no system named {chosen.value!r}; known: {names}")


def systems(
    *,
    path: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    ini: Mapping[str, IniValue] | None = None,
) -> tuple[System, ...]:
    """Every system the ``ztq`` commands know: the default (environment > ``path`` >
    default), then ``systems`` (environment ``ZTQ_SYSTEMS`` > ``path``)."""
    if ini is None and path is not None:
        ini = read_ini(path).values
    got = resolve((*CONNECTION, "systems"), environ=environ, ini=ini)
    default = ConnectionSettings(got["redis_url"].value, got["prefix"].value)
    return systems_of(default, got["systems"])
