"""The ini files: ``[app:main]`` (or Pyramid's settings), the worker section and ``[queues]``.

One file may serve the worker and the console (``app.ini``), so a reader is handed the
table of the settings it wants (core's own are always read) and still knows every key the
other components' tables give (:data:`~ztq.core.settings.table.ELSEWHERE_APP_KEYS`): their
keys are left to them, a key nobody declares is an error (a typo would otherwise be ignored
silently), and a setting given in both sections with different values is refused.
"""

from __future__ import annotations

import ast
import configparser
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ztq.core.errors import ConfigError, unknown_name
from ztq.core.settings import table as core
from ztq.core.settings.parsers import number
from ztq.core.settings.resolver import IniValue, Setting, Table, by_name, parse

APP_SECTION = "app:main"
WORKER_SECTIONS = ("server", "ztq:worker")
QUEUE_SECTIONS = ("queues", "ztq:queues")
# the other sections a ztq file may hold: [DEFAULT] (pserve's `here`), ZTQ's [log] (warned
# about, not read), Pyramid's [pshell], logging's fileConfig sections, and two tools often
# kept in a Pyramid app.ini
OTHER_SECTIONS = ("DEFAULT", "log", "pshell", "loggers", "handlers", "formatters", "uwsgi",
                  "alembic")  # fmt: skip
# PasteDeploy's sections and logging's per-name ones: `app:main`, `server:main`, `logger_root`
OTHER_PREFIXES = ("app:", "server:", "filter:", "filter-app:", "pipeline:", "composite:",
                  "logger_", "handler_", "formatter_")  # fmt: skip


def check_sections(file: Path, sections: Iterable[str]) -> None:
    """Every section of a ztq file is accounted for: one that is neither ztq's nor
    PasteDeploy's, Pyramid's or logging's is an error naming it and the nearest known name.
    A misspelt ``[sever]`` would otherwise be dropped whole, and the worker would serve the
    Redis of the default URL (issue 39: a worker on a Redis nobody meant)."""
    ours = (APP_SECTION, *WORKER_SECTIONS, *QUEUE_SECTIONS, *OTHER_SECTIONS)
    for name in sections:
        if name in ours or name.startswith(OTHER_PREFIXES):
            continue
        line = next(
            (n for n, text in enumerate(file.read_text(encoding="utf-8").splitlines(), 1)
             if text.strip() == f"[{name}]"),
            0,
        )  # fmt: skip
        import difflib  # only on this error path

        close = difflib.get_close_matches(name, [*ours, "server:main", "logger_root"], n=1)
        hint = f"; did you mean [{close[0]}]?" if close else ""
        raise ConfigError(
            f"{file}:{line}: unknown section [{name}]{hint} (ztq reads [server] or "
            "[ztq:worker], [queues] or [ztq:queues] and [app:main]; PasteDeploy's, pshell's "
            "and logging's sections are left to them)"
        )


def _ours(table: Table) -> dict[str, Setting]:
    """The settings a reader is handed, core's own among them."""
    return by_name(core.SETTINGS, table)


def by_app_key(table: Table) -> dict[str, Setting]:
    """The settings of ``table`` (and core's) by their key in ``[app:main]``."""
    return {s.app_key: s for s in _ours(table).values() if s.app_key}


def by_worker_key(table: Table) -> dict[str, Setting]:
    """The settings of ``table`` (and core's) by their keys in the worker section."""
    return {k: s for s in _ours(table).values() for k in s.worker_keys}


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


