"""One executor thread: fetch a batch, run it, acknowledge it with the next fetch.

The hot path is one pipeline per batch: the acks and failures of the batch just run, then
the fetch of the next batch. The batch grows (doubling up to ``prefetch``) while tasks are
quick and drops to 1 as soon as one is slow, so a long task never holds others hostage for
long, while a flood of tiny tasks costs a fraction of a round trip each.
"""

from __future__ import annotations

import abc
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from ztq.core.client.calls import TaskCall
from ztq.core.engine.fault_kinds import applied_before, kind
from ztq.core.engine.scripts import Op
from ztq.core.engine.storage import Finished, Leased
from ztq.core.errors import ZtqError
from ztq.core.middleware.base import Outcome, Run
from ztq.worker.config import ThreadSpec
from ztq.worker.context import RunContext, Running, reset_current, set_current
from ztq.worker.execute import Interruptible, Killed, SoftTimeout, call, pool_mismatch, prepare
from ztq.worker.executors.batches import Batch, Sent, ends_to_relay, relay_ends
from ztq.worker.executors.process_slot import ProcessSlot, SlotTask
from ztq.worker.executors.throttle import Tokens, wait_for_token

if TYPE_CHECKING:
    from ztq.worker.worker import Worker

log = logging.getLogger(__name__)

QUICK = 0.02  # seconds: tasks faster than this let the batch grow


