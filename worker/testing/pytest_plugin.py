"""pytest fixtures for applications that use ztq (opt in: ``pytest_plugins =
["ztq.worker.testing.pytest_plugin"]`` in the top ``conftest.py``); see docs/testing.md.

- ``ztq_app``: the app under test; the default app unless the project overrides it.
- ``ztq_storage``: ``ztq_app`` connected to a clean Redis: a private ``redis-server``
  started for the session on a free loopback port (killed at the end) when one is
  installed, else an in-memory one (fakeredis with Lua).
- ``ztq_worker``: a worker for ``ztq_app`` whose ``drain()`` runs everything queued.
- ``ztq_eager``: ``ztq_app`` in eager mode (tasks run as they are enqueued).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ztq.core.client.app import App, default_app
from ztq.core.engine.connection import flush_server
from ztq.core.engine.storage import Storage
from ztq.core.errors import ConfigError
from ztq.worker.embedded import RedisProcess
from ztq.worker.testing.helpers import eager, memory_url, worker_for
from ztq.worker.worker import Worker


@pytest.fixture(scope="session")
def ztq_redis_server() -> Iterator[RedisProcess | None]:
    """A private redis-server for the session, or None when none is installed."""
    try:
        server = RedisProcess().start()
    except (ConfigError, OSError):  # no binary, or it would not start
        yield None
        return
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def ztq_app() -> App:
    return default_app()


@pytest.fixture
def ztq_storage(ztq_app: App, ztq_redis_server: RedisProcess | None) -> Iterator[Storage]:
    if ztq_redis_server is not None:
        flush_server(ztq_redis_server.url)  # our own server: started by this fixture
        storage = ztq_app.connect(ztq_redis_server.url)
    else:
        storage = ztq_app.connect(memory_url())
    yield storage
    ztq_app.disconnect_all()


@pytest.fixture
def ztq_worker(ztq_app: App, ztq_storage: Storage) -> Worker:
    return worker_for(ztq_app, ztq_storage)


@pytest.fixture
def ztq_eager(ztq_app: App, ztq_storage: Storage) -> Iterator[Worker]:
    with eager(ztq_app) as worker:
        yield worker
