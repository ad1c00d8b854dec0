"""Enqueue on commit: a context manager, and a data manager for the ``transaction`` package.

``with transaction():`` buffers every enqueue made inside it (in this thread or task) and
writes them all in one round trip per Redis when the block exits without an exception; an
exception drops the buffer. With ``app.use_transaction_manager()`` the app's enqueues join the
current ``transaction`` (as used by ``pyramid_tm``) and are written when it commits.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ztq.core.client.app import App
    from ztq.core.client.calls import TaskCall
    from ztq.core.client.handle import TaskHandle

log = logging.getLogger(__name__)

Buffer = list[tuple["TaskCall", str]]
_buffer: contextvars.ContextVar[Buffer | None] = contextvars.ContextVar("ztq_buffer", default=None)


def current_buffer(app: App, join: bool | None = None) -> Buffer | None:
    """The buffer an enqueue of ``app`` goes to, or None to send at once.

    ``join`` overrides the policy for one call (ZTQ's ``ztq_transaction``): False sends at
    once even inside ``with transaction():`` or a joined transaction; True joins the open
    ``with transaction():`` block, else the ``transaction`` package's current transaction,
    whatever ``app.use_transaction_manager()`` says.
    """
    if join is False:
        return None
    buf = _buffer.get()
    if buf is not None:
        return buf
    if join or app.joins_transactions:
        return _join_transaction_manager()
    return None


@contextlib.contextmanager
def transaction() -> Iterator[list[TaskHandle]]:
    """Buffer enqueues (of every app); write them at exit, or not at all on an exception.

    Nested blocks join the outer one. The list yielded receives the handles after the write.
    """
    from ztq.core.client.enqueue import send_many

    outer = _buffer.get()
    handles: list[TaskHandle] = []
    if outer is not None:
        yield handles
        return
    buf: Buffer = []
    token = _buffer.set(buf)
    try:
        yield handles
    finally:
        _buffer.reset(token)
    handles.extend(send_many(buf))


class DataManager:
    """An ``IDataManager`` for ``transaction``: writes the buffered enqueues at vote.

    It votes last (``sortKey``) so that every other resource (the SQL database) has voted
    already; if Redis cannot be written, the vote fails and the whole transaction aborts, so
    no committed change lacks its tasks. Tasks are written before the database's final
    ``tpc_finish``; a crash between the two is the one window where tasks exist for a change
    that did not commit, which at-least-once task code must tolerate anyway.
    """

    transaction_manager: Any

    def __init__(self, txn: Any) -> None:
        import transaction as txn_pkg

        self.transaction_manager = txn_pkg.manager
        self.buffer: Buffer = []
        self.txn = txn

    def sortKey(self) -> str:  # noqa: N802 - interface name
        return "~~ztq"

    def abort(self, txn: Any) -> None:
        self.buffer.clear()

    def tpc_begin(self, txn: Any) -> None:
        pass

    def commit(self, txn: Any) -> None:
        pass

    def tpc_vote(self, txn: Any) -> None:
        from ztq.core.client.enqueue import send_many

        items, self.buffer = list(self.buffer), []
        if items:
            send_many(items)

    def tpc_finish(self, txn: Any) -> None:
        pass

    def tpc_abort(self, txn: Any) -> None:
        self.buffer.clear()


_managers: contextvars.ContextVar[dict[int, DataManager] | None] = contextvars.ContextVar(
    "ztq_managers", default=None
)


def _join_transaction_manager() -> Buffer:
    import transaction as txn_pkg

    txn = txn_pkg.get()
    managers = _managers.get()
    if managers is None:
        managers = {}
        _managers.set(managers)
    dm = managers.get(id(txn))
    if dm is None or dm.txn is not txn:
        dm = DataManager(txn)
        txn.join(dm)
        managers.clear()
        managers[id(txn)] = dm
    return dm.buffer
