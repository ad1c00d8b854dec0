"""Sending prepared calls to Redis: one script call per task, or per chunk of a batch."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from ztq.core.client.aio import astorage
from ztq.core.client.apps import app_or_default
from ztq.core.client.buffer import BatchBuffer, current_buffer
from ztq.core.client.calls import TaskCall
from ztq.core.client.coalesce import acoalescer, coalescer
from ztq.core.client.handle import TaskHandle
from ztq.core.engine.aio.transport import AsyncStorage
from ztq.core.engine.connection import RedisError
from ztq.core.engine.fault_kinds import translate
from ztq.core.engine.keys import shard_for
from ztq.core.engine.queue_limits import RoomWait, keyed_level
from ztq.core.engine.record import PAYLOAD_FLOOR, check_payload_size
from ztq.core.engine.scripts import Op
from ztq.core.engine.storage import EnqueueArgs, Storage
from ztq.core.errors import ConfigError, ConnectionFailed, NotReplicated, QueueFull
from ztq.core.settings.redis_urls import safe_url
from ztq.core.states import Priority

if TYPE_CHECKING:
    from ztq.core.client.app import App

log = logging.getLogger(__name__)
CHUNK = 500  # tasks per script call in a batch: Redis stays responsive (a few ms per call)
COALESCE = True  # concurrent one-by-one enqueues share round trips (client/coalesce.py)
# ... in a process of more threads than this: with fewer each enqueue goes alone on its own
# connection. Waking the callers of a shared round trip costs more CPU than their own round
# trips until many wait: on 2 cores (docs/benchmarks.md, "Against ztq's own past"), at 8
# threads coalescing took 47 µs of client CPU and 12 µs of Redis per enqueue, going alone
# 31 + 18 µs; at 32 threads coalescing 33 + 8 µs, alone 39 + 19 µs.
COALESCE_THREADS = 16


def entry(
    call: TaskCall,
    task_id: str,
    cron: tuple[str, int] | None = None,
    batch: str = "",
    check: bool = True,
) -> EnqueueArgs:
    """What ``Tasks.enqueue_op`` needs of a call: a plain tuple in ``EnqueueEntry``'s
    order (a transaction makes one per task; a named tuple cost more); ``batch``: the
    batch the task is a member of; ``check=False``: its payload size was checked already."""
    name, tick = cron or ("", 0)
    expires = call.expires_ms()
    if check:
        checked(call)
    prio: Priority | str = call.priority
    if call.key is not None:  # the key and its limits ride in the priority field
        prio = keyed_level(call.priority.value, call.key, call.key_concurrency, call.key_rate)
    if batch:
        return (task_id, call.payload(), prio, call.delay_ms(), call.first, name, tick, expires,
                batch)  # fmt: skip
    return (task_id, call.payload(), prio, call.delay_ms(), call.first, name, tick, expires)


def checked(call: TaskCall) -> None:
    """Refuse a payload over its app's ``max_payload`` before anything is written (one
    ``len()`` for the common small payload, see ``check_payload_size``)."""
    payload = call.payload()
    if len(payload) > PAYLOAD_FLOOR:
        check_payload_size(payload, app_or_default(call.app).max_payload, call.task)


def placed(app: App, call: TaskCall, task_id: str, storage: Storage) -> str:
    """The queue the task goes to: its queue, or the shard of a sharded queue its id hashes
    to (every shard registered at the first enqueue, see docs/scaling.md)."""
    shards = call.shards or app.registry.shards(call.queue)
    if shards == 1:
        storage.queues.register_queue(call.queue)
        return call.queue
    storage.queues.register_shards(call.queue, shards)
    return shard_for(call.queue, task_id, shards)


def send(
    call: TaskCall, *, cron: tuple[str, int] | None = None, join: bool | None = None
) -> TaskHandle:
    """Enqueue one call now (through its app), or buffer it in the open transaction;
    ``join`` overrides that choice for this call (see :func:`current_buffer`)."""
    app = app_or_default(call.app)
    call = app.middleware.before_enqueue(app, call)
    checked(call)  # in a transaction too: refused at the line that made it
    buffer = current_buffer(app, send_many, join)
    task_id = call.resolve_id()
    if buffer is not None and cron is None:
        if type(buffer) is BatchBuffer:
            task_id = buffer.member_id(call, task_id)
        buffer.append((call, task_id))
        queue = shard_for(call.queue, task_id, call.shards or app.registry.shards(call.queue))
        return TaskHandle(task_id, queue, call.connection, "buffered", app)
    storage = app.connections.get(call.connection)
    try:
        queue = placed(app, call, task_id, storage)
        op = storage.tasks.enqueue_op(queue, [entry(call, task_id, cron, check=False)])
        replicas = app.replicas if call.replicas is None else call.replicas
        confirmed = replicas
        # concurrent callers of a process of many threads share round trips (see COALESCE)
        many = COALESCE and threading.active_count() > COALESCE_THREADS
        shared = coalescer(storage) if many else None

        def write() -> tuple[str, str]:
            nonlocal confirmed
            if replicas:
                [reply], confirmed = storage.execute_replicated([op], replicas, timeout_ms(app))
                return reply[0], reply[1]
            reply = shared.call(op) if shared is not None else storage.call(*op)
            return reply[0], reply[1]

        returned_id, outcome = write()
        if outcome == "full":  # raise QueueFull, or wait for room and send again
            # a cron tick that finds its queue full is not fired: it never waits
            wait = RoomWait(queue, storage.queues.queue_limits(queue), can_block=cron is None)
            while outcome == "full":
                storage.waits.wait_room(queue, wait.next_wait())
                returned_id, outcome = write()
    except (RedisError, ConnectionFailed) as exc:  # faults(), inline on the hot path
        reraise(exc, storage)
    log.debug("enqueue %s %s -> %s", call.task, returned_id, outcome)
    handle: TaskHandle[Any] = TaskHandle(
        str(returned_id), queue, call.connection, str(outcome), app
    )
    app.middleware.notify("after_enqueue", app, call, handle)
    if confirmed < replicas:
        raise NotReplicated([handle], confirmed, replicas)
    return handle


@contextlib.contextmanager
def faults(storage: Storage | AsyncStorage) -> Iterator[None]:
    """The producer's one boundary for Redis faults: a full Redis, a read-only replica, an
    unreachable or not-ready Redis raise a ZtqError subclass that names the cause and the
    remedy, from the redis-py error (``fault_kinds.translate``); other errors pass."""
    try:
        yield
    except (RedisError, ConnectionFailed) as exc:
        reraise(exc, storage)


def reraise(exc: BaseException, storage: Storage | AsyncStorage) -> NoReturn:
    """Raise ``exc`` as the producer shows it: the ZtqError subclass that names the fault
    and its remedy, from the redis-py error; ``exc`` itself when it is no such fault."""
    err = translate(exc, safe_url(storage.url))
    if err is exc:
        raise exc
    raise err from err.__cause__


def replicas_for(app: App, calls: Sequence[TaskCall]) -> int:
    """How many replicas must confirm these calls: the most any of them asks for."""
    return max((app.replicas if c.replicas is None else c.replicas) for c in calls)


def timeout_ms(app: App) -> int:
    return max(1, int(app.replica_timeout * 1000))


def send_many(items: Sequence[tuple[TaskCall, str]]) -> list[TaskHandle]:
    """Write buffered calls: one round trip per connection (of each app); the tasks of one
    queue go in chunks of ``CHUNK`` per script call, in the order given.

    Tasks that meet a full queue (``max_pending``) wait for room when its policy is
    ``block`` (and are written after the others); the rest are written and
    :class:`QueueFull` lists the ones refused."""
    by_conn: dict[Storage, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    apps = [app_or_default(call.app) for call, _ in items]
    # a transaction's tasks mostly share an app, a connection and a queue: each looked up once
    storages: dict[tuple[int, str], Storage] = {}
    unsharded: dict[tuple[int, str, str, int | None], str] = {}
    for pos, (call, task_id) in enumerate(items):
        app = apps[pos]
        key = (id(app), call.connection)
        storage = storages.get(key) or storages.setdefault(
            key, app.connections.get(call.connection)
        )
        where = (*key, call.queue, call.shards)
        queue = unsharded.get(where)
        if queue is None:
            with faults(storage):
                queue = placed(app, call, task_id, storage)
            if (call.shards or app.registry.shards(call.queue)) == 1:
                unsharded[where] = queue  # else each task's shard follows from its id
        by_conn[storage][queue].append(pos)
    handles: list[TaskHandle | None] = [None] * len(items)
    refused: list[QueueFull] = []
    for storage, by_queue in by_conn.items():
        with faults(storage):
            replies, replicas, confirmed = _write(storage, by_queue, items, apps)
        for queue, positions in by_queue.items():
            full = [p for p in positions if replies[p][1] == "full"]
            if not full:
                continue
            with faults(storage):
                wait = RoomWait(queue, storage.queues.queue_limits(queue))
            while full:
                try:
                    with faults(storage):
                        storage.waits.wait_room(queue, wait.next_wait())
                except QueueFull as exc:
                    exc.refused = [items[p][1] for p in full]
                    refused.append(exc)
                    break
                with faults(storage):
                    more, _, again = _write(storage, {queue: full}, items, apps)
                replies |= more
                confirmed = min(confirmed, again)
                full = [p for p in full if more[p][1] == "full"]
        for queue, positions in by_queue.items():
            for pos in positions:
                rid, outcome = replies[pos]
                if outcome == "full":
                    continue
                call = items[pos][0]
                handle: TaskHandle[Any] = TaskHandle(
                    rid, queue, call.connection, outcome, apps[pos]
                )
                apps[pos].middleware.notify("after_enqueue", apps[pos], call, handle)
                handles[pos] = handle
        if confirmed < replicas:
            unsure = [handles[p] for ps in by_queue.values() for p in ps if handles[p]]
            raise NotReplicated(unsure, confirmed, replicas)
    written = [h for h in handles if h is not None]
    if refused:
        ids = [i for exc in refused for i in exc.refused]
        raise QueueFull(
            refused[0].queue,
            refused[0].limit,
            f"{len(ids)} of {len(items)} task(s) not enqueued: " + "; ".join(map(str, refused)),
            ids,
            list(written),
        )
    return written


def _write(
    storage: Storage,
    by_queue: dict[str, list[int]],
    items: Sequence[tuple[TaskCall, str]],
    apps: Sequence[App],
) -> tuple[dict[int, tuple[str, str]], int, int]:
    """One round trip: the tasks at these positions, in chunks per queue. Returns each
    position's (id, outcome), the replicas asked for and how many confirmed."""
    ops: list[Op] = []
    chunks: list[list[int]] = []
    for queue, positions in by_queue.items():
        for start in range(0, len(positions), CHUNK):
            chunk = positions[start : start + CHUNK]
            ops.append(storage.tasks.enqueue_op(queue, [entry(*items[p]) for p in chunk]))
            chunks.append(chunk)
    calls = [items[p][0] for chunk in chunks for p in chunk]
    replicas = replicas_for(apps[chunks[0][0]], calls) if calls else 0
    confirmed = replicas
    if replicas:
        replies, confirmed = storage.execute_replicated(
            ops, replicas, timeout_ms(apps[chunks[0][0]])
        )
    else:
        replies = storage.execute(ops)
    out: dict[int, tuple[str, str]] = {}
    for chunk, reply in zip(chunks, replies, strict=True):
        for n, pos in enumerate(chunk):
            out[pos] = (str(reply[2 * n]), str(reply[2 * n + 1]))
    return out, replicas, confirmed


