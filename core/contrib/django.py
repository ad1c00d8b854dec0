"""Django: enqueue a task when the database transaction commits.

    from ztq.core.contrib.django import enqueue_on_commit

    with transaction.atomic():
        order = Order.objects.create(...)
        enqueue_on_commit(send_receipt, order.id)   # sent after COMMIT, never on ROLLBACK

The call is built (and its arguments checked) at once, so a bad argument raises in the view;
it is sent by ``transaction.on_commit``: after the outermost atomic block commits, at once
outside one, never if it rolls back.
"""

from __future__ import annotations

from typing import Any

from ztq.core.client.calls import TaskCall


def enqueue_on_commit(task: Any, *args: Any, using: str | None = None, **kwargs: Any) -> TaskCall:
    """Enqueue ``task(*args, **kwargs)`` (a task, or a prepared call without ``args``) when
    the transaction of database ``using`` commits; returns the call."""
    from django.db import transaction

    call = task if isinstance(task, TaskCall) else task.prepare(args, kwargs)
    transaction.on_commit(call.enqueue, using=using)
    return call
