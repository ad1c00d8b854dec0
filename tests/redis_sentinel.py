"""A local Redis Sentinel setup (test helper): a master, a replica and three sentinels.

Every process is a redis-server child on a free loopback port (a sentinel is
``redis-server <conf> --sentinel``, so Debian's ``redis-sentinel`` package is not needed),
started in its own temp directory and killed by PID in :meth:`LocalSentinel.stop`, which
``start()`` also calls when it fails half way.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import redis

from ztq.worker.embedded import RedisProcess, find_redis_server, free_port

SERVICE = "ztq"
DOWN_AFTER_MS = 1000  # a master silent this long is down for a sentinel (SDOWN)
FAILOVER_TIMEOUT_MS = 4000


def _quoted(value: str) -> str:
    """A value as one argument of a redis.conf line."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class SentinelProcess:
    """One ``redis-server <conf> --sentinel`` child; it rewrites its conf, so each owns a dir."""

    def __init__(self, conf: str, password: str | None = None) -> None:
        self.port, self.password = free_port(), password
        self.dir = tempfile.mkdtemp(prefix="ztq-sentinel-")
        self.conf = Path(self.dir, "sentinel.conf")
        self.conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\nprotected-mode no\ndir {self.dir}\n"
            f"logfile {self.dir}/sentinel.log\n{conf}"
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10.0) -> None:
        self.proc = subprocess.Popen(
            [find_redis_server(), str(self.conf), "--sentinel"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = Path(self.dir, "sentinel.log")
                tail = log.read_text()[-2000:] if log.exists() else ""
                raise RuntimeError(f"sentinel exited at start:\n{tail}")
            with contextlib.suppress(OSError, redis.RedisError):
                client = redis.Redis(port=self.port, socket_timeout=0.5, **self._auth())
                try:
                    if client.ping():
                        return
                finally:
                    client.close()
            time.sleep(0.05)
        raise RuntimeError(f"sentinel did not answer on port {self.port} in {timeout}s")

    def _auth(self) -> dict[str, str]:
        return {"password": self.password} if self.password else {}

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, decode_responses=True, socket_timeout=2, **self._auth())

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)


class LocalSentinel:
    """A master, a replica and ``sentinels`` sentinels watching ``service`` (quorum 2).

    ``password`` protects the data nodes (the URL's password), ``sentinel_password`` the
    sentinels (the URL's ``sentinel_password`` parameter).
    """

    def __init__(
        self,
        *,
        service: str = SERVICE,
        sentinels: int = 3,
        password: str | None = None,
        sentinel_password: str | None = None,
    ) -> None:
        self.service, self.password, self.sentinel_password = service, password, sentinel_password
        # requirepass is set once a node answers (RedisProcess.start waits for a bare PONG)
        auth = ["--masterauth", password] if password else []
        auth += ["--repl-diskless-sync-delay", "0"]  # a full sync at once, not after 5 s
        first = RedisProcess(extra=auth)
        second = RedisProcess(extra=[*auth, "--replicaof", "127.0.0.1", str(first.port)])
        self.nodes = {first.port: first, second.port: second}  # by port: roles change
        conf = [
            f"sentinel monitor {service} 127.0.0.1 {first.port} 2",
            f"sentinel down-after-milliseconds {service} {DOWN_AFTER_MS}",
            f"sentinel failover-timeout {service} {FAILOVER_TIMEOUT_MS}",
            f"sentinel parallel-syncs {service} 1",
        ]
        if password:
            conf.append(f"sentinel auth-pass {service} {_quoted(password)}")
        if sentinel_password:
            # the sentinels authenticate to each other with the same password
            conf += [
                f"requirepass {_quoted(sentinel_password)}",
                f"sentinel sentinel-pass {_quoted(sentinel_password)}",
            ]
        self.sentinels = [
            SentinelProcess("\n".join(conf) + "\n", sentinel_password) for _ in range(sentinels)
        ]

    @property
    def hosts(self) -> str:
        """The sentinels' addresses as a URL lists them."""
        return ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)

    @property
    def url(self) -> str:
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        query = (
            f"?sentinel_password={quote(self.sentinel_password, safe='')}"
            if self.sentinel_password
            else ""
        )
        return f"redis+sentinel://{auth}{self.hosts}/{self.service}/0{query}"

    def start(self) -> LocalSentinel:
        try:
            return self._start()
        except BaseException:
            self.stop()  # never leave servers behind
            raise

    def _start(self) -> LocalSentinel:
        for node in self.nodes.values():
            node.start()
            if self.password:
                client = redis.Redis(port=node.port)
                client.config_set("requirepass", self.password)
                client.close()
        master, replica = self.nodes.values()
        self._wait(
            lambda: self._replication(replica.port)["master_link_status"] == "up",
            "the replica did not sync with the master",
        )
        for sentinel in self.sentinels:
            sentinel.start()
        self._wait(lambda: self._agree(master.port), "the sentinels did not agree on the master")
        return self

    def _node(self, port: int) -> redis.Redis:
        return redis.Redis(
            port=port, password=self.password, decode_responses=True, socket_timeout=2
        )

    def _replication(self, port: int) -> dict[str, Any]:
        client = self._node(port)
        try:
            return client.info("replication")
        finally:
            client.close()

    def _agree(self, port: int, replicas: int = 1) -> bool:
        """Every sentinel names ``port`` as the master, sees the others and the replicas."""
        for sentinel in self.sentinels:
            client = sentinel.client()
            try:
                state = client.sentinel_master(self.service)
            except (redis.RedisError, OSError):
                return False
            finally:
                client.close()
            if (
                int(state["port"]) != port
                or state["is_sdown"] or state["is_odown"]
                or state["num-other-sentinels"] < len(self.sentinels) - 1
                or state["num-slaves"] < replicas
                or "failover_in_progress" in str(state["flags"])
            ):  # fmt: skip
                return False
        return True

    @staticmethod
    def _wait(predicate: Callable[[], bool], message: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.RedisError, OSError):
                if predicate():
                    return
            time.sleep(0.05)
        raise RuntimeError(f"{message} in {timeout}s")

    def master_port(self) -> int:
        """The master's port as the first sentinel that answers names it."""
        for sentinel in self.sentinels:
            client = sentinel.client()
            try:
                _, port = client.sentinel_get_master_addr_by_name(self.service)
                return int(port)
            except (redis.RedisError, OSError):
                continue
            finally:
                client.close()
        raise RuntimeError("no sentinel answered")

    @property
    def master(self) -> RedisProcess:
        return self.nodes[self.master_port()]

    def kill_master(self) -> RedisProcess:
        """SIGKILL the master; returns its (stopped) process."""
        node = self.master
        node.stop(signal.SIGKILL)
        return node

    def wait_for_failover(self, old_port: int, timeout: float = 30.0) -> int:
        """Wait until the sentinels agree on a new master that says it is one; its port."""
        found: list[int] = []

        def promoted() -> bool:
            port = self.master_port()
            if port == old_port or self._replication(port)["role"] != "master":
                return False
            found.append(port)
            return self._agree(port, replicas=0)

        self._wait(promoted, "the sentinels did not promote a replica", timeout)
        return found[-1]

    def flush(self) -> None:
        client = self._node(self.master_port())
        client.flushall()
        client.close()

    def stop(self) -> None:
        for sentinel in self.sentinels:
            sentinel.stop()
        for node in self.nodes.values():
            node.cleanup()
