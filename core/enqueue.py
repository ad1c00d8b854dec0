"""Sending prepared calls to Redis: one script call per task, batched where possible."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence

from ztq.core.calls import TaskCall
from ztq.core.connection import get_storage
from ztq.core.handle import TaskHandle
from ztq.core.scripts import Op
from ztq.core.storage import Storage
from ztq.core.transaction import current_buffer

log = logging.getLogger(__name__)


def _op(storage: Storage, call: TaskCall, task_id: str, cron: tuple[str, int] | None) -> Op:
    name, tick = cron or ("", 0)
    return storage.enqueue_op(
        call.queue,
        task_id,
        call.payload(),
        priority=call.priority,
        delay_ms=call.delay_ms(),
        first=call.first,
        cron_name=name,
        cron_tick_ms=tick,
    )


def send(call: TaskCall, *, cron: tuple[str, int] | None = None) -> TaskHandle:
    """Enqueue one call now, or buffer it in the open transaction."""
    buffer = current_buffer()
    task_id = call.resolve_id()
    if buffer is not None and cron is None:
        buffer.append((call, task_id))
        return TaskHandle(task_id, call.queue, call.connection, "buffered")
    storage = get_storage(call.connection)
    storage.register_queue(call.queue)
    name, keys, args = _op(storage, call, task_id, cron)
    returned_id, outcome = storage.call(name, keys, args)
    log.debug("enqueue %s %s -> %s", call.task, returned_id, outcome)
    return TaskHandle(str(returned_id), call.queue, call.connection, str(outcome))


def send_many(items: Sequence[tuple[TaskCall, str]]) -> list[TaskHandle]:
    """Write buffered calls: one round trip per connection, in the order given."""
    by_conn: dict[str, list[tuple[int, TaskCall, str]]] = defaultdict(list)
    for pos, (call, task_id) in enumerate(items):
        by_conn[call.connection].append((pos, call, task_id))
    handles: list[TaskHandle | None] = [None] * len(items)
    for conn, group in by_conn.items():
        storage = get_storage(conn)
        for q in sorted({call.queue for _, call, _ in group}):
            storage.register_queue(q)
        replies = storage.execute([_op(storage, call, task_id, None) for _, call, task_id in group])
        for (pos, call, _), (rid, outcome) in zip(group, replies, strict=True):
            handles[pos] = TaskHandle(str(rid), call.queue, conn, str(outcome))
    return [h for h in handles if h is not None]
