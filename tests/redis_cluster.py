"""A local Redis Cluster built from redis-server processes (test helper): three masters,
optionally one replica each (for failover tests), every process killed by PID at the end."""

from __future__ import annotations

import time

import redis

from ztq.worker.embedded import RedisProcess

SLOTS = 16384


class LocalCluster:
    def __init__(self, masters: int = 3, *, replicas: int = 0, node_timeout_ms: int = 5000) -> None:
        self.masters, self.replicas = masters, replicas
        self.nodes = [
            RedisProcess(
                extra=[
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", str(node_timeout_ms),
                    "--repl-diskless-sync-delay", "0",  # replicas sync at once, not after 5 s
                ]
            )
            for _ in range(masters * (1 + replicas))
        ]  # fmt: skip

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}/0"

    def start(self) -> LocalCluster:
        try:
            return self._start()
        except BaseException:
            self.stop()  # never leave servers behind
            raise

    def _start(self) -> LocalCluster:
        for node in self.nodes:
            node.start()
        clients = [redis.Redis(port=n.port, decode_responses=True) for n in self.nodes]
        per = SLOTS // self.masters
        for i, client in enumerate(clients[: self.masters]):
            lo = i * per
            hi = SLOTS - 1 if i == self.masters - 1 else lo + per - 1
            client.execute_command("CLUSTER ADDSLOTS", *range(lo, hi + 1))
            client.execute_command("CLUSTER SET-CONFIG-EPOCH", i + 1)
        for client in clients[1:]:
            client.execute_command("CLUSTER MEET", "127.0.0.1", self.nodes[0].port)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ok = all(
                c.execute_command("CLUSTER INFO").get("cluster_state") == "ok" for c in clients
            )
            if ok and all(len(c.execute_command("CLUSTER NODES")) == len(clients) for c in clients):
                self._attach_replicas(clients)
                for c in clients:
                    c.close()
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("local Redis Cluster did not reach cluster_state:ok in 30s")

    def _attach_replicas(self, clients: list[redis.Redis]) -> None:
        """Replica j of master i is node masters + i * replicas + j; wait until each one
        is attached and in sync."""
        if not self.replicas:
            return
        ids = [c.execute_command("CLUSTER MYID") for c in clients[: self.masters]]
        for i in range(self.masters):
            for j in range(self.replicas):
                clients[self.masters + i * self.replicas + j].execute_command(
                    "CLUSTER REPLICATE", ids[i]
                )
        deadline = time.monotonic() + 30
        for c in clients[self.masters :]:
            while c.info("replication").get("master_link_status") != "up":
                if time.monotonic() > deadline:
                    raise RuntimeError("a cluster replica did not sync in 30s")
                time.sleep(0.05)

    def master_of(self, key: str) -> RedisProcess:
        """The process that serves ``key``'s slot now (after a failover: the promoted one)."""
        for node in self.nodes:
            if node.proc is None or node.proc.poll() is not None:
                continue
            c = redis.Redis(port=node.port, decode_responses=True)
            try:
                slot = c.execute_command("CLUSTER KEYSLOT", key)
                for lo, hi, (_host, port, *_), *_ in c.execute_command("CLUSTER SLOTS"):
                    if lo <= slot <= hi:
                        return next(n for n in self.nodes if n.port == int(port))
            finally:
                c.close()
        raise RuntimeError(f"no live node knows the master of {key}")

    def flush(self) -> None:
        for node in self.nodes[: self.masters]:
            c = redis.Redis(port=node.port)
            c.flushall()
            c.close()

    def stop(self) -> None:
        for node in self.nodes:
            node.cleanup()
