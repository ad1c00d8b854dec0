"""One executor thread: fetch a batch, run it, acknowledge it with the next fetch.

The hot path is one pipeline per batch: the acks and failures of the batch just run, then
the fetch of the next batch. The batch grows (doubling up to ``prefetch``) while tasks are
quick and drops to 1 as soon as one is slow, so a long task never holds others hostage for
long, while a flood of tiny tasks costs a fraction of a round trip each.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ztq.core.calls import TaskCall
from ztq.core.errors import ZtqError
from ztq.core.middleware import Outcome, Run
from ztq.core.scripts import Op
from ztq.core.storage import Finished, Leased
from ztq.worker.config import ThreadSpec
from ztq.worker.context import RunContext, reset_current, set_current
from ztq.worker.execute import Interruptible, Killed, SoftTimeout, call, prepare
from ztq.worker.process_slot import ProcessSlot, SlotTask

if TYPE_CHECKING:
    from ztq.worker.worker import Worker

log = logging.getLogger(__name__)

QUICK = 0.02  # seconds: tasks faster than this let the batch grow


@dataclass
class Running:
    """What the heartbeat shows for this thread, and what kill/timeouts act on."""

    lease: Leased
    task: str
    started: float
    deadline: float | None = None
    ctx: RunContext | None = None
    timed_out: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class Executor(threading.Thread):
    def __init__(self, worker: Worker, spec: ThreadSpec) -> None:
        super().__init__(name=f"ztq-{spec.name}", daemon=True)
        self.worker = worker
        self.spec = spec
        self.storage = worker.storage
        self.cfg = worker.cfg
        self.retired = threading.Event()  # set: finish the current task, then exit
        self.held: dict[tuple[str, str], int] = {}  # (queue, id) -> token, for lease renewal
        self.current: Running | None = None
        self.acks: dict[str, list[Finished]] = {}
        self.fails: list[Op] = []
        self.settled: list[tuple[str, str]] = []  # (queue, id) acked or failed, not yet sent
        self.batch = 1
        self.slot: ProcessSlot | None = None
        if spec.pool == "process":
            self.slot = ProcessSlot(
                self.cfg.imports, self.cfg.redis_url, self.cfg.prefix, self.cfg.app
            )
        self.guard = Interruptible()
        self.idle = False
        self.done_count = 0
        self.failed_count = 0

    # -- loop --------------------------------------------------------------------------------
    def run(self) -> None:
        delay = 0.1
        while not self.should_exit():
            try:
                ran = self.step()
                delay = 0.1
                if ran == 0 and self.cfg.burst and self.worker.queues_drained():
                    break
            except ZtqError as exc:
                log.warning("executor %s: %s; retrying in %.1fs", self.spec.name, exc, delay)
                self.retired.wait(delay)
                delay = min(delay * 2, 5.0)
            except (Killed, SoftTimeout):
                log.warning(
                    "executor %s: an interrupt arrived after its task ended", self.spec.name
                )
            except Exception:
                log.exception("executor %s crashed in its loop; continuing", self.spec.name)
                self.retired.wait(1.0)
        self.shutdown()

    def should_exit(self) -> bool:
        return self.retired.is_set() or self.worker.stopping.is_set()

    def step(self) -> int:
        """One batch: flush + fetch, run what came; when nothing came, wait. Returns tasks run."""
        fetch = not (self.worker.paused.is_set() or self.should_exit())
        leased = self.flush(fetch=fetch)
        if not leased:
            self.run_dry_hooks()
            if fetch:
                self.idle = True
                self.wait_for_work()
                self.idle = False
            else:
                self.retired.wait(0.2)
            return 0
        started = time.monotonic()
        ran = 0
        for i, lease in enumerate(leased):
            if self.should_exit():
                self.give_back(leased[i:])
                break
            self.run_one(lease)
            ran += 1
        per_task = (time.monotonic() - started) / max(ran, 1)
        limit = 1 if self.slot is not None else self.cfg.prefetch
        self.batch = min(self.batch * 2, limit) if per_task < QUICK else 1
        return ran

    def flush(self, fetch: bool = True) -> list[Leased]:
        """Send pending acks and failures, and fetch the next batch, in one round trip."""
        ops: list[Op] = []
        default_ttl = int(self.cfg.result_ttl * 1000)
        for queue, items in self.acks.items():
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
        ops += self.fails
        n_writes = len(ops)
        queues = list(self.spec.queues) if fetch else []
        if queues:
            ops.append(self._fetch_op(queues[0]))
        if not ops:
            return []
        replies = self.storage.execute(ops)
        for reply in replies[: n_writes - len(self.fails)]:
            for task_id in reply:
                log.warning("ack of %s refused: its lease expired and it was handed on", task_id)
        for key in self.settled:
            self.held.pop(key, None)
        self.settled = []
        self.acks = {}
        self.fails = []
        if not queues:
            return []
        leased = self._take(queues[0], replies[-1])
        for queue in queues[1:]:
            if leased:
                break
            leased = self._take(queue, self.storage.execute([self._fetch_op(queue)])[0])
        return leased

    def _fetch_op(self, queue: str) -> Op:
        lease_ms = int(self.cfg.lease * 1000)
        return self.storage.fetch_op(queue, self.worker.id, self.spec.name, lease_ms, self.batch)

    def _take(self, queue: str, reply: Any) -> list[Leased]:
        leased = self.storage.parse_fetch(queue, reply)
        for lease in leased:
            self.held[(queue, lease.id)] = lease.token
        return leased

    def wait_for_work(self) -> None:
        """Block on the wake lists until a task is ready (or ``idle_wait`` passes)."""
        self.storage.wait(self.spec.queues, self.cfg.idle_wait)

    def give_back(self, leases: list[Leased]) -> None:
        by_queue: dict[str, list[tuple[str, int]]] = {}
        for lease in leases:
            by_queue.setdefault(lease.queue, []).append((lease.id, lease.token))
            self.held.pop((lease.queue, lease.id), None)
        for queue, held in by_queue.items():
            self.storage.release(queue, self.worker.id, held)

    def shutdown(self) -> None:
        try:
            self.flush(fetch=False)
            self.run_dry_hooks()
        except ZtqError as exc:
            log.warning("executor %s could not flush at exit: %s", self.spec.name, exc)
        if self.slot is not None:
            self.slot.close()

    # -- one task ----------------------------------------------------------------------------
    def run_one(self, lease: Leased) -> None:
        """Run one leased task and settle it. The policies (time limit, retries, callbacks,
        results, batches) are the app's middleware; this only calls their hooks."""
        app = self.worker.app
        prepared = prepare(lease.payload, app)
        task = prepared.task if isinstance(prepared, Outcome) else prepared[0].name
        opts = {} if isinstance(prepared, Outcome) else prepared[3]
        run = Run(app, self.worker, lease.queue, lease.id, lease.token, task, lease.failures,
                  self.spec.name, opts, time.time())  # fmt: skip
        if isinstance(prepared, Outcome):  # nothing to run: bad payload, unknown task ...
            self.current = Running(lease, task, run.started)
            outcome = prepared
        else:
            tf, args, kwargs, _ = prepared
            outcome = self._execute(run, lease, tf, args, kwargs)
        self.current = None
        self._settle(run, lease, outcome)
        app.middleware.notify("after_run", run, outcome)

    def _execute(
        self, run: Run, lease: Leased, tf: Any, args: list[Any], kwargs: dict[str, Any]
    ) -> Outcome:
        app = self.worker.app
        app.middleware.notify("before_run", run)
        progress = run.opts.get("on_progress")
        ctx = RunContext(
            self.storage, lease.queue, lease.id, lease.token, self.worker.id, tf.name,
            TaskCall.from_dict(progress, app) if progress else None, app=app,
            attempt=lease.failures + 1,
        )  # fmt: skip
        self.current = Running(lease, tf.name, run.started, run.deadline, ctx)
        if run.deadline is not None and self.slot is None:
            self.worker.timeouts.poke()
        if self.slot is not None:
            timeout = None if run.deadline is None else max(0.001, run.deadline - run.started)
            job = SlotTask(lease.payload, lease.queue, lease.id, lease.token, self.worker.id,
                           tf.name, progress, timeout)  # fmt: skip
            outcome = self.slot.run(job)
        else:
            token = set_current(ctx)
            try:
                outcome = call(tf, args, kwargs, self.guard, self.current)
            finally:
                reset_current(token)
        return outcome

    def _settle(self, run: Run, lease: Leased, outcome: Outcome) -> None:
        """Queue the ack or the failure (sent with the next fetch) after the hooks ran."""
        hooks = self.worker.app.middleware
        self.settled.append((lease.queue, lease.id))
        if outcome.ok:
            self.done_count += 1
            hooks.notify("on_success", run, outcome)
            ttl = None if run.result_ttl is None else int(run.result_ttl * 1000)
            self.acks.setdefault(lease.queue, []).append(
                Finished(lease.id, lease.token, outcome.task, outcome.result, ttl)
            )
            return
        self.failed_count += 1
        run.retry_in = hooks.retry_delay(run, outcome)
        if run.retry_in is None:
            hooks.notify("on_failure", run, outcome)
        else:
            hooks.notify("on_retry", run, outcome, run.retry_in)
        self.fails.append(
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
        """This thread's queues ran dry (e.g. BatchCommit commits partial batches)."""
        self.worker.app.middleware.notify("on_idle", self.worker, self.spec.name)

    # -- seen from other threads -------------------------------------------------------------
    def describe(self) -> dict[str, Any] | None:
        cur = self.current
        if cur is None:
            return None
        out: dict[str, Any] = {
            "id": cur.lease.id,
            "queue": cur.lease.queue,
            "task": cur.task,
            "started": cur.started,
        }
        if cur.ctx is not None and cur.ctx.comment:
            out["comment"] = cur.ctx.comment
        return out

    def held_by_queue(self) -> dict[str, list[tuple[str, int]]]:
        out: dict[str, list[tuple[str, int]]] = {}
        for (queue, task_id), token in list(self.held.items()):
            out.setdefault(queue, []).append((task_id, token))
        return out
