"""Testing helpers for applications that use ztq: an eager mode and in-process draining.

``eager(app)`` makes every enqueue of the app run at once, in the calling thread, through
the real scripts and the app's middleware: retries (run at once), callbacks, results and
errors behave as in a worker, and ``handle.get()`` gives the result or raises
``TaskFailed``. Without a connection the app is given a new in-memory Redis (``memory://``,
ztq.core.engine.wire.memory: fakeredis with Lua, ``pip install 'ztq[testing]'``).
``Worker.drain()`` runs what is queued on demand instead. The pytest fixtures are in
:mod:`ztq.worker.testing.pytest_plugin`; see docs/testing.md.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

from ztq.core.client.app import App, default_app
from ztq.core.engine.connection import make_client
from ztq.core.engine.storage import Storage
from ztq.core.middleware.base import Middleware
from ztq.worker.config import ThreadSpec, WorkerConfig
from ztq.worker.worker import Worker


def memory_url() -> str:
    """A new in-memory Redis (``memory://``: fakeredis with Lua, in this process), empty."""
    return f"memory://test-{uuid.uuid4().hex[:12]}"


def memory_redis() -> Any:
    """A client of a new, empty in-memory Redis that runs ztq's Lua scripts: the engine's
    ``memory://`` (kept for code that passes ``connect(client=...)``; ``connect(
    memory_url())`` gives the asyncio side the same data too)."""
    return make_client(memory_url())


def app_queues(app: App) -> list[str]:
    """The queues of an app's registered tasks (and 'default')."""
    return sorted({"default", *(tf.queue for tf in app.registered().values())})


def worker_for(app: App, storage: Storage, queues: list[str] | None = None) -> Worker:
    """A worker for ``app`` on ``storage`` that tests drive with :meth:`Worker.drain`."""
    names = tuple(queues or app_queues(app))
    cfg = WorkerConfig(
        redis_url=storage.url or memory_url(),
        prefix=storage.keys.prefix,
        name="test-worker",
        threads=(ThreadSpec("drain", names),),
    )
    return Worker(cfg, storage=storage, app=app)


class Eager(Middleware):
    """Drains the app's queues after each enqueue (a task's own enqueues, such as
    callbacks, are taken by the drain already under way)."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.draining = False

    def after_enqueue(self, app: App, call: Any, handle: Any) -> None:
        if self.draining:
            return
        self.draining = True
        try:
            queues = sorted({call.queue, *app_queues(app)})
            self.worker.drain(queues, run_delayed=True)
        finally:
            self.draining = False


@contextlib.contextmanager
def eager(app: App | None = None) -> Iterator[Worker]:
    """Run the app's tasks as they are enqueued (see the module's docstring)."""
    app = app or default_app()
    if not app.connections.has():
        app.connect(memory_url())
    worker = worker_for(app, app.storage())
    hook = Eager(worker)
    app.add_middleware(hook)
    try:
        yield worker
    finally:
        app.middleware.remove(hook)
