"""What every executor does around a run, whatever runs it (a thread, a process slot, an
event loop): look the payload up, call the middleware's hooks, and keep the acks and failures
of the runs that ended to write with the next fetch (one round trip per batch), taking them
back for the next try when Redis refuses or is away (``unsent``).
"""

from __future__ import annotations

import abc
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from ztq.core.client.calls import TaskCall
from ztq.core.engine.scripts import Op
from ztq.core.engine.storage import Finished, Leased
from ztq.core.middleware.base import Outcome, Run
from ztq.worker.config import ThreadSpec
from ztq.worker.context import RunContext
from ztq.worker.execute import pool_mismatch, prepare
from ztq.worker.executors.batches import Batch, Sent, ends_to_relay
from ztq.worker.executors.throttle import Tokens

if TYPE_CHECKING:
    from ztq.worker.executors.host import ExecutorHost

log = logging.getLogger(__name__)


class BaseExecutor(threading.Thread, abc.ABC):
    """What every pool does around a run: look the payload up, call the middleware, and
    keep the acks and failures to send with the next fetch (one round trip per batch)."""

    def __init__(self, host: ExecutorHost, spec: ThreadSpec) -> None:
        super().__init__(name=f"ztq-{spec.name}", daemon=True)
        self.host = host
        self.spec = spec
        self.storage = host.storage
        self.cfg = host.cfg
        self.retired = threading.Event()  # set: finish the current task(s), then exit
        self.held: dict[tuple[str, str], int] = {}  # (queue, id) -> token, for lease renewal
        self.pending = Batch()  # what the runs that ended here wait to write
        self.sending = Batch()  # what is on its way to Redis
        self.sent: list[Sent] = []  # the ops of ``sending``, in the order sent
        self.relay_due: list[str] = []  # queues where the last write ended batch members
        self.done_count = 0
        self.failed_count = 0
        self.turn = 0  # which shard of a sharded queue is asked first (rotates every fetch)
        self.tokens = Tokens()  # rate-limit tokens its fetches registered it for
        # what the autoscaler measures (worker/scaler.py): runs ended, their seconds, and
        # the CPU seconds of this thread while running them (thread executors)
        self.runs_ended = 0
        self.run_seconds = 0.0
        self.cpu_seconds = 0.0

    @property
    def capacity(self) -> int:
        """How many tasks this executor runs at once (the heartbeat's thread count)."""
        return 1

    def should_exit(self) -> bool:
        return self.retired.is_set() or self.host.stopping.is_set()

    def ended(self) -> bool:
        """Its thread ran and is over (an executor is listed just before its thread starts)."""
        return self.ident is not None and not self.is_alive()

    @abc.abstractmethod
    def busy(self) -> bool:
        """A task is running here now."""

    @abc.abstractmethod
    def describe_runs(self) -> dict[str, dict[str, Any]]:
        """The running tasks for the heartbeat, by the name an operator kills them with."""

    @abc.abstractmethod
    def kill(self, thread: str, task_id: str) -> bool:
        """Interrupt the run of ``task_id`` shown as ``thread``; False if it is not here."""

    def wake(self) -> None:
        """The worker is stopping (or pausing): look at its flags now, if waiting allows."""

    def abandon(self) -> None:
        """The grace period ran out and this executor's leases were handed back: stop what
        still runs if that can be done (a process slot's child, an event loop's tasks)."""

    # -- batches -----------------------------------------------------------------------------
    def write_ops(self) -> list[Op]:
        """The acks (one call per queue and result TTL) and failures waiting to be sent. They
        move to ``sending`` until :meth:`written` (or :meth:`unsent`): runs that end while
        they travel (an async pool's) start the next batch."""
        batch = self.sending = self.pending  # seen as settling all along (renew_leases)
        self.pending = Batch()
        ops: list[Op] = []
        self.sent = []
        default_ttl = int(self.cfg.result_ttl * 1000)
        for queue, items in batch.acks.items():
            by_ttl: dict[int, list[Finished]] = {}  # one ack call per result TTL in the batch
            for it in items:
                by_ttl.setdefault(default_ttl if it.ttl_ms is None else it.ttl_ms, []).append(it)
            for ttl, group in by_ttl.items():
                ops.append(
                    self.storage.leases.ack_op(
                        queue,
                        self.host.id,
                        group,
                        result_ttl_ms=ttl,
                        history_maxlen=self.cfg.history_maxlen,
                        compact=self.cfg.compact_finished,
                    )
                )
                self.sent.append(("ack", queue, group))
        for op, key in zip(batch.fails, batch.fail_keys, strict=True):
            self.sent.append(("fail", key[0], (op, key[1])))
        return ops + batch.fails

    def written(self, replies: list[Any]) -> None:
        """The ops of :meth:`write_ops` were sent and answered (``replies``, in order)."""
        batch = self.sending
        replies, self.relay_due = ends_to_relay(self.sent, replies)
        refused = [(queue, str(task_id))
                   for (what, queue, _), reply in zip(self.sent, replies, strict=False)
                   if what == "ack" for task_id in reply]  # fmt: skip
        vanished = self.host.watch.gone(refused) if refused else set()
        for key in refused:  # one that went with Redis's data was reported once, not here
            if key not in vanished:
                log.warning("ack of %s refused: its lease expired and it was handed on", key[1])
        for key in batch.settled:
            self.held.pop(key, None)
        self.sending, self.sent = Batch(), []

    def unsent(self, applied: int | None = None) -> None:
        """Sending failed (Redis unreachable, or refusing: full, read-only): keep the batch
        for the next round trip, in its order. ``applied``: how many of the ops sent Redis
        ran before the one it refused (``fault_kinds.applied_before``); those are done and
        not sent again (an ack sent twice would be refused the second time)."""
        kept = Batch()  # seen as settling all along (renew_leases)
        done = self.sent[: applied or 0]
        for what, queue, data in self.sent[applied or 0 :]:
            if what == "ack":
                kept.acks.setdefault(queue, []).extend(data)
                kept.settled += [(queue, it.id) for it in data]
            else:
                op, task_id = data
                kept.fails.append(op)
                kept.fail_keys.append((queue, task_id))
                kept.settled.append((queue, task_id))
        for what, queue, data in done:
            for task_id in [it.id for it in data] if what == "ack" else [data[1]]:
                self.held.pop((queue, task_id), None)
        kept.add(self.pending)
        self.pending, self.sending, self.sent = kept, Batch(), []

    def settling(self, key: tuple[str, str]) -> bool:
        """The run of ``key`` (queue, id) ended here and its ack or failure is not written yet."""
        return key in self.pending.settled or key in self.sending.settled

    def fetch_order(self) -> list[str]:
        """The queues (their shards, for a sharded queue) to ask in turn for the next batch:
        the spec's order between queues (strict), or a rotating first queue (``fair``: none
        starves behind a busy one), and a rotating start within each queue's shards."""
        self.turn += 1
        queues = self.spec.queues
        if self.spec.fair:
            k = self.turn % len(queues)
            queues = queues[k:] + queues[:k]
        return self.host.physical(queues, self.turn)

    def wait_queues(self) -> list[str]:
        """Every shard of every queue watched, in a fixed order (one watcher set on Cluster)."""
        return self.host.physical(self.spec.queues)

    def fetch_op(self, queue: str, limit: int, wait_ms: int = 0) -> Op:
        lease_ms = int(self.cfg.lease * 1000)
        return self.storage.leases.fetch_op(
            queue, self.host.id, self.spec.name, lease_ms, limit, wait_ms,
            result_ttl_ms=int(self.cfg.result_ttl * 1000), history_maxlen=self.cfg.history_maxlen,
        )  # fmt: skip

    def take(self, queue: str, reply: Any) -> list[Leased]:
        self.tokens.note(self.storage, queue, reply)
        self.hold(leased := self.storage.leases.parse_fetch(queue, reply))
        return leased

    def hold(self, leased: list[Leased]) -> None:
        for lease in leased:
            self.held[(lease.queue, lease.id)] = lease.token

    # -- one task ----------------------------------------------------------------------------
    def begin(self, lease: Leased) -> tuple[Run, Outcome | tuple[Any, list[Any], dict[str, Any]]]:
        """The run of a lease, and what to call (function, args, kwargs), or the Outcome of
        a payload that cannot run here (bad JSON, unknown task, wrong arguments, a task for
        another kind of pool)."""
        app = self.host.app
        prepared = prepare(lease.payload, app)
        task = prepared.task if isinstance(prepared, Outcome) else prepared[0].name
        opts = {} if isinstance(prepared, Outcome) else prepared[3]
        run = Run(app, self.host, lease.queue, lease.id, lease.token, task, lease.failures,
                  self.spec.name, opts, time.time())  # fmt: skip
        if isinstance(prepared, Outcome):
            return run, prepared
        tf, args, kwargs, _ = prepared
        run.args, run.kwargs = args, kwargs
        mismatch = pool_mismatch(tf, self.spec.pool, lease.queue)
        return run, mismatch if mismatch is not None else (tf, args, kwargs)

    def context(self, run: Run, lease: Leased, tf: Any) -> RunContext:
        """What the task's code sees of its run (``current_run``, progress reports)."""
        progress = run.opts.get("on_progress")
        return RunContext(
            self.storage, lease.queue, lease.id, lease.token, self.host.id, tf.name,
            TaskCall.from_dict(progress, run.app) if progress else None, app=run.app,
            attempt=lease.failures + 1,
        )  # fmt: skip

    def settle(self, run: Run, lease: Leased, outcome: Outcome) -> None:
        """Queue the ack or the failure (sent with the next fetch) after the hooks ran."""
        hooks = self.host.app.middleware
        self.runs_ended += 1
        self.run_seconds += max(0.0, time.time() - run.started)
        self.pending.settled.append((lease.queue, lease.id))
        if outcome.ok:
            self.done_count += 1
            hooks.notify("on_success", run, outcome)
            ttl = None if run.result_ttl is None else int(run.result_ttl * 1000)
            self.pending.acks.setdefault(lease.queue, []).append(
                Finished(lease.id, lease.token, outcome.task, outcome.result, ttl)
            )
            return
        self.failed_count += 1
        run.retry_in = hooks.retry_delay(run, outcome)
        if run.retry_in is None:
            hooks.notify("on_failure", run, outcome)
        else:
            hooks.notify("on_retry", run, outcome, run.retry_in)
        self.pending.fail_keys.append((lease.queue, lease.id))
        self.pending.fails.append(
            self.storage.leases.fail_op(
                lease.queue,
                self.host.id,
                lease.id,
                lease.token,
                outcome.task,
                outcome.error,
                outcome.traceback,
                retry_delay_ms=-1 if run.retry_in is None else max(0, int(run.retry_in * 1000)),
                history_maxlen=self.cfg.history_maxlen,
            )
        )

    def run_dry_hooks(self) -> None:
        """This executor's queues ran dry (e.g. BatchCommit commits partial batches)."""
        self.host.app.middleware.notify("on_idle", self.host, self.spec.name)

    def held_by_queue(self) -> dict[str, list[tuple[str, int]]]:
        out: dict[str, list[tuple[str, int]]] = {}
        for (queue, task_id), token in list(self.held.items()):
            out.setdefault(queue, []).append((task_id, token))
        return out
