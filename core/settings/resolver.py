"""The one resolver: a setting's value from a flag, the environment, the ini or its default.

A :class:`Setting` says where a value may be given and how it is checked; each component
declares its own table of them next to its code (core's in :mod:`ztq.core.settings.table`,
the alerts' in :mod:`ztq.core.alerts.settings`, the worker's in :mod:`ztq.worker.config`,
the console's in :mod:`ztq.console.settings`) and hands it to :func:`resolve`: one rule and
one precedence for every table.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ztq.core.errors import ConfigError


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


Table = Iterable[Setting] | Mapping[str, Setting]  # settings, or settings by name


def by_name(*tables: Table) -> dict[str, Setting]:
    """The settings of ``tables`` by name; a name two tables declare differently is a bug."""
    out: dict[str, Setting] = {}
    for table in tables:
        for s in table.values() if isinstance(table, Mapping) else table:
            if out.setdefault(s.name, s) is not s:
                raise ValueError(f"setting {s.name!r} is declared twice")
    return out


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
    table: Table,
    names: Iterable[str] | None = None,
    *,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    ini: Mapping[str, IniValue] | None = None,
) -> dict[str, Resolved]:
    """Each named setting of ``table`` (all of them when ``names`` is None) from the first
    place that gives it: flag, environment, ini, default.

    ``environ`` defaults to ``os.environ`` as it is now; ``ini`` is keyed by setting name
    (see :func:`~ztq.core.settings.ini.app_values`, :class:`~ztq.core.settings.ini.IniFile`).
    A name ``table`` does not declare is a ``KeyError`` (a bug of the caller).
    """
    known = by_name(table)
    flags = flags or {}
    environ = os.environ if environ is None else environ
    ini = ini or {}
    out: dict[str, Resolved] = {}
    for name in known if names is None else names:
        s = known[name]
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