async def asend(call: TaskCall) -> TaskHandle[Any]:
    """Enqueue one call from a coroutine: the blocking ``send``'s twin (one round trip)."""
    app = app_or_default(call.app)
    call = app.middleware.before_enqueue(app, call)
    buffer = current_buffer(app, send_many)
    if type(buffer) is BatchBuffer:  # `async with batch()`: a member, written at its exit
        task_id = buffer.member_id(call, call.resolve_id())
        buffer.append((call, task_id))
        queue = shard_for(call.queue, task_id, call.shards or app.registry.shards(call.queue))
        return TaskHandle(task_id, queue, call.connection, "buffered", app)
    if buffer is not None:
        raise ConfigError(
            "adelay/aenqueue inside a transaction: the block writes its tasks when it exits, "
            "blocking; use delay() there, or enqueue outside the block"
        )
    storage = await astorage(app, call.connection)
    with faults(storage):
        returned_id, outcome, queue, confirmed, replicas = await _awrite(app, call, storage)
    handle: TaskHandle[Any] = TaskHandle(
        str(returned_id), queue, call.connection, str(outcome), app
    )
    app.middleware.notify("after_enqueue", app, call, handle)
    if confirmed < replicas:
        raise NotReplicated([handle], confirmed, replicas)
    return handle


async def _awrite(
    app: App, call: TaskCall, storage: AsyncStorage
) -> tuple[str, str, str, int, int]:
    """``asend``'s Redis part: (id, outcome, queue, replicas confirmed, replicas asked)."""
    shards = call.shards or app.registry.shards(call.queue)
    await storage.queues.register_queue(call.queue, shards)
    task_id = call.resolve_id()
    queue = shard_for(call.queue, task_id, shards)
    op = storage.ops.tasks.enqueue_op(queue, [entry(call, task_id)])
    replicas = replicas_for(app, [call])
    confirmed = replicas
    shared = acoalescer(storage) if COALESCE else None
    wait: RoomWait | None = None
    while True:
        if replicas:
            [reply], confirmed = await storage.execute_replicated([op], replicas, timeout_ms(app))
            returned_id, outcome = reply
        elif shared is not None:
            returned_id, outcome = await shared.call(op)
        else:
            returned_id, outcome = await storage.call(*op)
        if outcome != "full":
            return str(returned_id), str(outcome), queue, confirmed, replicas
        wait = wait or RoomWait(queue, await storage.queues.queue_limits(queue))
        await storage.waits.wait_room(queue, wait.next_wait())  # QueueFull when it must not wait
