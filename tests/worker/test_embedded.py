"""The redis-server a fixture (or ``make run``) starts: it is ours that answers, never
another process's server that took the port (many suites start servers at once)."""

from __future__ import annotations

import socket
import threading

import pytest

from ztq.core.errors import ConfigError
from ztq.worker.embedded import RedisProcess, free_port


def test_a_server_that_is_not_ours_on_the_port_is_not_taken_for_ours() -> None:
    """Another process holds the port and answers PONG to anything: our redis-server exits
    (it cannot bind) and start() says so, instead of handing out the other's address."""
    port = free_port()
    listener = socket.create_server(("127.0.0.1", port))
    stop = threading.Event()

    def impostor() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(1.0)
                try:
                    conn.recv(1024)
                    conn.sendall(b"+PONG\r\n")
                except OSError:
                    pass

    thread = threading.Thread(target=impostor, daemon=True)
    thread.start()
    server = RedisProcess(port=port)
    try:
        with pytest.raises(ConfigError, match="exited at start|did not answer"):
            server.start(timeout=5.0)
    finally:
        server.cleanup()
        stop.set()
        thread.join(5)
        listener.close()
