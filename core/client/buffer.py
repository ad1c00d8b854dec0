"""Where an enqueue goes when it is not written at once: the open ``with transaction():``
block's buffer, or the ``transaction`` package's current transaction (``pyramid_tm``).

The send path asks :func:`current_buffer` before it writes, and hands it the function that
writes a buffer (``flush``), so that this module never imports the send path: the send path
imports it.
"""

from __future__ import annotations

import contextvars
import hashlib
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ztq.core.errors import ConfigError, InvalidOption

if TYPE_CHECKING:
    from ztq.core.client.app import App
    from ztq.core.client.calls import TaskCall
    from ztq.core.client.handle import TaskHandle

log = logging.getLogger(__name__)

Buffer = list[tuple["TaskCall", str]]


class BlockBuffer(list[tuple["TaskCall", str]]):
    """The buffer of a ``with transaction():`` or ``with batch():`` block. ``closed`` once
    the block ended: an asyncio task spawned in the block keeps the block's context, and an
    enqueue it made after the block would land in a buffer already written (lost)."""

    closed = False


# writes buffered calls, returning their handles (``ztq.core.client.enqueue.send_many``)
Flush = Callable[[Sequence[tuple["TaskCall", str]]], "list[TaskHandle]"]
# the buffer of the open ``with transaction():`` block (transaction.py sets it), None outside
block_buffer: contextvars.ContextVar[Buffer | None] = contextvars.ContextVar(
    "ztq_buffer", default=None
)


class BatchBuffer(BlockBuffer):
    """The buffer of an open ``with batch():`` block (``ztq.core.client.batch``): its tasks
    are the batch's members. A member's default id includes the batch id, so an identical
    task outside the batch, or in another batch, is another task; identical tasks within
    the batch are one member (docs/batches.md)."""

    def __init__(self, batch_id: str) -> None:
        super().__init__()
        self.batch_id = batch_id

    def member_id(self, call: TaskCall, task_id: str) -> str:
        """A member's id: made from the batch's. A given ``id=`` is refused: a task that
        already has that id (waiting, or running) would not become a member, and the batch
        would wait for it for ever."""
        if call.id is not None:
            raise InvalidOption(
                f"id={call.id!r} in a batch: a member's id is made from the batch's (a task "
                "that already has that id would not be a member); leave id= out"
            )
        if not call.unique:
            return task_id
        text = f"{self.batch_id}:{task_id}".encode("ascii")
        return hashlib.md5(text, usedforsecurity=False).hexdigest()


def current_buffer(app: App, flush: Flush, join: bool | None = None) -> Buffer | None:
    """The buffer an enqueue of ``app`` goes to, or None to send at once.

    ``join`` overrides the policy for one call (ZTQ's ``ztq_transaction``): False sends at
    once even inside ``with transaction():`` or a joined transaction; True joins the open
    ``with transaction():`` block, else the ``transaction`` package's current transaction,
    whatever ``app.use_transaction_manager()`` says. ``flush`` writes the buffer of a
    joined transaction when it votes.
    """
    if join is False:
        return None
    buf = block_buffer.get()
    if buf is not None:
        if isinstance(buf, BlockBuffer) and buf.closed:
            raise ConfigError(
                "an enqueue after its transaction or batch block ended (an asyncio task "
                "spawned in the block, still running): the block was written already; await "
                "such tasks inside the block"
            )
        return buf
    if join or app.joins_transactions:
        if app.transaction_manager is None:
            import transaction as txn_pkg

            return _join_transaction_manager(flush, txn_pkg.manager)
        manager = app.transaction_manager()
        return None if manager is None else _join_transaction_manager(flush, manager)
    return None


class DataManager:
    """An ``IDataManager`` for ``transaction``: writes the buffered enqueues at vote.

    It votes last (``sortKey``) so that every other resource (the SQL database) has voted
    already; if Redis cannot be written, the vote fails and the whole transaction aborts, so
    no committed change lacks its tasks. Tasks are written before the database's final
    ``tpc_finish``; a crash between the two is the one window where tasks exist for a change
    that did not commit, which at-least-once task code must tolerate anyway.
    """

    transaction_manager: Any

    def __init__(self, txn: Any, flush: Flush, manager: Any = None) -> None:
        if manager is None:
            import transaction as txn_pkg

            manager = txn_pkg.manager
        self.transaction_manager = manager  # the one the transaction belongs to
        self.buffer: Buffer = []
        self.txn = txn
        self.flush = flush

    def sortKey(self) -> str:  # noqa: N802 - interface name
        return "~~ztq"

    def abort(self, txn: Any) -> None:
        self.buffer.clear()

    def tpc_begin(self, txn: Any) -> None:
        pass

    def commit(self, txn: Any) -> None:
        pass

    def tpc_vote(self, txn: Any) -> None:
        items, self.buffer = list(self.buffer), []
        if items:
            self.flush(items)

    def tpc_finish(self, txn: Any) -> None:
        pass

    def tpc_abort(self, txn: Any) -> None:
        self.buffer.clear()


_managers: contextvars.ContextVar[dict[int, DataManager] | None] = contextvars.ContextVar(
    "ztq_managers", default=None
)


def _join_transaction_manager(flush: Flush, manager: Any) -> Buffer:
    """The buffer of ``manager``'s current transaction, joined once per transaction."""
    txn = manager.get()
    managers = _managers.get()
    if managers is None:
        managers = {}
        _managers.set(managers)
    dm = managers.get(id(txn))
    if dm is None or dm.txn is not txn:
        dm = DataManager(txn, flush, manager)
        txn.join(dm)
        managers.clear()
        managers[id(txn)] = dm
    return dm.buffer