def app_values(
    settings: Mapping[str, Any], table: Table, path: Path | None = None
) -> dict[str, IniValue]:
    """The ``ztq.*`` keys of ``[app:main]`` (or of Pyramid settings) that give a setting of
    ``table`` or core's, by setting name.

    An unknown ``ztq.`` key is an error (a typo would otherwise be ignored silently); the
    keys of the other components' tables are left to them.
    """
    ours = by_app_key(table)
    known_keys = {*ours, *core.ELSEWHERE_APP_KEYS}
    out: dict[str, IniValue] = {}
    for key, raw in settings.items():
        if not key.startswith("ztq.") or raw is None or str(raw).strip() == "":
            continue
        where = _where(path, APP_SECTION, key)
        if key not in known_keys:
            raise ConfigError(f"{where}: {unknown_name('setting', key, known_keys)}")
        setting = ours.get(key)
        if setting is None:  # another component's
            continue
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
    path: Path, section: str, items: Iterable[tuple[str, str]], table: Table
) -> dict[str, IniValue]:
    """The keys of ``[server]`` / ``[ztq:worker]`` that give a setting of ``table`` or core's,
    by setting name; unknown keys are errors, the other components' keys are left to them.

    ZTQ's ``host``, ``port`` and ``db`` make the ``redis_url`` value; giving them with
    ``redis`` is an error (which one would the worker use?).
    """
    ours = by_worker_key(table)
    known_keys = {*ours, *core.ELSEWHERE_WORKER_KEYS}
    out: dict[str, IniValue] = {}
    ztq: dict[str, IniValue] = {}
    for key, raw in items:
        where = _where(path, section, key)
        if key in ZTQ_REDIS_KEYS:
            if raw.strip():
                ztq[key] = IniValue(raw, where, key)
            continue
        if key not in known_keys:
            known = [*known_keys, *ZTQ_REDIS_KEYS]
            raise ConfigError(f"{where}: {unknown_name('option', key, known)}")
        setting = ours.get(key)
        if setting is None or raw.strip() == "":  # another component's, or unset
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


def merge(
    app: Mapping[str, IniValue], worker: Mapping[str, IniValue], table: Table
) -> dict[str, IniValue]:
    """One ini layer from ``[app:main]`` and the worker section; they must agree (compared
    parsed by the settings of ``table`` or core's, so that 15 and 15.0 agree)."""
    ours = _ours(table)
    merged = dict(app)
    for name, w in worker.items():
        a = merged.get(name)
        if a is not None:
            s = ours[name]
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


def ini_error(file: Path, exc: configparser.Error) -> str:
    """configparser's error as one line at its file and line (its own text spans several
    lines and repeats the path)."""
    if isinstance(exc, configparser.MissingSectionHeaderError):
        return f"{file}:{exc.lineno}: {exc.line.strip()!r} stands before any [section]"
    if isinstance(exc, configparser.ParsingError) and exc.errors:
        lineno, line = exc.errors[0]
        if line[:1] in "'\"":  # Python before 3.13 keeps the line's repr
            line = ast.literal_eval(line)
        more = f" (and {len(exc.errors) - 1} more lines)" if len(exc.errors) > 1 else ""
        return f"{file}:{lineno}: {line.strip()!r} is not 'key = value'{more}"
    if isinstance(exc, configparser.DuplicateOptionError):
        return f"{file}:{exc.lineno}: {exc.option!r} is given twice in [{exc.section}]"
    if isinstance(exc, configparser.DuplicateSectionError):
        return f"{file}:{exc.lineno}: [{exc.section}] is given twice"
    return f"{file}: {str(exc).splitlines()[0]}"


def read_ini(path: str | os.PathLike[str], table: Table) -> IniFile:
    """Read ``path`` (a worker file or ``app.ini``) for the settings of ``table`` and core's;
    ConfigError on a missing or bad file."""
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
        raise ConfigError(ini_error(file, exc)) from exc
    check_sections(file, parser.sections())
    app = dict(parser.items(APP_SECTION)) if parser.has_section(APP_SECTION) else {}
    values = app_values(app, table, file)
    both = [s for s in WORKER_SECTIONS if parser.has_section(s)]
    if len(both) > 1:
        raise ConfigError(
            f"{file}: give the worker's settings in [server] or [ztq:worker], not both"
        )
    section = both[0] if both else None
    worker = worker_values(file, section, parser.items(section), table) if section else {}
    values = merge(values, worker, table)
    queues: list[IniValue] = []
    qsection = next((s for s in QUEUE_SECTIONS if parser.has_section(s)), None)
    if qsection is not None:
        queues = [IniValue(raw, _where(file, qsection, k), k) for k, raw in parser.items(qsection)]
    ztq_style = section is not None and any(parser.has_option(section, k) for k in ZTQ_REDIS_KEYS)
    return IniFile(file, values, worker, tuple(queues), frozenset(parser.sections()), ztq_style)
