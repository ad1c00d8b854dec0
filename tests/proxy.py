"""A TCP proxy to Redis that drops real replies (issue 28 and 35, "Lost replies"): Redis runs
the request, the client never hears its answer and sends it again. Used by the lost-reply
tests (tests/core, tests/worker) and by ``bench.soak --drop-replies``.
"""

from __future__ import annotations

import contextlib
import random
import socket
import threading
import time
from collections.abc import Callable

from ztq.core.engine.scripts import SCRIPTS


def script_names(script: str) -> tuple[bytes, ...]:
    """What a request that runs ``script`` carries: its SHA (EVALSHA) or function (FCALL)."""
    return tuple(n.encode() for n in (SCRIPTS.sha[script], SCRIPTS.function.get(script, "-")))


class ReplyDropper:
    """A TCP proxy to Redis. :meth:`arm` makes it forward the next request that names a
    script (its SHA, or its function: FCALL), or holds ``marker``, wait for Redis's reply and
    drop the connection instead of passing it on; ``skip`` lets that many such requests pass
    first, ``hold`` keeps the reply (and the client waiting for it) until ``hold()`` is true
    (or 10 s passed) before the connection is closed. :meth:`drop_share` drops the replies
    of a share of the requests that run a script (any request: ``script=""``), at random,
    until disarmed."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.armed: tuple[bytes, ...] | None = None
        self.skip = 0
        self.hold: Callable[[], object] | None = None
        self.share: tuple[tuple[bytes, ...], float, random.Random] | None = None
        self.dropped = 0
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"redis://127.0.0.1:{self.listener.getsockname()[1]}/0"
        self.socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(
        self,
        script: str = "",
        *,
        marker: bytes = b"",
        skip: int = 0,
        hold: Callable[[], object] | None = None,
    ) -> None:
        with self.lock:
            self.armed = (marker,) if marker else script_names(script)
            self.skip, self.hold = skip, hold

    def drop_share(self, script: str, share: float, seed: int = 35) -> None:
        with self.lock:
            names = script_names(script) if script else ()
            self.share = (names, share, random.Random(seed)) if share else None

    def _drops(self, data: bytes) -> bool:
        """Is the reply to this request to be dropped? (called with the lock held)"""
        if self.armed is not None and any(a in data for a in self.armed):
            if self.skip:
                self.skip -= 1
                return False
            self.armed = None
            return True
        names = self.share[0] if self.share is not None else ()
        if self.share is not None and (not names or any(a in data for a in names)):
            return self.share[2].random() < self.share[1]
        return False

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.port))
            except OSError:  # Redis is gone (the session ends): the client sees a reset
                client.close()
                continue
            self.socks += [client, server]
            drop = threading.Event()
            threading.Thread(target=self._up, args=(client, server, drop), daemon=True).start()
            threading.Thread(target=self._down, args=(client, server, drop), daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket, drop: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                with self.lock:
                    if not drop.is_set() and self._drops(data):
                        drop.set()  # before it is sent: the reply is never passed on
                server.sendall(data)

    def _down(self, client: socket.socket, server: socket.socket, drop: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := server.recv(65536):
                if drop.is_set():  # Redis answered (it applied the call): drop the reply
                    self.dropped += 1
                    hold, self.hold = self.hold, None
                    deadline = time.monotonic() + 10
                    while hold is not None and not hold() and time.monotonic() < deadline:
                        time.sleep(0.01)  # the client waits for this reply meanwhile
                    for s in (client, server):
                        s.shutdown(socket.SHUT_RDWR)
                        s.close()
                    return
                client.sendall(data)

    def close(self) -> None:
        self.listener.close()
        for s in self.socks:
            with contextlib.suppress(OSError):
                s.close()
