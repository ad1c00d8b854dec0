"""Redis URLs as settings see them: the ``redis+sentinel://`` form and password masking.

They live here, below the engine, because the ``redis_url`` setting checks a Sentinel URL
when it is resolved (a bad one stops a worker or a console at start, naming where it was
given); :mod:`ztq.core.engine.connection` builds its clients from the same parse and
:mod:`ztq.core.engine.storage` masks passwords with the same :func:`safe_url`.
"""

from __future__ import annotations

import re
from typing import NamedTuple
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from ztq.core.errors import ConfigError

SENTINEL_SCHEME = "redis+sentinel://"
SENTINEL_PORT = 26379
SENTINEL_FORM = "redis+sentinel://[:password@]host:port[,host:port...]/service_name[/db]"
_SENTINEL_QUERY = ("sentinel_username", "sentinel_password")
_HOST = re.compile(r"^(?:\[(?P<ip6>[0-9A-Fa-f:.]+)\]|(?P<host>[^\s:\[\]/@]+))(?::(?P<port>.*))?$")
_PASSWORD_PARAM = re.compile(r"((?:^|[&;])(?:sentinel_)?password=)[^&;]*")


def safe_url(url: str) -> str:
    """The URL with its passwords masked, for messages and logs: the one before ``@`` and
    the ``password`` / ``sentinel_password`` parameters. Works on the host list of a
    ``redis+sentinel://`` URL (``h1:26379,h2:26379``), whose port ``urlsplit`` cannot read."""
    parts = urlsplit(url)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    if at and ":" in userinfo:
        parts = parts._replace(netloc=f"{userinfo.partition(':')[0]}:***@{hosts}")
    if "password=" in parts.query:
        parts = parts._replace(query=_PASSWORD_PARAM.sub(r"\1***", parts.query))
    return urlunsplit(parts)


class SentinelURL(NamedTuple):
    """A parsed ``redis+sentinel://`` URL: where the sentinels are and what to ask them."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int
    username: str | None  # the master's (AUTH on the data nodes)
    password: str | None
    sentinel_username: str | None  # the sentinels', when they require AUTH
    sentinel_password: str | None


def parse_sentinel_url(url: str) -> SentinelURL:
    """Parse :data:`SENTINEL_FORM` (a sentinel's port defaults to 26379); a
    :class:`ConfigError` names what is wrong, never the passwords."""

    def bad(why: str) -> ConfigError:
        return ConfigError(
            f"Redis Sentinel URL {safe_url(url)!r} {why}; the form is {SENTINEL_FORM}"
        )

    if not url.startswith(SENTINEL_SCHEME):
        raise bad("does not start with redis+sentinel://")
    parts = urlsplit(url)
    if parts.fragment:
        raise bad("has a #fragment")
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    sentinels = []
    for item in hostlist.split(","):
        match = _HOST.match(item.strip())
        if not match:
            raise bad(f"has a bad sentinel address {item.strip()!r}: not host:port")
        port_text = match["port"]
        if port_text is not None and not (port_text.isdigit() and 0 < int(port_text) < 65536):
            raise bad(f"has a bad port {port_text!r} for sentinel {item.strip()!r}: not 1-65535")
        sentinels.append((match["ip6"] or match["host"], int(port_text or SENTINEL_PORT)))
    path = [unquote(p) for p in parts.path.split("/")[1:]]
    if path and path[-1] == "":
        path.pop()  # a trailing slash
    if not path or not path[0]:
        raise bad("has no service name (the name the sentinels monitor the master under)")
    if len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise bad(f"has a bad database {'/'.join(path[1:])!r}: not a number")
    query: dict[str, str] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key not in _SENTINEL_QUERY:
            raise bad(f"has an unknown parameter {key!r} (known: {', '.join(_SENTINEL_QUERY)})")
        query[key] = value
    return SentinelURL(
        sentinels=tuple(sentinels),
        service=path[0],
        db=int(path[1]) if len(path) == 2 else 0,
        username=unquote(user) or None,
        password=unquote(password) or None,
        sentinel_username=query.get("sentinel_username") or None,
        sentinel_password=query.get("sentinel_password") or None,
    )
