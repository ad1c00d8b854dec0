"""One executor thread: fetch a batch, run it, acknowledge it with the next fetch.

The hot path is one pipeline per batch: the acks and failures of the batch just run, then
the fetch of the next batch. The batch grows (doubling up to ``prefetch``) while tasks are
quick and drops to 1 as soon as one is slow, so a long task never holds others hostage for
long, while a flood of tiny tasks costs a fraction of a round trip each.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ztq.core.engine.connection import RedisError
from ztq.core.engine.fault_kinds import applied_before, kind
from ztq.core.engine.storage import Leased
from ztq.core.errors import ZtqError
from ztq.core.middleware.base import Outcome, Run
from ztq.worker.config import ThreadSpec
from ztq.worker.context import Running, reset_current, set_current
from ztq.worker.execute import Interruptible, Killed, SoftTimeout, call
from ztq.worker.executors.base import BaseExecutor
from ztq.worker.executors.batches import relay_ends
from ztq.worker.executors.process_slot import ProcessSlot, SlotTask
from ztq.worker.executors.throttle import wait_for_token

if TYPE_CHECKING:
    from ztq.worker.executors.host import ExecutorHost

log = logging.getLogger(__name__)

QUICK = 0.02  # seconds: tasks faster than this let the batch grow


@dataclass
class Flight:
    """What :meth:`Executor.send` sent: the function that reads the replies, how many of
    them answer writes (acks, failures), and the queues asked for the next batch."""

    results: Callable[[], list[Any]]
    n_writes: int
    queues: list[str]


class Executor(BaseExecutor):
    """One thread running one task at a time (or handing it to its process slot)."""

    def __init__(self, host: ExecutorHost, spec: ThreadSpec) -> None:
        super().__init__(host, spec)
        self.current: Running | None = None
        self.batch = 1
        self.waiting_on: str | None = None  # the queue this executor is the waiter of
        self.slot: ProcessSlot | None = None
        if spec.pool == "process":
            self.slot = ProcessSlot(
                self.cfg.imports, self.cfg.redis_url, self.cfg.prefix, self.cfg.app
            )
        self.guard = Interruptible()
        self.ahead: Flight | None = None  # the next fetch, sent before the batch ran (step)

    # -- loop --------------------------------------------------------------------------------
    def run(self) -> None:
        delay = 0.1
        where = f"executor {self.spec.name}"
        while not self.should_exit():
            try:
                ran = self.step()
                delay = 0.1
                self.host.faults.ok(where)
                if ran == 0 and self.cfg.burst and self.host.queues_drained():
                    break
            except ZtqError as exc:
                wait = self.host.faults.failed(where, exc)  # a Redis fault: logged once
                if wait is None:
                    log.warning("executor %s: %s; retrying in %.1fs", self.spec.name, exc, delay)
                    wait, delay = delay, min(delay * 2, 5.0)
                self.retired.wait(wait)
            except (Killed, SoftTimeout):
                log.warning(
                    "executor %s: an interrupt arrived after its task ended", self.spec.name
                )
            except Exception as exc:
                wait = self.host.faults.failed(where, exc)  # OOM, BUSY ...: logged once
                if wait is None:
                    log.exception("executor %s crashed in its loop; continuing", self.spec.name)
                self.retired.wait(1.0 if wait is None else wait)
        self.host.faults.forget(where)
        self.shutdown()

    def step(self) -> int:
        """One batch: flush + fetch, run what came; when nothing came, wait. Returns tasks run.

        While tasks are quick (the batch has grown past 1) and the last fetch took a full
        batch, the next fetch is sent *ahead*, with the acks of the batch before, just before
        this batch runs: Redis runs them while the tasks run, and the next step finds its
        batch read already (no round trip between two batches). A batch that turns slow
        gives back what was fetched ahead, as a slow task must not hold others."""
        fetch = not (self.host.paused.is_set() or self.should_exit())
        leased: list[Leased] = []
        if self.ahead is not None:
            flight, self.ahead = self.ahead, None
            leased = self.collect(flight)
            if leased and not fetch:  # paused or retiring since it was sent
                self.give_back(leased)
                leased = []
        if not leased:
            leased = self.flush(fetch=fetch)
        if not leased:
            self.run_dry_hooks()
            if fetch and not (self.cfg.burst and self.host.queues_drained()):
                leased = self.wait_for_work()  # burst and drained: no idle_wait before exiting
            else:
                self.retired.wait(0.2)
            if not leased:
                return 0
        if fetch and self.slot is None and 1 < self.batch <= len(leased):
            self.ahead = self.send(fetch=True, wait=False)
        started, cpu = time.monotonic(), time.thread_time()  # per batch: a syscall here
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
        self.cpu_seconds += time.thread_time() - cpu
        per_task = (time.monotonic() - started) / max(ran, 1)
        limit = 1 if self.slot is not None else self.cfg.prefetch
        self.batch = min(self.batch * 2, limit) if per_task < QUICK else 1
        if self.batch == 1 and self.ahead is not None:  # slow: what came ahead goes back
            flight, self.ahead = self.ahead, None
            self.give_back(self.collect(flight))
        return ran

    def flush(self, fetch: bool = True) -> list[Leased]:
        """Send pending acks and failures, and fetch the next batch, in one round trip."""
        return self.collect(self.send(fetch))

    def send(self, fetch: bool, wait: bool = True) -> Flight | None:
        """Send the pending acks and failures and (``fetch``) the fetch of the next batch
        from the first queue in turn; :meth:`collect` reads the replies. ``wait``: when
        that queue has nothing, become its waiter (one queue watched: an enqueue then hands
        its task straight to this thread); not for a fetch sent ahead, as this thread is
        busy until it collects it."""
        ops = self.write_ops()
        n_writes = len(ops)
        queues = self.fetch_order() if fetch else []
        self.tokens.clear()
        if queues:
            wait_ms = int(self.cfg.idle_wait * 1000) if wait and len(queues) == 1 else 0
            ops.append(self.fetch_op(queues[0], self.batch, wait_ms))
        if not ops:
            return None
        try:
            results = self.storage.submit(ops)
        except BaseException as exc:  # unreachable, READONLY, OOM ...: kept for the next try
            self.unsent(applied_before(exc))
            raise
        return Flight(results, n_writes, queues)

    def collect(self, flight: Flight | None) -> list[Leased]:
        """The replies of a :meth:`send`: the writes settled, the batch leased (asking the
        other queues in turn, one round trip each, while none had any)."""
        if flight is None:
            return []
        try:
            replies = flight.results()
        except BaseException as exc:
            self.unsent(applied_before(exc))
            raise
        self.written(replies[: flight.n_writes])
        if self.relay_due:  # one more round trip, only when the writes ended batch members
            relay_ends(self.storage, self.host.app, self.relay_due, self.host.faults)
        queues = flight.queues
        if not queues:
            return []
        registered = self.storage.leases.fetch_registered(replies[-1])
        self.waiting_on = queues[0] if registered else None
        leased = self.take(queues[0], replies[-1])
        for queue in queues[1:]:
            if leased:
                break
            leased = self.take(queue, self.storage.execute([self.fetch_op(queue, self.batch)])[0])
        if leased:  # it runs these: another executor awaits the tokens it registered for
            self.tokens.leave(self.storage, self.host.id, self.spec.name)
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
            self.storage.waits.wait(self.wait_queues(), self.cfg.idle_wait)
            return []
        got = self.storage.waits.wait_handed(
            queue, self.host.id, self.spec.name, self.cfg.idle_wait
        )
        if not isinstance(got, Leased):
            return []
        self.hold([got])
        if self.host.paused.is_set() or self.should_exit():
            self.give_back([got])  # handed just as the worker paused or this thread retires
            return []
        return [got]

    def give_back(self, leases: list[Leased]) -> None:
        """Not held any more (even if Redis refuses the release: the leases lapse)."""
        for lease in leases:
            self.held.pop((lease.queue, lease.id), None)
        for queue in dict.fromkeys(lease.queue for lease in leases):
            mine = [(x.id, x.token) for x in leases if x.queue == queue]
            self.storage.leases.release(queue, self.host.id, mine)

    def shutdown(self) -> None:
        try:
            if self.ahead is not None:  # fetched ahead, not run: handed back
                flight, self.ahead = self.ahead, None
                self.give_back(self.collect(flight))
            self.flush(fetch=False)
            self.stop_waiting()
            self.run_dry_hooks()
        except Exception as exc:  # Redis refusing too: what was not written runs again
            if kind(exc) is None and not isinstance(exc, ZtqError):
                raise
            log.warning("executor %s could not flush at exit: %s", self.spec.name, exc)
        if self.slot is not None:
            self.slot.close()
        self.host.wakeup.set()  # --burst: the main loop sees at once that this one ended

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
        run, todo = self.begin(lease)
        if isinstance(todo, Outcome):  # nothing to run: bad payload, unknown task ...
            self.current = Running(lease, run.task, run.started)
            outcome = todo
        else:
            outcome = self._execute(run, lease, *todo)
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
            self.host.timeouts.poke()
        if self.slot is not None:
            timeout = None if run.deadline is None else max(0.001, run.deadline - run.started)
            job = SlotTask(lease.payload, lease.queue, lease.id, lease.token, self.host.id,
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
