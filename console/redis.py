"""The console's Redis: one :class:`~ztq.core.storage.Storage` per app, in the registry.

It is made from ``ztq.redis_url`` / ``ztq.prefix`` (see :mod:`ztq.console.config`) and
reached as ``request.storage``; redis-py keeps a connection pool, so threads share it.
"""

from __future__ import annotations

from typing import Any

from pyramid.config import Configurator

from ztq.core.connection import make_client
from ztq.core.storage import Storage


def includeme(config: Configurator) -> None:
    cfg = config.registry.ztq_settings
    # the console shows what any client wrote: bytes that are not UTF-8 read as U+FFFD
    # rather than fail the page (a worker's code never sees this client)
    client = make_client(cfg.redis_url, encoding_errors="replace")
    storage = Storage(client, prefix=cfg.prefix, url=cfg.redis_url)
    config.registry.ztq_storage = storage

    def get_storage(request: Any) -> Storage:
        return request.registry.ztq_storage  # type: ignore[no-any-return]

    config.add_request_method(get_storage, "storage", reify=True)
