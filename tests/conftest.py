"""Fixtures: a private redis-server per test session, a local Redis Cluster, clean state.

Every server here is started by the fixture on a free loopback port and killed by PID;
flushing is done only on those servers.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import ztq.core as ztq
from tests.redis_cluster import LocalCluster
from ztq.core.storage import Storage
from ztq.worker.embedded import RedisProcess


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisProcess]:
    server = RedisProcess().start()
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


@pytest.fixture(params=["redis", pytest.param("cluster", marks=pytest.mark.cluster)])
def storage(request: pytest.FixtureRequest) -> Iterator[Storage]:
    """The default connection on a real redis-server, then on a local Redis Cluster."""
    if request.param == "redis":
        server = request.getfixturevalue("redis_server")
        _flush(server)
        url = server.url
    else:
        cluster = request.getfixturevalue("redis_cluster")
        cluster.flush()
        url = cluster.url
    st = ztq.connect(url)
    yield st
    ztq.disconnect_all()
