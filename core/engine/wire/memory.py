"""The in-memory engine: ``memory://NAME`` URLs, served by fakeredis in this process.

What huey's ``MemoryStorage`` and dramatiq's ``StubBroker`` are to them, for users' unit
tests and eager mode (``ztq.worker.testing``): the same engine on a Redis that lives in the
process, so that every Lua script and key runs as on a server, with nothing to start. It
passes the contract tests the servers pass (tests/core, the ``storage`` fixture's
``memory`` parameter), the model-based state test included. Every connection to one name
(sync and asyncio clients, producers and an in-process worker alike) shares one data set;
another name is another Redis, empty until written. It lives as long as the process, and
only in it: a worker in another process sees nothing of it. fakeredis has no ``MEMORY
USAGE``: the figures that read it say "unknown" (``Transport.in_memory``).
"""

from __future__ import annotations

import threading
from typing import Any

from ztq.core.errors import ConfigError

SCHEME = "memory://"
_servers: dict[str, Any] = {}
_lock = threading.Lock()


def _server(url: str) -> Any:
    try:
        import fakeredis
        import lupa  # noqa: F401 - fakeredis runs the Lua scripts with it
    except ImportError as exc:
        raise ConfigError(
            f"{url} is an in-memory Redis, which needs fakeredis with Lua: "
            "pip install 'ztq[testing]'"
        ) from exc
    name = url[len(SCHEME) :].strip("/") or "default"
    with _lock:
        server = _servers.get(name)
        if server is None:
            server = _servers[name] = fakeredis.FakeServer()
        return server


def memory_client(url: str) -> Any:
    """A client of the in-memory Redis ``url`` names (``decode_responses``, as ztq's)."""
    import fakeredis

    return fakeredis.FakeRedis(server=_server(url), decode_responses=True)


def memory_async_client(url: str) -> Any:
    """The asyncio client of the same in-memory Redis."""
    import fakeredis.aioredis

    return fakeredis.aioredis.FakeRedis(server=_server(url), decode_responses=True)


def forget(url: str) -> None:
    """Drop the data of the in-memory Redis ``url`` names (the next client starts empty)."""
    with _lock:
        _servers.pop(url[len(SCHEME) :].strip("/") or "default", None)
