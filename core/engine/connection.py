"""Named Redis connections of an app: ``connect()`` sets them, everything else asks for them.

The default connection is made the first time it is needed (never at import time) from the
URL and prefix :mod:`ztq.core.settings` resolves: arguments, then ``ZTQ_REDIS_URL`` /
``ZTQ_PREFIX``, then ``redis://127.0.0.1:6379/0`` / ``ztq``. A task may name another connection
(``@task(connection="reports")``) to route its queue to another Redis, as ZTQ could.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from typing import Any

import redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.exceptions import AuthenticationError, InvalidResponse, NoPermissionError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry
from redis.sentinel import Sentinel

from ztq.core import settings
from ztq.core.engine.storage import Storage
from ztq.core.engine.wire.memory import SCHEME as MEMORY_SCHEME
from ztq.core.engine.wire.memory import memory_client
from ztq.core.errors import ConfigError

# the Sentinel URL form moved down into the settings (redis_url checks it); callers still
# import it from here
from ztq.core.settings.redis_urls import (  # noqa: F401
    SENTINEL_FORM,
    SENTINEL_SCHEME,
    SentinelURL,
    parse_sentinel_url,
)

SOCKET_TIMEOUT = 10.0


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


def _answers(host: str, port: int, timeout: float, tls: bool) -> bool:
    """Whether ``host:port`` completes a TLS handshake (``tls``), or answers a plain ``PING``
    in Redis's protocol: asked only after a connection failed, to say which side speaks TLS."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            if tls:
                context = ssl.create_default_context()
                context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
                with context.wrap_socket(sock, server_hostname=host):
                    return True
            sock.sendall(b"PING\r\n")
            return sock.recv(64)[:1] in (b"+", b"-")
    except OSError:
        return False


def _mismatch(conn: Any, tls: bool) -> ConfigError:
    where = f"{conn.host}:{conn.port}"
    if tls:
        return ConfigError(
            f"Redis at {where} speaks TLS, and the URL is redis://: use rediss://{where}/..."
        )
    return ConfigError(
        f"Redis at {where} does not speak TLS (no TLS handshake; it answers plain Redis), and "
        f"the URL is rediss://: use redis://{where}/..., or the server's TLS port"
    )


class TlsConnection(redis.SSLConnection):
    """``rediss://``: the handshake bounded by the connect timeout (redis-py gives it the
    read timeout, retried: 41.8 s against a plain Redis, issue 39), and a server that
    answers plain Redis named as such (:class:`ConfigError`, not retried)."""

    ztq_resp = True  # RESP on its own socket: the packed script path applies (engine.scripts)

    def _wrap_socket_with_ssl(self, sock: Any) -> Any:
        sock.settimeout(self.socket_connect_timeout or 2.0)
        try:
            wrapped = super()._wrap_socket_with_ssl(sock)
        except OSError:  # ssl.SSLError and socket.timeout among them
            if _answers(self.host, self.port, self.socket_connect_timeout or 2.0, tls=False):
                sock.close()
                raise _mismatch(self, tls=False) from None
            raise
        wrapped.settimeout(self.socket_timeout)
        return wrapped


class PlainConnection(redis.Connection):
    """``redis://``: a server that closes the connection or answers in no Redis protocol
    and completes a TLS handshake is named as a TLS server (:class:`ConfigError`)."""

    ztq_resp = True

    def on_connect_check_health(self, check_health: bool = True) -> None:
        try:
            super().on_connect_check_health(check_health=check_health)
        except (RedisConnectionError, InvalidResponse) as exc:
            if isinstance(exc, AuthenticationError):  # Redis answered: it speaks plain Redis
                raise
            if _answers(self.host, self.port, self.socket_connect_timeout or 2.0, tls=True):
                self.disconnect()
                raise _mismatch(self, tls=True) from None
            raise


