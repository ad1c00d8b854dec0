"""A webhook receiver for the alert tests: a real HTTP server on 127.0.0.1 in a thread.

Every POST body lands in :attr:`Receiver.posts` (a queue: tests wait on it, not on
sleeps). ``status`` is the answer; ``hold`` makes each request wait until :meth:`release`
(or ``hold`` seconds), for a slow webhook; :attr:`arrived` is set when a request came in.
"""

from __future__ import annotations

import json
import queue
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    def __init__(self, status: int = 200, hold: float = 0.0) -> None:
        self.status = status
        self.hold = hold
        self.posts: queue.Queue[dict[str, Any]] = queue.Queue()
        self.arrived = threading.Event()
        self._released = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.arrived.set()
                if receiver.hold:
                    receiver._released.wait(receiver.hold)
                receiver.posts.put(
                    {"json": json.loads(body), "type": self.headers.get("Content-Type")}
                )
                try:
                    self.send_response(receiver.status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the client gave up (its timeout)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook/secret-path"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()

    def release(self) -> None:
        self._released.set()

    def next(self, timeout: float = 10.0) -> dict[str, Any]:
        """The next POST's JSON body (waits for it)."""
        return self.posts.get(timeout=timeout)["json"]

    def drain(self) -> list[dict[str, Any]]:
        """The POSTs received and not taken yet."""
        out = []
        while True:
            try:
                out.append(self.posts.get_nowait()["json"])
            except queue.Empty:
                return out


def closed_url() -> str:
    """A URL on a loopback port where nothing listens (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/hook"
