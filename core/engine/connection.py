"""Named Redis connections of an app: ``connect()`` sets them, everything else asks for them.

The default connection is made the first time it is needed (never at import time) from the
URL and prefix :mod:`ztq.core.settings` resolves: arguments, then ``ZTQ_REDIS_URL`` /
``ZTQ_PREFIX``, then ``redis://127.0.0.1:6379/0`` / ``ztq``. A task may name another connection
(``@task(connection="reports")``) to route its queue to another Redis, as ZTQ could.
"""

from __future__ import annotations

import contextlib
import re
import threading
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, unquote, urlsplit

import redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry
from redis.sentinel import Sentinel

from ztq.core import settings
from ztq.core.engine.storage import Storage, safe_url
from ztq.core.errors import ConfigError

SOCKET_TIMEOUT = 10.0
SENTINEL_SCHEME = "redis+sentinel://"
SENTINEL_PORT = 26379
SENTINEL_FORM = "redis+sentinel://[:password@]host:port[,host:port...]/service_name[/db]"
_SENTINEL_QUERY = ("sentinel_username", "sentinel_password")
_HOST = re.compile(r"^(?:\[(?P<ip6>[0-9A-Fa-f:.]+)\]|(?P<host>[^\s:\[\]/@]+))(?::(?P<port>.*))?$")


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


def sentinel_options(
    spec: SentinelURL, common: dict[str, Any], no_retry: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(options for the sentinels, options for the master's connections) from the options
    of a plain client. A sentinel that does not answer is skipped at once (``no_retry``, a
    ``Retry`` with no attempts, and short timeouts): the master's connections retry, asking
    the sentinels again each time, so a failover is followed like a restart."""
    to_sentinels = {
        "socket_connect_timeout": 1.0,
        "socket_timeout": 2.0,
        "retry": no_retry,
        "username": spec.sentinel_username,
        "password": spec.sentinel_password,
    }
    to_master = dict(common, db=spec.db, username=spec.username, password=spec.password)
    return to_sentinels, to_master


def make_client(url: str, *, cluster: bool | None = None, **options: Any) -> Any:
    """A redis-py client for ``url`` with bounded retries on connection errors.

    ``redis+cluster://host:port`` (or ``cluster=True``) gives a :class:`redis.RedisCluster`;
    ``redis+sentinel://...`` (see :func:`parse_sentinel_url`) a client of the master the
    sentinels name, which asks them again whenever it (re)connects, so it follows a failover.
    """
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(f"Redis URL {url!r} is not a URL such as redis://host:6379/0")
    sentinel = parse_sentinel_url(url) if url.startswith(SENTINEL_SCHEME) else None
    if sentinel and cluster:
        raise ConfigError("a redis+sentinel:// URL names one master, not a Redis Cluster")
    if url.startswith("redis+cluster://"):
        cluster, url = True, "redis://" + url[len("redis+cluster://") :]
    common: dict[str, Any] = {
        "decode_responses": True,
        "socket_connect_timeout": 2.0,
        # explicit: redis-py 8 otherwise cuts blocking reads (BLPOP) short; every blocking
        # wait of ztq is shorter than this (Storage.MAX_BLOCK)
        "socket_timeout": SOCKET_TIMEOUT,
        "socket_keepalive": True,
        "health_check_interval": 30,
        "retry": Retry(ExponentialBackoff(cap=0.5, base=0.05), 3),
        "retry_on_error": [RedisConnectionError, RedisTimeoutError],
    }
    common.update(options)
    if sentinel is not None:
        to_sentinels, to_master = sentinel_options(sentinel, common, Retry(NoBackoff(), 0))
        manager = Sentinel(sentinel.sentinels, sentinel_kwargs=to_sentinels)
        return manager.master_for(sentinel.service, **to_master)
    try:
        if cluster:
            common.pop("health_check_interval", None)
            common.pop("retry_on_error", None)
            return redis.RedisCluster.from_url(url, **common)
        return redis.Redis.from_url(url, **common)
    except ValueError as exc:
        raise ConfigError(f"Redis URL {url!r} is not valid: {exc}") from exc


class Connections:
    """The named Redis connections of one app (:class:`ztq.core.client.app.App`).

    ``url`` and ``prefix`` are the app's own (flags for its default connection); what is
    not given is resolved by :func:`ztq.core.settings.connection` when first needed.
    """

    def __init__(self, url: str | None = None, prefix: str | None = None) -> None:
        self.url, self.prefix = url, prefix
        self._lock = threading.Lock()
        self._storages: dict[str, Storage] = {}

    def connect(
        self,
        url: str | None = None,
        *,
        name: str = "default",
        prefix: str | None = None,
        cluster: bool | None = None,
        client: Any = None,
    ) -> Storage:
        """Set (or replace) the named connection and return its :class:`Storage`.

        ``url`` and ``prefix`` are flags, and so are the app's own (its URL for the default
        connection, its prefix for all); when not given, ``ZTQ_REDIS_URL`` / ``ZTQ_PREFIX``
        (read now), then the defaults. ``client`` passes a ready-made redis-py client
        (``decode_responses=True``).
        """
        if name == "default":
            url = url or self.url
        resolved = settings.connection(url, prefix or self.prefix)
        url, prefix = resolved.redis_url, resolved.prefix
        if client is None:
            client = make_client(url, cluster=cluster)
        storage = Storage(client, prefix=prefix, url=url)
        with self._lock:
            self._storages[name] = storage
        return storage

    def namespace(self) -> tuple[str, str]:
        """(Redis URL, prefix) of the default connection, made or as it would be made now."""
        with self._lock:
            storage = self._storages.get("default")
        if storage is not None:
            return storage.url, storage.keys.prefix
        resolved = settings.connection(self.url, self.prefix)
        return resolved.redis_url, resolved.prefix

    def has(self, name: str = "default") -> bool:
        """Whether the named connection was made (by connect() or a first use)."""
        with self._lock:
            return name in self._storages

    def get(self, name: str = "default") -> Storage:
        """The named connection; the default one is made from the settings on first use."""
        with self._lock:
            storage = self._storages.get(name)
        if storage is not None:
            return storage
        if name != "default":
            raise ConfigError(
                f"no Redis connection named {name!r}: call connect(url, name={name!r})"
            )
        return self.connect()

    def close_all(self) -> None:
        """Forget every connection (tests, and forked worker processes)."""
        with self._lock:
            for storage in self._storages.values():
                with contextlib.suppress(Exception):  # closing is best effort
                    storage.close()
            self._storages.clear()
