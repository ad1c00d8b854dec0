"""Host and process figures for the heartbeat (psutil)."""

from __future__ import annotations

import os
import socket
from typing import Any

import psutil


def host_ip() -> str:
    """The address the host name resolves to (no packet is sent); 127.0.0.1 if none."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


class SysInfo:
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
