"""Testing helpers for applications that use ztq: an eager mode, in-process draining, and
pytest fixtures (``pytest_plugins = ["ztq.worker.pytest_plugin"]``); see docs/testing.md.

May import: ``ztq.core`` and the worker process. Nothing of ztq imports this package.
"""

from ztq.worker.testing.helpers import (
    Eager,
    app_queues,
    eager,
    memory_redis,
    memory_url,
    worker_for,
)

__all__ = ["Eager", "app_queues", "eager", "memory_redis", "memory_url", "worker_for"]