class BaseExecutor(threading.Thread, abc.ABC):
    """What every pool does around a run: look the payload up, call the middleware, and
    keep the acks and failures to send with the next fetch (one round trip per batch)."""

    def __init__(self, worker: Worker, spec: ThreadSpec) -> None:
        super().__init__(name=f"ztq-{spec.name}", daemon=True)
        self.worker = worker
        self.spec = spec
        self.storage = worker.storage
        self.cfg = worker.cfg
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
        return self.retired.is_set() or self.worker.stopping.is_set()

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
                    self.storage.ack_op(
                        queue,
                        self.worker.id,
                        group,
                        result_ttl_ms=ttl,
                        history_maxlen=self.cfg.history_maxlen,
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
        vanished = self.worker.watch.gone(refused) if refused else set()
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
        return self.worker.physical(queues, self.turn)

    def wait_queues(self) -> list[str]:
        """Every shard of every queue watched, in a fixed order (one watcher set on Cluster)."""
        return self.worker.physical(self.spec.queues)

    def fetch_op(self, queue: str, limit: int, wait_ms: int = 0) -> Op:
        lease_ms = int(self.cfg.lease * 1000)
        return self.storage.fetch_op(
            queue, self.worker.id, self.spec.name, lease_ms, limit, wait_ms,
            result_ttl_ms=int(self.cfg.result_ttl * 1000), history_maxlen=self.cfg.history_maxlen,
        )  # fmt: skip

    def take(self, queue: str, reply: Any) -> list[Leased]:
        self.tokens.note(self.storage, queue, reply)
        self.hold(leased := self.storage.parse_fetch(queue, reply))
        return leased

    def hold(self, leased: list[Leased]) -> None:
        for lease in leased:
            self.held[(lease.queue, lease.id)] = lease.token

    # -- one task ----------------------------------------------------------------------------
    def begin(self, lease: Leased) -> tuple[Run, Outcome | tuple[Any, list[Any], dict[str, Any]]]:
        """The run of a lease, and what to call (function, args, kwargs), or the Outcome of
        a payload that cannot run here (bad JSON, unknown task, wrong arguments, a task for
        another kind of pool)."""
        app = self.worker.app
        prepared = prepare(lease.payload, app)
        task = prepared.task if isinstance(prepared, Outcome) else prepared[0].name
        opts = {} if isinstance(prepared, Outcome) else prepared[3]
        run = Run(app, self.worker, lease.queue, lease.id, lease.token, task, lease.failures,
                  self.spec.name, opts, time.time())  # fmt: skip
        if isinstance(prepared, Outcome):
            return run, prepared
        tf, args, kwargs, _ = prepared
        mismatch = pool_mismatch(tf, self.spec.pool, lease.queue)
        return run, mismatch if mismatch is not None else (tf, args, kwargs)

    def context(self, run: Run, lease: Leased, tf: Any) -> RunContext:
        """What the task's code sees of its run (``current_run``, progress reports)."""
        progress = run.opts.get("on_progress")
        return RunContext(
            self.storage, lease.queue, lease.id, lease.token, self.worker.id, tf.name,
            TaskCall.from_dict(progress, run.app) if progress else None, app=run.app,
            attempt=lease.failures + 1,
        )  # fmt: skip

    def settle(self, run: Run, lease: Leased, outcome: Outcome) -> None:
        """Queue the ack or the failure (sent with the next fetch) after the hooks ran."""
        hooks = self.worker.app.middleware
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
            self.storage.fail_op(
                lease.queue,
                self.worker.id,
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
        self.worker.app.middleware.notify("on_idle", self.worker, self.spec.name)

    def held_by_queue(self) -> dict[str, list[tuple[str, int]]]:
        out: dict[str, list[tuple[str, int]]] = {}
        for (queue, task_id), token in list(self.held.items()):
            out.setdefault(queue, []).append((task_id, token))
        return out


class Executor(BaseExecutor):
    """One thread running one task at a time (or handing it to its process slot)."""

    def __init__(self, worker: Worker, spec: ThreadSpec) -> None:
        super().__init__(worker, spec)
        self.current: Running | None = None
        self.batch = 1
        self.waiting_on: str | None = None  # the queue this executor is the waiter of
        self.slot: ProcessSlot | None = None
        if spec.pool == "process":
            self.slot = ProcessSlot(
                self.cfg.imports, self.cfg.redis_url, self.cfg.prefix, self.cfg.app
            )
        self.guard = Interruptible()

    # -- loop --------------------------------------------------------------------------------
    def run(self) -> None:
        delay = 0.1
        where = f"executor {self.spec.name}"
        while not self.should_exit():
            try:
                ran = self.step()
                delay = 0.1
                self.worker.faults.ok(where)
                if ran == 0 and self.cfg.burst and self.worker.queues_drained():
                    break
            except ZtqError as exc:
                wait = self.worker.faults.failed(where, exc)  # a Redis fault: logged once
                if wait is None:
                    log.warning("executor %s: %s; retrying in %.1fs", self.spec.name, exc, delay)
                    wait, delay = delay, min(delay * 2, 5.0)
                self.retired.wait(wait)
            except (Killed, SoftTimeout):
                log.warning(
                    "executor %s: an interrupt arrived after its task ended", self.spec.name
                )
            except Exception as exc:
                wait = self.worker.faults.failed(where, exc)  # OOM, BUSY ...: logged once
                if wait is None:
                    log.exception("executor %s crashed in its loop; continuing", self.spec.name)
                self.retired.wait(1.0 if wait is None else wait)
        self.worker.faults.forget(where)
        self.shutdown()

    def step(self) -> int:
        """One batch: flush + fetch, run what came; when nothing came, wait. Returns tasks run."""
        fetch = not (self.worker.paused.is_set() or self.should_exit())
        leased = self.flush(fetch=fetch)
        if not leased:
            self.run_dry_hooks()
            if fetch:
                leased = self.wait_for_work()
            else:
                self.retired.wait(0.2)
            if not leased:
                return 0
        started = time.monotonic()
        ran = 0
        for i, lease in enumerate(leased):
            if self.should_exit():
                self.give_back(leased[i:])
                break
            if lease.expires_at is not None and lease.expired():
                # past its expiry in this batch: given back (a fetch ends it), or left to lapse
                try:
                    self.give_back([lease])
                except (ZtqError, RedisError) as exc:
                    log.warning("could not give back expired task %s: %s", lease.id, exc)
                continue
            self.run_one(lease)
            ran += 1
        per_task = (time.monotonic() - started) / max(ran, 1)
        limit = 1 if self.slot is not None else self.cfg.prefetch
        self.batch = min(self.batch * 2, limit) if per_task < QUICK else 1
        return ran

    def flush(self, fetch: bool = True) -> list[Leased]:
        """Send pending acks and failures, and fetch the next batch, in one round trip."""
        ops = self.write_ops()
        n_writes = len(ops)
        queues = self.fetch_order() if fetch else []
        self.tokens.clear()
        if queues:
            # one queue watched: when it is empty, be its waiter (an enqueue hands the next
            # task straight to this thread: one round trip from enqueue to start)
            wait_ms = int(self.cfg.idle_wait * 1000) if len(queues) == 1 else 0
            ops.append(self.fetch_op(queues[0], self.batch, wait_ms))
        if not ops:
            return []
        try:
            replies = self.storage.execute(ops)
        except BaseException as exc:  # unreachable, READONLY, OOM ...: kept for the next try
            self.unsent(applied_before(exc))
            raise
        self.written(replies[:n_writes])
        if self.relay_due:  # one more round trip, only when the writes ended batch members
            relay_ends(self.storage, self.worker.app, self.relay_due)
        if not queues:
            return []
        registered = self.storage.fetch_registered(replies[-1])
        self.waiting_on = queues[0] if registered else None
        leased = self.take(queues[0], replies[-1])
        for queue in queues[1:]:
            if leased:
                break
            leased = self.take(queue, self.storage.execute([self.fetch_op(queue, self.batch)])[0])
        if leased:  # it runs these: another executor awaits the tokens it registered for
            self.tokens.leave(self.storage, self.worker.id, self.spec.name)
        return leased

    def wait_for_work(self) -> list[Leased]:
        """Block until a task is ready (or ``idle_wait`` passes): on the hand list and the
        wake list of the queue this thread is the waiter of (a handed task comes back leased,
        to run at once), else on the wake lists."""
        queue, self.waiting_on = self.waiting_on, None
        token = self.tokens.pop()
        if token is not None:  # registered for a rate limit's next token: sleep until it
            wait_for_token(self.storage, self.wait_queues(), token, self.retired, self.should_exit)
            return []
        if queue is None:
            self.storage.wait(self.wait_queues(), self.cfg.idle_wait)
            return []
        got = self.storage.wait_handed(queue, self.worker.id, self.spec.name, self.cfg.idle_wait)
        if not isinstance(got, Leased):
            return []
        self.hold([got])
        if self.worker.paused.is_set() or self.should_exit():
            self.give_back([got])  # handed just as the worker paused or this thread retires
            return []
        return [got]

    def give_back(self, leases: list[Leased]) -> None:
        """Not held any more (even if Redis refuses the release: the leases lapse)."""
        for lease in leases:
            self.held.pop((lease.queue, lease.id), None)
        for queue in dict.fromkeys(lease.queue for lease in leases):
            mine = [(x.id, x.token) for x in leases if x.queue == queue]
            self.storage.release(queue, self.worker.id, mine)

    def shutdown(self) -> None:
        try:
            self.flush(fetch=False)
            self.stop_waiting()
            self.run_dry_hooks()
        except Exception as exc:  # Redis refusing too: what was not written runs again
            if kind(exc) is None and not isinstance(exc, ZtqError):
                raise
            log.warning("executor %s could not flush at exit: %s", self.spec.name, exc)
        if self.slot is not None:
            self.slot.close()

    def stop_waiting(self) -> None:
        """No longer the waiter of its queue (an exit): a task handed meanwhile goes back."""
        if len(self.wait_queues()) != 1:
            return
        [queue] = self.wait_queues()
        [reply] = self.storage.execute([self.fetch_op(queue, 0)])
        handed = self.take(queue, reply)
        if handed:
            self.give_back(handed)

    # -- one task ----------------------------------------------------------------------------
    def run_one(self, lease: Leased) -> None:
        """Run one leased task and settle it. The policies (time limit, retries, callbacks,
        results, batches) are the app's middleware; this only calls their hooks."""
        cpu = time.thread_time()
        run, todo = self.begin(lease)
        if isinstance(todo, Outcome):  # nothing to run: bad payload, unknown task ...
            self.current = Running(lease, run.task, run.started)
            outcome = todo
        else:
            outcome = self._execute(run, lease, *todo)
        self.cpu_seconds += time.thread_time() - cpu
        self.current = None
        self.settle(run, lease, outcome)
        run.app.middleware.notify("after_run", run, outcome)

    def _execute(
        self, run: Run, lease: Leased, tf: Any, args: list[Any], kwargs: dict[str, Any]
    ) -> Outcome:
        run.app.middleware.notify("before_run", run)
        ctx = self.context(run, lease, tf)
        self.current = Running(lease, tf.name, run.started, run.deadline, ctx)
        if run.deadline is not None and self.slot is None:
            self.worker.timeouts.poke()
        if self.slot is not None:
            timeout = None if run.deadline is None else max(0.001, run.deadline - run.started)
            job = SlotTask(lease.payload, lease.queue, lease.id, lease.token, self.worker.id,
                           tf.name, run.opts.get("on_progress"), timeout, lease.failures + 1,
                           run.carry)  # fmt: skip
            return self.slot.run(job)
        token = set_current(ctx)
        try:
            return call(tf, args, kwargs, self.guard, self.current)
        finally:
            reset_current(token)

    # -- seen from other threads -------------------------------------------------------------
    def busy(self) -> bool:
        return self.current is not None

    def describe_runs(self) -> dict[str, dict[str, Any]]:
        cur = self.current
        if cur is None:
            return {}
        out: dict[str, Any] = {
            "id": cur.lease.id,
            "queue": cur.lease.queue,
            "task": cur.task,
            "started": cur.started,
        }
        if cur.ctx is not None and cur.ctx.comment:
            out["comment"] = cur.ctx.comment
        return {self.spec.name: out}

    def abandon(self) -> None:
        if self.slot is not None:
            self.slot.close()

    def kill(self, thread: str, task_id: str) -> bool:
        cur = self.current
        if thread != self.spec.name or cur is None or cur.lease.id != task_id:
            return False
        if self.slot is not None:
            self.slot.kill()
        else:
            self.guard.interrupt(self, Killed, cur)
        return True
