"""The Redis systems a process may connect to: the default one (``redis_url`` and ``prefix``)
and the others ``systems`` names, resolved by core's table alone.

:func:`connection` is what :func:`ztq.core.connect` and the engine resolve; the ``ztq``
commands go through :func:`command_connection` (``--system`` / ``ZTQ_SYSTEM``) and
:func:`systems`; the console builds its list with :func:`systems_of`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from ztq.core.errors import ConfigError
from ztq.core.settings.ini import read_ini
from ztq.core.settings.resolver import IniValue, Resolved, resolve
from ztq.core.settings.table import CONNECTION, PRODUCER, REQUEST_WINDOW, SETTINGS


@dataclass(frozen=True)
class ConnectionSettings:
    redis_url: str
    prefix: str
    request_window: float = REQUEST_WINDOW  # seconds (what connect() makes a Storage with)


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


def connection(
    url: str | None = None,
    prefix: str | None = None,
    *,
    path: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    request_window: float | None = None,
) -> ConnectionSettings:
    """The Redis URL, key prefix and request window: ``url``/``prefix``/``request_window``
    (flags), environment, ``path``, default."""
    ini = read_ini(path, SETTINGS).values if path is not None else None
    flags = {"redis_url": url, "prefix": prefix, "request_window": request_window}
    got = resolve(SETTINGS, (*CONNECTION, *PRODUCER), flags=flags, environ=environ, ini=ini)
    return ConnectionSettings(
        got["redis_url"].value, got["prefix"].value, got["request_window"].value
    )


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
    chosen = resolve(SETTINGS, ["system"], flags={"system": system}, environ=environ)["system"]
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
        ini = read_ini(path, SETTINGS).values
    got = resolve(SETTINGS, (*CONNECTION, "systems"), environ=environ, ini=ini)
    default = ConnectionSettings(got["redis_url"].value, got["prefix"].value)
    return systems_of(default, got["systems"])
