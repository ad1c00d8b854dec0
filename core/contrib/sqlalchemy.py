"""SQLAlchemy (and Flask-SQLAlchemy): enqueue a task when the session's transaction commits.

    from ztq.core.contrib.sqlalchemy import enqueue_on_commit

    db.session.add(order)
    enqueue_on_commit(db.session, send_receipt, order.id)  # sent after COMMIT only
    db.session.commit()

The call is built (its arguments checked) at once, so a bad argument raises in the view. It
is sent when the session's outermost transaction commits (SQLAlchemy's ``after_commit``),
dropped when that transaction, or the savepoint (``begin_nested()``) it was made in, rolls
back, and when the session is closed without a commit (Flask-SQLAlchemy closes it at the
end of each request). With no transaction begun it is sent at once. If Redis cannot be
written after the commit, ``commit()`` raises the ``ZtqError`` (the rows are committed: the
one window where a change lacks its tasks, as with Django's ``on_commit``).
"""

from __future__ import annotations

from typing import Any

from ztq.core.client.calls import TaskCall

KEY = "ztq_on_commit"  # the session's ``info`` key: [(call, transaction it was made in)]


def enqueue_on_commit(session: Any, task: Any, *args: Any, **kwargs: Any) -> TaskCall:
    """Enqueue ``task(*args, **kwargs)`` (a task, or a prepared call without ``args``) when
    ``session`` (a ``Session`` or a ``scoped_session`` such as ``db.session``) commits;
    returns the call."""
    call = task if isinstance(task, TaskCall) else task.prepare(args, kwargs)
    from sqlalchemy.orm import scoped_session

    if isinstance(session, scoped_session):  # db.session: this request's (thread's) Session
        session = session()
    if not session.in_transaction():
        call.enqueue()
        return call
    if KEY not in session.info:
        _listen(session)
        session.info[KEY] = []
    txn = session.get_nested_transaction() or session.get_transaction()
    session.info[KEY].append((call, txn))
    return call


def _listen(session: Any) -> None:
    from sqlalchemy import event

    event.listen(session, "after_commit", _send)
    event.listen(session, "after_soft_rollback", _drop)
    event.listen(session, "after_transaction_end", _end)


def _send(session: Any) -> None:
    pending, session.info[KEY] = session.info.get(KEY, []), []
    for call, _txn in pending:
        call.enqueue()


def _drop(session: Any, previous: Any) -> None:
    """A rollback: the calls made in that transaction or in one inside it are dropped."""
    session.info[KEY] = [(c, t) for c, t in session.info.get(KEY, []) if not _within(t, previous)]


def _end(session: Any, txn: Any) -> None:
    if txn.parent is None:  # the outermost ended without a commit (closed): nothing is sent
        _drop(session, txn)


def _within(txn: Any, outer: Any) -> bool:
    while txn is not None:
        if txn is outer:
            return True
        txn = txn.parent
    return False
