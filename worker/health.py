"""The worker's health endpoints for Kubernetes, systemd watchdogs and load balancers.

``ztq worker --health-port 8080`` (or ``health = 8080`` / ``127.0.0.1:8080`` in ``[server]``)
serves, on a thread of its own:

- ``GET /livez``: 200 while the worker's main loop goes round (it renews leases and writes
  the heartbeat every ``heartbeat`` seconds); 503 once it has not for three heartbeats and
  ten seconds more — a hung process that a restart would mend.
- ``GET /readyz``: 200 while Redis answers a PING and the last heartbeat was written less
  than ``lost_after`` seconds ago; 503 with the reason otherwise, and while the worker
  stops. Not ready is not dead: a Redis outage should not restart every worker.

Answers are one line of text; nothing about tasks or settings is exposed.
"""

from __future__ import annotations

import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ztq.core.engine.storage import Storage
from ztq.core.errors import ConfigError, ZtqError

log = logging.getLogger("ztq.worker")


def parse_address(value: str) -> tuple[str, int]:
    """``8080`` -> (``0.0.0.0``, 8080); ``127.0.0.1:8080`` -> (``127.0.0.1``, 8080)."""
    host, sep, port = str(value).strip().rpartition(":")
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not 0 < number < 65536:
        raise ConfigError(f"health: {value!r} is not PORT or HOST:PORT")
    return (host.strip("[]") if sep else "0.0.0.0"), number


class Health:
    """What the endpoints answer, fed by the worker's main loop."""

    def __init__(self, storage: Storage, heartbeat: float, lost_after: float) -> None:
        self.storage = storage
        self.heartbeat, self.lost_after = heartbeat, lost_after
        self.looped = time.monotonic()
        self.beat: float | None = None  # when the last heartbeat was written
        self.stopping = False

    def looping(self) -> None:
        self.looped = time.monotonic()

    def beating(self) -> None:
        self.beat = time.monotonic()

    def live(self) -> tuple[bool, str]:
        quiet = time.monotonic() - self.looped
        limit = 3 * self.heartbeat + 10
        if quiet > limit:
            return False, f"the main loop has not run for {quiet:.0f} s (limit {limit:g} s)"
        return True, "live"

    def ready(self) -> tuple[bool, str]:
        if self.stopping:
            return False, "stopping"
        try:
            self.storage.ping_server()
        except ZtqError as exc:
            return False, str(exc)
        if self.beat is None:
            return False, "no heartbeat written yet"
        age = time.monotonic() - self.beat
        if age > self.lost_after:
            return False, f"the last heartbeat was written {age:.0f} s ago"
        return True, "ready"


class HealthServer:
    """``/livez`` and ``/readyz`` on a daemon thread."""

    def __init__(self, health: Health, address: tuple[str, int]) -> None:
        checks = {"/livez": health.live, "/readyz": health.ready}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                check = checks.get(self.path.split("?", 1)[0])
                ok, text = check() if check else (False, "not found: /livez or /readyz")
                body = (text + "\n").encode()
                self.send_response(200 if ok else (503 if check else 404))
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                """Not logged: probes every few seconds would drown the worker's log."""

        self.server = ThreadingHTTPServer(address, Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, name="ztq-health", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> HealthServer:
        self.thread.start()
        log.info("health checks on http://%s:%d/livez and /readyz",
                 self.server.server_address[0], self.port)  # fmt: skip
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
