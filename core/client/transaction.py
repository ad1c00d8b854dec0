"""Enqueue on commit: a context manager, and a data manager for the ``transaction`` package.

``with transaction():`` buffers every enqueue made inside it (in this thread or task) and
writes them all in one round trip per Redis when the block exits without an exception; an
exception drops the buffer. With ``app.use_transaction_manager()`` the app's enqueues join the
current ``transaction`` (as used by ``pyramid_tm``) and are written when it commits.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ztq.core.client.buffer import BlockBuffer, DataManager, block_buffer
from ztq.core.client.enqueue import send_many
from ztq.core.client.handle import TaskHandle

__all__ = ["DataManager", "transaction"]


@contextlib.contextmanager
def transaction() -> Iterator[list[TaskHandle]]:
    """Buffer enqueues (of every app); write them at exit, or not at all on an exception.

    Nested blocks join the outer one. The list yielded receives the handles after the write.
    """
    outer = block_buffer.get()
    handles: list[TaskHandle] = []
    if outer is not None:
        yield handles
        return
    buf = BlockBuffer()
    token = block_buffer.set(buf)
    try:
        yield handles
    finally:
        block_buffer.reset(token)
        buf.closed = True
    handles.extend(send_many(buf))
