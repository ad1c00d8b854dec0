"""One adapter per queue library: its tasks (imported by its workers) and how to drive it."""

from __future__ import annotations

import importlib

from bench.peers.base import Peer

MODULES = {
    "ztq": "bench.peers.ztq_peer",
    "rq": "bench.peers.rq_peer",
    "huey": "bench.peers.huey_peer",
    "dramatiq": "bench.peers.dramatiq_peer",
    "celery": "bench.peers.celery_peer",
    "arq": "bench.peers.arq_peer",
}


def load(name: str) -> Peer:
    """The adapter of one library (imports it, so ``BENCH_REDIS`` must be set)."""
    module = importlib.import_module(MODULES[name])
    peer: Peer = module.PEER
    return peer


def available(name: str) -> bool:
    """Whether the library imports here (arq may be missing when it could not install)."""
    try:
        load(name)
    except ImportError:
        return False
    return True
