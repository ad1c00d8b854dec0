"""Redis URLs checked and explained (issue 39): a TLS handshake against a plain Redis hung
41.8 s and said "Timeout"; a plain client against a TLS server said "Connection reset"; a
missing password gave redis-py's raw "HELLO must be called ..."; ``redis://host/abc`` used
database 0 silently. Each is now one line that says which, within the connect timeout."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import ztq.core as ztq
from tests import sample_tasks as t
from ztq.core.engine.connection import make_client
from ztq.core.errors import ConfigError, ConnectionFailed
from ztq.worker.cli.commands import main
from ztq.worker.embedded import RedisProcess

CONNECT_TIMEOUT = 2.0  # make_client's socket_connect_timeout


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[int]:
    """A small TLS socket server on a free loopback port (a self-signed certificate): it
    completes a handshake and closes; a plain client's bytes fail its handshake."""
    # a missing tool fails the test, it does not skip it (make system-deps installs openssl)
    assert shutil.which("openssl"), (
        "openssl is needed to make a certificate: apt-get install openssl"
    )
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
         "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                try:
                    with context.wrap_socket(conn, server_side=True) as tls:
                        tls.recv(64)
                except OSError:  # a plain client: its bytes are no handshake
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    server.close()
    thread.join(5)


@pytest.mark.slow
def test_rediss_against_a_plain_redis_says_so_within_the_connect_timeout(redis_url: str) -> None:
    port = redis_url.split(":")[2].split("/")[0]
    started = time.monotonic()
    with pytest.raises(ConfigError) as info:
        make_client(f"rediss://127.0.0.1:{port}/0").ping()
    assert time.monotonic() - started < CONNECT_TIMEOUT + 1.5  # was 41.8 s
    assert f"Redis at 127.0.0.1:{port} does not speak TLS" in str(info.value)
    assert f"use redis://127.0.0.1:{port}/" in str(info.value)


@pytest.mark.slow
def test_redis_against_a_tls_server_says_so_within_the_connect_timeout(tls_server: int) -> None:
    started = time.monotonic()
    with pytest.raises(ConfigError) as info:
        make_client(f"redis://127.0.0.1:{tls_server}/0").ping()
    assert time.monotonic() - started < CONNECT_TIMEOUT + 1.5
    assert f"Redis at 127.0.0.1:{tls_server} speaks TLS, and the URL is redis://" in str(info.value)
    assert f"use rediss://127.0.0.1:{tls_server}/" in str(info.value)


@pytest.mark.slow
def test_the_ztq_command_says_it_in_one_line_and_exits_2(
    tls_server: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ZTQ_REDIS_URL", f"redis://127.0.0.1:{tls_server}/0")
    assert main(["info"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ztq: Redis at 127.0.0.1:") and "speaks TLS" in err
    assert len(err.splitlines()) == 1


@pytest.fixture
def password_redis() -> Iterator[RedisProcess]:
    server = RedisProcess().start()
    try:
        redis.Redis(port=server.port).config_set("requirepass", "s3cret")
        yield server
    finally:
        server.stop()


@pytest.mark.slow
def test_authentication_errors_say_what_to_set(password_redis: RedisProcess) -> None:
    port = password_redis.port
    try:
        ztq.connect(f"redis://127.0.0.1:{port}/0")
        with pytest.raises(ConnectionFailed) as missing:
            t.add.delay(1, 2)
        assert "requires a password (NOAUTH): give it in the URL, redis://:PASSWORD@" in str(
            missing.value
        )
        ztq.connect(f"redis://:wrong@127.0.0.1:{port}/0")
        with pytest.raises(ConnectionFailed) as wrong:
            t.add.delay(1, 2)
        assert "refused the user or password of the URL (WRONGPASS)" in str(wrong.value)
        assert "wrong" not in str(wrong.value).replace("WRONGPASS", "")  # masked
        ztq.connect(f"redis://:s3cret@127.0.0.1:{port}/0")
        assert t.add.delay(1, 2).id
    finally:
        ztq.disconnect_all()


@pytest.mark.parametrize("db", ["abc", "-2", "2.5", "0?db=x"])
def test_a_database_that_is_not_a_number_is_refused(db: str) -> None:
    with pytest.raises(ConfigError, match="not a whole number 0-1000000"):
        ztq.connect(f"redis://127.0.0.1:1/{db}", name="db-check")
