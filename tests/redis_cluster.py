"""A local three-master Redis Cluster built from redis-server processes (test helper)."""

from __future__ import annotations

import time

import redis

from ztq.worker.embedded import RedisProcess

SLOTS = 16384


class LocalCluster:
    def __init__(self, masters: int = 3) -> None:
        self.nodes = [
            RedisProcess(
                extra=[
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", "5000",
                ]
            )
            for _ in range(masters)
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
        per = SLOTS // len(self.nodes)
        for i, client in enumerate(clients):
            lo = i * per
            hi = SLOTS - 1 if i == len(clients) - 1 else lo + per - 1
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
                for c in clients:
                    c.close()
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("local Redis Cluster did not reach cluster_state:ok in 30s")

    def flush(self) -> None:
        for node in self.nodes:
            c = redis.Redis(port=node.port)
            c.flushall()
            c.close()

    def stop(self) -> None:
        for node in self.nodes:
            node.cleanup()
