"""The worker's side of broadcasts and channels (docs/channels.md).

- A broadcast reader thread (one in all on a single Redis; one per queue on a Cluster,
  where one XREAD cannot span slots) joins the listeners of every queue the worker serves,
  reads their broadcast streams from the position it joined at, and runs each broadcast
  once, in order, recording its start and end. A paused worker, or a paused queue, holds
  its broadcasts: they run in order when it resumes.
- A subscription thread per task subscribed to a channel (``app.subscribe_task``) whose
  queue the worker serves reads the channel as that subscriber (its consumer: the worker's
  id) and enqueues a run of the task per JSON message before acknowledging it.

Both block in Redis while there is nothing to do (one read every ``READ_BLOCK`` seconds).
The worker calls :meth:`WorkerChannels.start`, :meth:`~WorkerChannels.beat` (each heartbeat:
presence and the served queues) and :meth:`~WorkerChannels.stop`, which does not wait for
a reader that is only waiting.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ztq.core.client.transaction import transaction
from ztq.core.engine.features.broadcast_streams import read_broadcasts
from ztq.core.errors import QueueFull, UnknownTask, ZtqError
from ztq.core.messaging.broadcast import listen_op, record_run
from ztq.core.messaging.channels import Channel, Subscription
from ztq.core.middleware.base import Outcome, Run
from ztq.worker.execute import call, prepare
from ztq.worker.resilience.faults import Faults

if TYPE_CHECKING:
    from ztq.worker.executors.host import ExecutorHost

log = logging.getLogger(__name__)

MIN_PRESENCE = 1.0  # seconds a worker counts as a live listener without a beat, at least
READ_BLOCK = 5.0  # seconds a reader waits in Redis for a broadcast or a message
LOOK_AGAIN = 0.5  # seconds between two looks at a paused worker's flag (no Redis call)
PAUSED_QUEUES = 1.0  # seconds between two looks at paused queues


def keep_reading(
    step: Callable[[float | None], int],
    stopping: threading.Event,
    what: str,
    faults: Faults | None = None,
) -> None:
    """Call ``step(READ_BLOCK)`` until the worker stops; a Redis error is logged and retried
    with a doubling delay (0.1 s up to 5 s), so a reader outlives a failover. Once the stop
    is asked, any error ends the reader quietly: a read still waiting in Redis is not waited
    for, and the connections it uses may be closed under it (an embedded worker's app
    disconnecting; redis-py then fails with errors of its own, not only ConnectionError)."""
    delay = 0.1
    while not stopping.is_set():
        try:
            step(READ_BLOCK)
            delay = 0.1
            if faults is not None:
                faults.ok(what)
        except Exception as exc:
            if stopping.is_set():
                return
            wait = None if faults is None else faults.failed(what, exc)  # logged once
            if wait is None:
                if not isinstance(exc, ZtqError):
                    raise
                log.warning("%s: %s; retrying", what, exc)
                wait, delay = delay, min(delay * 2, 5.0)
            stopping.wait(wait)


class BroadcastReader(threading.Thread):
    """Reads and runs the broadcasts of a set of queues (of one slot on a Cluster)."""

    def __init__(self, owner: WorkerChannels, name: str) -> None:
        super().__init__(name=f"ztq-broadcasts-{name}", daemon=True)
        self.owner, self.host = owner, owner.host
        self.storage = owner.host.storage
        self.wanted: set[str] = set()  # the queues to read (set by WorkerChannels.beat)
        self.positions: dict[str, str] = {}  # queue -> the last entry read
        self.lock = threading.Lock()  # positions: this thread, and leave_all at the stop
        self.running = threading.Event()  # set while a broadcast runs here
        self.unrecorded: tuple[str, str, Outcome] | None = None  # ran, end not yet written

    def run(self) -> None:
        keep_reading(self.step, self.owner.stopping, f"broadcasts {self.name}", self.host.faults)
        try:
            self.flush()
        except ZtqError as exc:
            log.warning("broadcasts: the end of a run was not recorded: %s", exc)

    def step(self, block: float | None) -> int:
        """Join new queues, leave dropped ones, then read and run what is there (waiting
        up to ``block`` seconds for a broadcast); returns how many ran."""
        self.flush()
        self.sync()
        if self.host.paused.is_set() or not self.positions:
            self.owner.stopping.wait(LOOK_AGAIN)
            return 0
        open_ = self.open_positions()
        if not open_:
            self.owner.stopping.wait(PAUSED_QUEUES)
            return 0
        ran = 0
        held: set[str] = set()
        checked: set[str] = set()
        for queue, entry, fields in read_broadcasts(self.storage, open_, 10, block):
            if self.owner.stopping.is_set() or self.host.paused.is_set():
                break  # held: read again after the resume (the position did not move)
            if queue in held or queue not in self.positions:
                continue
            if queue not in checked:  # paused while this read was waiting: it waits too
                checked.add(queue)
                if self.storage.queues.is_paused(queue):
                    held.add(queue)
                    continue
            if not self.run_one(queue, entry, fields):
                break
            ran += 1
        return ran

    def open_positions(self) -> dict[str, str]:
        """The positions of the queues that are not paused (one round trip)."""
        with self.lock:
            positions = dict(self.positions)
        queues = sorted(positions)
        paused = self.storage.queues.paused_flags(queues)
        return {q: positions[q] for q, p in zip(queues, paused, strict=True) if not p}

    def sync(self) -> None:
        """Join the listeners of the queues wanted now and not joined yet, leave the others."""
        wanted = set(self.wanted)
        presence = self.owner.presence_ms
        for queue in sorted(wanted - set(self.positions)):
            with self.lock:
                if self.owner.stopping.is_set():
                    return
                op = listen_op(self.storage, queue, "join", self.host.id, presence)
                newest, now = self.storage.call(*op)
                self.positions[queue] = self.start_position(str(newest), int(now))
            log.info("broadcasts: joined queue %s after %s", queue, self.positions[queue])
        for queue in sorted(set(self.positions) - wanted):
            with self.lock:
                self.storage.call(*listen_op(self.storage, queue, "leave", self.host.id, 0))
                self.positions.pop(queue, None)

    def start_position(self, newest: str, now: int) -> str:
        """Where a joining worker starts: after the newest broadcast, or (with the worker's
        ``broadcast_catch_up`` setting, else its app's) after those sent longer ago."""
        catch_up = self.host.cfg.broadcast_catch_up or float(
            getattr(self.host.app, "broadcast_catch_up", 0) or 0
        )
        if catch_up <= 0:
            return newest
        if math.isinf(catch_up):
            return "0-0"
        since = max(0, now - int(catch_up * 1000))
        return f"{since - 1}-18446744073709551615" if since else "0-0"

    def run_one(self, queue: str, entry: str, fields: dict[str, str]) -> bool:
        """Run one broadcast here, between its start and end records; False (nothing run)
        when the worker is stopping."""
        bid, payload = fields.get("id", entry), fields.get("payload", "")
        self.running.set()  # before the look at `stopping`: stop() sets it, then looks here
        try:
            with self.lock:
                if self.owner.stopping.is_set() or queue not in self.positions:
                    return False
                record_run(self.storage, queue, bid, self.host.id, "running")
                self.positions[queue] = entry  # from here on it counts as run (at most once)
            prepared = prepare(payload, self.host.app)
            if isinstance(prepared, Outcome):
                outcome = prepared
            else:
                tf, args, kwargs, _ = prepared
                # the app's run hooks see it (logs, tracing); retries, callbacks and results
                # do not apply: it runs once per worker, recorded on the broadcast's record
                run = Run(self.host.app, self.host, queue, bid, 0, tf.name, 0, self.name,
                          started=time.time(), args=args, kwargs=kwargs)  # fmt: skip
                self.host.app.middleware.notify("before_run", run)
                outcome = call(tf, args, kwargs)
                self.host.app.middleware.notify("after_run", run, outcome)
            log.info("broadcast %s (%s) of queue %s: %s", bid, outcome.task, queue,
                     "done" if outcome.ok else outcome.error)  # fmt: skip
            self.unrecorded = (queue, bid, outcome)
            self.flush()
            return True
        finally:
            self.running.clear()

    def flush(self) -> None:
        """Write the end of the last run if Redis was away when it ended."""
        if self.unrecorded is None:
            return
        queue, bid, outcome = self.unrecorded
        state = "done" if outcome.ok else "failed"
        record_run(self.storage, queue, bid, self.host.id, state, outcome.error, outcome.result)
        self.unrecorded = None

    def leave_all(self) -> None:
        """Leave the listeners of every queue joined (the worker stops)."""
        with self.lock:
            for queue in list(self.positions):
                self.storage.call(*listen_op(self.storage, queue, "leave", self.host.id, 0))
            self.positions.clear()


class SubscriptionReader(threading.Thread):
    """Turns the messages of one subscribed channel into runs of its task."""

    def __init__(self, owner: WorkerChannels, sub: Subscription) -> None:
        super().__init__(name=f"ztq-sub-{sub.channel}-{sub.name}"[:60], daemon=True)
        self.owner, self.host, self.sub = owner, owner.host, sub
        self.task = self.host.app.lookup(sub.task)
        self.channel = Channel(sub.channel, app=self.host.app, connection=sub.connection)
        self.subscriber: Any = None
        self.claimed_at = 0.0  # when it last took over what dead readers left

    def run(self) -> None:
        what = f"subscription {self.sub.name} of {self.sub.channel}"
        keep_reading(self.step, self.owner.stopping, what, self.host.faults)

    def step(self, block: float | None) -> int:
        """Read a batch, enqueue a run per JSON message, then acknowledge the batch;
        returns how many runs were enqueued. A paused worker reads nothing; messages read
        while the worker began to stop stay unacknowledged (read again at its restart, or
        taken over by another worker)."""
        if self.subscriber is None:
            self.subscriber = self.channel.subscribe(self.sub.name, consumer=self.host.id,
                                                     start=self.sub.start)  # fmt: skip
        if self.host.paused.is_set():
            self.owner.stopping.wait(LOOK_AGAIN)
            return 0
        messages = []
        if time.monotonic() - self.claimed_at > self.host.cfg.lease:
            # messages a dead worker of this subscription read and never acknowledged
            messages = self.subscriber.claim(self.host.cfg.lease * 2)
            self.claimed_at = time.monotonic()
        messages = messages or self.subscriber.read(count=100, block=block)
        if not messages or self.owner.stopping.is_set():
            return 0
        runs = [m for m in messages if m.kind == "json"]
        try:
            if runs:
                with transaction():  # one round trip for the batch
                    for m in runs:
                        self.task.prepare((m.data,), id=self.run_id(m.id)).enqueue()
        except QueueFull as exc:
            # the task's queue is full: acknowledge what got in, leave the rest unread (it
            # is taken over again after two leases) and try again after a pause
            refused = set(exc.refused)
            self.subscriber.ack(*[m for m in messages if self.run_id(m.id) not in refused])
            raise
        self.subscriber.ack(*messages)
        return len(runs)

    def run_id(self, message_id: str) -> str:
        """The run's task id: the same for the same message, so a message enqueued twice
        (a crash between the enqueue and the ack) is one task while it is pending."""
        text = f"{self.sub.channel}\n{self.sub.name}\n{message_id}"
        return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


class WorkerChannels:
    """The broadcast readers and subscription readers of one worker."""

    def __init__(self, host: ExecutorHost) -> None:
        self.host = host
        self.stopping = threading.Event()
        self.started = False
        self.readers: dict[str, BroadcastReader] = {}  # slot group -> reader
        self.subscriptions: list[SubscriptionReader] = []
        self.unknown: set[tuple[str, str]] = set()  # subscriptions of tasks not registered
        self.presence_ms = int(max(MIN_PRESENCE, 3 * host.cfg.heartbeat) * 1000)

    def groups(self, queues: list[str]) -> dict[str, set[str]]:
        """Which reader reads which queues: one for all on a single Redis; one per queue
        on a Cluster, where one XREAD cannot span slots."""
        if not self.host.storage.is_cluster:
            return {"all": set(queues)}
        return {q: {q} for q in queues}

    def start(self) -> None:
        """Start the readers (``Worker.run``; a worker driven by ``tick()`` alone has none)."""
        self.started = True
        self.beat()

    def read_subscriptions(self, served: set[str]) -> None:
        """Start a reader for each subscribed task whose queue this worker serves now and
        has none yet: at the start, and when set-threads or the autoscaler adds the queue.
        A reader keeps reading until the worker stops (its runs go to the queue, which any
        worker serving it runs)."""
        reading = {(r.sub.channel, r.sub.name) for r in self.subscriptions}
        for key, sub in self.host.app.subscriptions.items():
            if key in reading or key in self.unknown:
                continue
            try:
                task = self.host.app.lookup(sub.task)
            except UnknownTask:
                log.warning("subscription %s of %s: task %s is not registered here",
                            sub.name, sub.channel, sub.task)  # fmt: skip
                self.unknown.add(key)
                continue
            if task.queue in served:
                reader = SubscriptionReader(self, sub)
                self.subscriptions.append(reader)
                reader.start()

    def beat(self) -> None:
        """Renew the worker's presence in the listeners of its queues (one round trip),
        give each reader the queues served now, and read the subscriptions of queues the
        worker began to serve."""
        if not self.started or self.stopping.is_set():
            return
        served = self.host.served_queues()
        self.read_subscriptions(set(served))
        groups = self.groups(served)
        for group, wanted in groups.items():
            reader = self.readers.get(group)
            if reader is None:
                reader = self.readers[group] = BroadcastReader(self, group)
                reader.wanted = wanted
                reader.start()
            reader.wanted = wanted
        for group, reader in self.readers.items():
            if group not in groups:
                reader.wanted = set()
        joined = [q for r in list(self.readers.values()) for q in list(r.positions)]
        ops = [listen_op(self.host.storage, q, "beat", self.host.id, self.presence_ms)
               for q in joined]  # fmt: skip
        self.host.storage.execute(ops)

    def stop(self, deadline: float) -> None:
        """Stop reading and leave the listeners, so no new broadcast counts on this worker.
        A broadcast running now gets until ``deadline`` (monotonic) to end; a reader that
        is only waiting in Redis is not waited for (it ends when its wait does)."""
        self.stopping.set()
        for reader in list(self.readers.values()):
            if reader.running.is_set():
                reader.join(max(0.0, deadline - time.monotonic()))
                if reader.is_alive():
                    log.warning("broadcasts: %s still runs a broadcast; leaving", reader.name)
            try:
                reader.leave_all()
            except ZtqError as exc:
                log.warning("broadcasts: could not leave the listeners: %s", exc)
