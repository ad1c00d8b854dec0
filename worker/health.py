"""How the worker reports on itself: the figures of its heartbeat, and health endpoints.

``SysInfo`` samples the host and the worker process (psutil) for every heartbeat, and gives
the autoscaler the host's load.

``ztq worker --health-port 8080`` (or ``health = 8080`` / ``0.0.0.0:8080`` in ``[server]``)
serves, for Kubernetes, systemd watchdogs and load balancers, on a thread of its own. A bare
PORT listens on loopback (127.0.0.1) only: the endpoints need no login, so reaching them from
the network is a choice made by naming a host (``--health-host 0.0.0.0`` or ``HOST:PORT``),
as a Kubernetes probe, which comes to the pod's address, needs:

- ``GET /livez``: 200 while the worker's main loop goes round (it renews leases and writes
  the heartbeat every ``heartbeat`` seconds); 503 once it has not for three heartbeats and
  ten seconds more — a hung process that a restart would mend.
- ``GET /readyz``: 200 while Redis answers a PING, takes the worker's calls and the last
  heartbeat was written less than ``lost_after`` seconds ago; 503 with the reason
  otherwise (``redis: OOM command not allowed when used memory > 'maxmemory' (renewing
  leases, for 4 s)``), and while the worker stops. Not ready is not dead: a Redis outage
  should not restart every worker.
- ``GET /metrics``: Prometheus text of the worker's own counters: Redis calls that failed
  by kind of fault, times Redis came back without its data (``worker/resilience``).

Answers are one line of text (``/metrics``: a few); nothing about tasks or settings is
exposed, and a connection URL in a reason (a Redis error that names its server) is cut to
its scheme (``redis://…``), a HOST:PORT to ``…``: a URL may carry a password, and the
address of the Redis is not the prober's business either.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psutil

from ztq.core.engine.fault_kinds import describe, kind
from ztq.core.engine.storage import Storage
from ztq.core.errors import ConfigError, ZtqError
from ztq.worker.resilience.faults import Faults

log = logging.getLogger("ztq.worker")


def host_ip() -> str:
    """The address the host name resolves to (no packet is sent); 127.0.0.1 if none."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


class SysInfo:
    """Host and process figures for the heartbeat (``describe``) and the autoscaler."""

    def __init__(self) -> None:
        self.proc = psutil.Process(os.getpid())
        self.proc.cpu_percent(None)  # the first reading is always 0: prime it
        psutil.cpu_percent(None)  # the host's too (host_load)
        self.host = socket.gethostname()
        self.ip = host_ip()

    def sample(self) -> dict[str, Any]:
        vm = psutil.virtual_memory()
        try:
            rss = self.proc.memory_info().rss
            for child in self.proc.children(recursive=True):
                rss += child.memory_info().rss
        except psutil.Error:
            rss = 0
        return {
            "host": self.host,
            "ip": self.ip,
            "pid": os.getpid(),
            "cpu_percent": round(self.proc.cpu_percent(None), 1),
            "mem_total": vm.total,
            "mem_percent": vm.percent,
            "rss": rss,
        }

    def host_load(self) -> tuple[float, float]:
        """The host's CPU % over every core since the last call, and its memory %: what the
        autoscaler's ceilings compare with (``autoscale_cpu_max``, ``autoscale_memory_max``)."""
        return float(psutil.cpu_percent(None)), float(psutil.virtual_memory().percent)


# scheme://anything up to a space or a closing quote/bracket, not the ':' or '.' after it
# (redis://, rediss://, unix://, redis+sentinel://, http:// ...)
_URL = re.compile(r"\b([a-z][a-z0-9+.-]*)://[^\s'\")\]>]*[^\s'\")\]>:.,;]", re.IGNORECASE)
# HOST:PORT as redis-py names its server ("Error 111 connecting to 10.0.0.5:6379.")
_HOST_PORT = re.compile(r"(\[[0-9a-f:.]+\]|\b[a-z0-9][a-z0-9.-]*):\d{1,5}\b", re.IGNORECASE)


def without_urls(text: str) -> str:
    """``text`` with each URL cut to its scheme and each HOST:PORT to ``…``: what an
    unauthenticated endpoint may say (``cannot reach Redis at redis://…: Error 111
    connecting to …. Connection refused.``)."""
    return _HOST_PORT.sub("…", _URL.sub(lambda m: f"{m.group(1)}://…", text))


def parse_address(value: str) -> tuple[str, int]:
    """``8080`` -> (``127.0.0.1``, 8080): loopback unless a host is named;
    ``0.0.0.0:8080`` -> (``0.0.0.0``, 8080)."""
    host, sep, port = str(value).strip().rpartition(":")
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not 0 < number < 65536:
        raise ConfigError(f"health: {value!r} is not PORT or HOST:PORT")
    return (host.strip("[]") if sep else "127.0.0.1"), number


class Health:
    """What the endpoints answer, fed by the worker's main loop."""

    def __init__(
        self, storage: Storage, heartbeat: float, lost_after: float, faults: Faults | None = None
    ) -> None:
        self.storage = storage
        self.faults = faults or Faults(lost_after)
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
        except Exception as exc:  # a health check answers; it never raises
            if kind(exc) is None and not isinstance(exc, ZtqError):
                raise
            return False, str(exc) if isinstance(exc, ZtqError) else describe(exc)
        reason = self.faults.reason()  # Redis answers, but refuses a thread's calls
        if reason is not None:
            return False, reason
        if self.beat is None:
            return False, "no heartbeat written yet"
        age = time.monotonic() - self.beat
        if age > self.lost_after:
            return False, f"the last heartbeat was written {age:.0f} s ago"
        return True, "ready"


class HealthServer:
    """``/livez`` and ``/readyz`` on a daemon thread."""

    def __init__(self, health: Health, address: tuple[str, int]) -> None:
        checks = {
            "/livez": health.live,
            "/readyz": health.ready,
            "/metrics": lambda: (True, health.faults.metrics().rstrip("\n")),
        }

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                check = checks.get(self.path.split("?", 1)[0])
                ok, text = check() if check else (False, "not found: /livez, /readyz or /metrics")
                body = (without_urls(text) + "\n").encode()
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
