"""The asyncio side's connections: one :class:`AsyncStorage` per app, connection name and
event loop.

``await fn.adelay(...)`` (``enqueue.asend``), ``await app.aping(id)`` and ``await
handle.await_result(timeout=...)`` (``handle``) talk to Redis through the engine's async
transport (``ztq.core.engine.aio``) with the same Lua scripts, key layout and middleware as
the blocking API. What is here is the client's part: which Redis, prefix and request window
an app's async connection uses (the blocking one's, so that both look at the same keys), and
keeping one per event loop (a ``redis.asyncio`` client belongs to the loop it was made on).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ztq.core import settings
from ztq.core.engine.aio.transport import AsyncStorage, make_async_client
from ztq.core.errors import ConfigError

if TYPE_CHECKING:
    from ztq.core.client.app import App

__all__ = ["AsyncStorage", "astorage"]


async def astorage(app: App, name: str = "default") -> AsyncStorage:
    """The app's async connection ``name`` for the running event loop (made on first use,
    from the same settings as the blocking one)."""
    loop = asyncio.get_running_loop()
    key = (name, id(loop))
    found = app.async_connections.get(key)
    if found is None:
        blocking = app.connections
        url = blocking.url if name == "default" else None
        if name != "default" and not blocking.has(name):
            raise ConfigError(f"no Redis connection named {name!r}: call connect(url, name=...)")
        if blocking.has(name):  # the same Redis, prefix and window as the blocking one
            storage = blocking.get(name)
            url, prefix = storage.url, storage.keys.prefix
            window = storage.request_window_ms / 1000
        else:
            resolved = settings.connection(url, blocking.prefix)
            url, prefix = resolved.redis_url, resolved.prefix
            window = resolved.request_window
        found = AsyncStorage(make_async_client(url), prefix=prefix, url=url, request_window=window)
        app.async_connections[key] = found
    return found