def make_client(url: str, *, cluster: bool | None = None, **options: Any) -> Any:
    """A redis-py client for ``url`` with bounded retries on connection errors.

    ``redis+cluster://host:port`` (or ``cluster=True``) gives a :class:`redis.RedisCluster`;
    ``memory://NAME`` the in-memory Redis of that name (``wire.memory``: tests, eager mode);
    ``redis+sentinel://...`` (see :func:`parse_sentinel_url`) a client of the master the
    sentinels name, which asks them again whenever it (re)connects, so it follows a failover.
    """
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(f"Redis URL {url!r} is not a URL such as redis://host:6379/0")
    if url.startswith(MEMORY_SCHEME):
        return memory_client(url)
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
        if url.startswith(("redis://", "rediss://")):
            tls = url.startswith("rediss://")
            common.setdefault("connection_class", TlsConnection if tls else PlainConnection)
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
        request_window: float | None = None,
    ) -> Storage:
        """Set (or replace) the named connection and return its :class:`Storage`.

        ``url`` and ``prefix`` are flags, and so are the app's own (its URL for the default
        connection, its prefix for all); when not given, ``ZTQ_REDIS_URL`` / ``ZTQ_PREFIX``
        (read now), then the defaults. ``client`` passes a ready-made redis-py client
        (``decode_responses=True``). ``request_window``: seconds an enqueue's answer is kept
        for the same call sent again after a lost reply (``ZTQ_REQUEST_WINDOW``, default
        120; docs/settings.md).
        """
        if name == "default":
            url = url or self.url
        resolved = settings.connection(url, prefix or self.prefix, request_window=request_window)
        url, prefix = resolved.redis_url, resolved.prefix
        if client is None:
            client = make_client(url, cluster=cluster)
        storage = Storage(client, prefix=prefix, url=url, request_window=resolved.request_window)
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


# RedisError and ResponseError (imported above) are the names by which code outside the
# engine tells redis-py's errors apart (a write that failed and may have reached Redis; an
# error reply among a pipeline's answers), so that no module outside the engine imports
# redis-py (docs/architecture.md)
RedisError = redis.exceptions.RedisError


def flush_server(url: str) -> None:
    """Empty every database of the Redis at ``url``. Only for a server the caller started
    itself (the pytest plugin's own redis-server): ztq never flushes a Redis it did not start."""
    client = redis.Redis.from_url(url)
    try:
        client.flushall()
    finally:
        client.close()


def server_identity(storage: Storage, new_marker: str) -> tuple[str, str | None, bool]:
    """(run id, data-set marker, whether this call set the marker) of the Redis behind
    ``storage``: who answers (``INFO``'s ``run_id``, new at every restart and on another
    server; '' on a Cluster, whose nodes each have one) and which data set it holds (the
    ``marker`` key, set to ``new_marker`` when there is none: ``SET NX``, so the first
    caller names the data set). The marker is ``None`` when none is set and Redis refuses
    to write one now (full, read-only)."""
    key = storage.keys.marker
    with storage.guard():
        run_id = ""
        if storage.is_cluster:
            marker = storage.client.get(key)
        else:  # one round trip each heartbeat: the server's INFO and the marker together
            pipe = storage.client.pipeline(transaction=False)
            pipe.info("server")
            pipe.get(key)
            info, marker = pipe.execute(raise_on_error=False)
            if isinstance(marker, Exception):
                raise marker
            # an ACL without INFO (it is @dangerous): the marker alone decides
            if isinstance(info, NoPermissionError):
                info = {}
            elif isinstance(info, Exception):
                raise info
            run_id = str(info.get("run_id", ""))
        if marker is not None:
            return run_id, str(marker), False
        try:
            storage.client.set(key, new_marker, nx=True)
        except ResponseError:  # OOM, READONLY: none to compare with until it can be set
            return run_id, None, False
        marker = storage.client.get(key)
    return run_id, None if marker is None else str(marker), marker == new_marker
