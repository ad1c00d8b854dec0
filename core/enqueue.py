"""Sending prepared calls to Redis: one script call per task, or per chunk of a batch."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ztq.core.calls import TaskCall
from ztq.core.errors import NotReplicated
from ztq.core.handle import TaskHandle, app_or_default
from ztq.core.keys import shard_for
from ztq.core.scripts import Op
from ztq.core.storage import EnqueueEntry, Storage
from ztq.core.transaction import current_buffer

if TYPE_CHECKING:
    from ztq.core.app import App

log = logging.getLogger(__name__)
CHUNK = 500  # tasks per script call in a batch: Redis stays responsive (a few ms per call)


def entry(call: TaskCall, task_id: str, cron: tuple[str, int] | None = None) -> EnqueueEntry:
    name, tick = cron or ("", 0)
    return EnqueueEntry(
        task_id, call.payload(), call.priority, call.delay_ms(), call.first, name, tick
    )


def placed(app: App, call: TaskCall, task_id: str, storage: Storage) -> str:
    """The queue the task goes to: its queue, or the shard of a sharded queue its id hashes
    to (every shard registered at the first enqueue, see docs/scaling.md)."""
    shards = call.shards or app.registry.shards(call.queue)
    if shards == 1:
        storage.register_queue(call.queue)
        return call.queue
    storage.register_shards(call.queue, shards)
    return shard_for(call.queue, task_id, shards)


def send(
    call: TaskCall, *, cron: tuple[str, int] | None = None, join: bool | None = None
) -> TaskHandle:
    """Enqueue one call now (through its app), or buffer it in the open transaction;
    ``join`` overrides that choice for this call (see :func:`current_buffer`)."""
    app = app_or_default(call.app)
    call = app.middleware.before_enqueue(app, call)
    buffer = current_buffer(app, join)
    task_id = call.resolve_id()
    if buffer is not None and cron is None:
        buffer.append((call, task_id))
        queue = shard_for(call.queue, task_id, call.shards or app.registry.shards(call.queue))
        return TaskHandle(task_id, queue, call.connection, "buffered", app)
    storage = app.connections.get(call.connection)
    queue = placed(app, call, task_id, storage)
    op = storage.enqueue_op(queue, [entry(call, task_id, cron)])
    replicas = replicas_for(app, [call])
    confirmed = replicas
    if replicas:
        [reply], confirmed = storage.execute_replicated([op], replicas, timeout_ms(app))
        returned_id, outcome = reply
    else:
        returned_id, outcome = storage.call(*op)
    log.debug("enqueue %s %s -> %s", call.task, returned_id, outcome)
    handle = TaskHandle(str(returned_id), queue, call.connection, str(outcome), app)
    app.middleware.notify("after_enqueue", app, call, handle)
    if confirmed < replicas:
        raise NotReplicated([handle], confirmed, replicas)
    return handle


def replicas_for(app: App, calls: Sequence[TaskCall]) -> int:
    """How many replicas must confirm these calls: the most any of them asks for."""
    return max((app.replicas if c.replicas is None else c.replicas) for c in calls)


def timeout_ms(app: App) -> int:
    return max(1, int(app.replica_timeout * 1000))


def send_many(items: Sequence[tuple[TaskCall, str]]) -> list[TaskHandle]:
    """Write buffered calls: one round trip per connection (of each app); the tasks of one
    queue go in chunks of ``CHUNK`` per script call, in the order given."""
    by_conn: dict[Storage, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    apps = [app_or_default(call.app) for call, _ in items]
    for pos, (call, task_id) in enumerate(items):
        storage = apps[pos].connections.get(call.connection)
        by_conn[storage][placed(apps[pos], call, task_id, storage)].append(pos)
    handles: list[TaskHandle | None] = [None] * len(items)
    for storage, by_queue in by_conn.items():
        ops: list[Op] = []
        chunks: list[list[int]] = []
        queue_of: list[str] = []
        for queue, positions in by_queue.items():
            for start in range(0, len(positions), CHUNK):
                chunk = positions[start : start + CHUNK]
                ops.append(storage.enqueue_op(queue, [entry(*items[p]) for p in chunk]))
                chunks.append(chunk)
                queue_of.append(queue)
        calls = [items[p][0] for chunk in chunks for p in chunk]
        app = apps[chunks[0][0]]
        replicas = replicas_for(app, calls) if calls else 0
        confirmed = replicas
        if replicas:
            replies, confirmed = storage.execute_replicated(ops, replicas, timeout_ms(app))
        else:
            replies = storage.execute(ops)
        for chunk, queue, reply in zip(chunks, queue_of, replies, strict=True):
            for n, pos in enumerate(chunk):
                call = items[pos][0]
                rid, outcome = reply[2 * n], reply[2 * n + 1]
                handle = TaskHandle(str(rid), queue, call.connection, str(outcome), apps[pos])
                apps[pos].middleware.notify("after_enqueue", apps[pos], call, handle)
                handles[pos] = handle
        if confirmed < replicas:
            unsure = [handles[p] for chunk in chunks for p in chunk]
            raise NotReplicated(unsure, confirmed, replicas)
    return [h for h in handles if h is not None]
