"""The value parsers of the settings tables: raw text (or a typed flag value) -> value.

Each parser raises ``ValueError(reason)``; :func:`ztq.core.settings.resolver.parse` turns the
reason into a :class:`~ztq.core.errors.ConfigError` that names the setting and where the
value came from. The name rules (:data:`PREFIX_NAME`, :data:`NAME`, :data:`SYSTEM_NAME`)
live here so that a setting is checked by the same rule as the keys built from it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from ztq.core.errors import ConfigError
from ztq.core.settings.redis_urls import parse_sentinel_url

NAME = re.compile(r"^[A-Za-z0-9_.:\-]{1,64}$")  # worker and thread names
# a key prefix (ztq.core.engine.keys builds every key from it)
PREFIX_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,32}$")


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
        try:
            parse_sentinel_url(url)
        except ConfigError as exc:
            raise ValueError(f"is not valid: {exc}") from None
    elif url.startswith(("redis://", "rediss://", "redis+cluster://")):
        check_database(url)
    return url


MAX_DB = 1_000_000  # Redis itself refuses an index past its `databases` (16 by default)


def check_database(url: str) -> None:
    """The database of a URL's path (``/3``) or ``?db=3`` is a whole number 0-1000000:
    redis-py read ``redis://host/abc`` as database 0, silently (issue 39)."""
    parts = urlsplit(url)
    given = [("path", unquote(parts.path).strip("/"))]
    given += [("db=", v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k == "db"]
    for where, db in given:
        if db and not (db.isascii() and db.isdigit() and int(db) <= MAX_DB):
            raise ValueError(
                f"names database {db!r} (in its {where}), not a whole number 0-{MAX_DB}: "
                "the form is redis://host:6379/0"
            )


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
