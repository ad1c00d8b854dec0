"""An async pool: one thread, one event loop, up to N ``async def`` tasks of a queue at once.

``--queue crawl:200:async`` (``crawl = 200 async`` in ``[queues]``) gives the queue one
:class:`AsyncExecutor`. Around each run it does what a thread executor does (the shared
:class:`~ztq.worker.executors.base.BaseExecutor`): the same leases, fencing tokens, scripts and
middleware hooks. Its loop leases as many tasks as it has free places, in one round trip
with the acks and failures of the runs that ended since, and starts each as an asyncio task;
it waits on the queue's wake list and on its own runs ending at once. Lease renewal and
heartbeats stay on the worker's main thread, so a task that hogs the loop does not lose its
lease. A timeout or a kill cancels the task's coroutine: the run fails with ``SoftTimeout``
or ``Killed``, as a thread task would.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ztq.core.engine.aio.transport import AsyncStorage, make_async_client
from ztq.core.engine.fault_kinds import applied_before
from ztq.core.engine.storage import Leased
from ztq.core.errors import ConfigError, ZtqError
from ztq.core.middleware.base import Outcome, Run
from ztq.worker.config import ThreadSpec
from ztq.worker.context import RunContext, set_current
from ztq.worker.execute import Killed, SoftTimeout, acall
from ztq.worker.executors.base import BaseExecutor
from ztq.worker.executors.batches import relay_ends

if TYPE_CHECKING:
    from ztq.worker.executors.host import ExecutorHost


log = logging.getLogger(__name__)

FETCH_MAX = 500  # most tasks leased in one round trip
PAUSED_LOOK = 0.2  # seconds between looks at the pause flag (and at the exit while draining)


@dataclass
class InFlight:
    """One run on the loop: what the heartbeat shows and what kill and timeouts act on."""

    lease: Leased
    slot: int  # its place among the pool's N (the heartbeat shows it as "<thread>/<slot>")
    started: float
    task: str = "?"
    ctx: RunContext | None = None
    job: asyncio.Task[None] | None = None
    why: BaseException | None = None  # set when the pool cancels it: SoftTimeout or Killed
    begun: bool = False  # its asyncio task took its first step
    settled: bool = False  # its ack or failure is queued


class AsyncExecutor(BaseExecutor):
    def __init__(self, host: ExecutorHost, spec: ThreadSpec) -> None:
        super().__init__(host, spec)
        if len(spec.queues) != 1:
            raise ConfigError(f"async pool {spec.name!r} must serve one queue, not {spec.queues}")
        if not self.storage.url or self.storage.url.startswith("memory:"):
            raise ConfigError("an async pool needs a Redis URL: it opens its own connection")
        self.queue = spec.queues[0]
        self.limit = spec.concurrency
        self.runs: dict[str, InFlight] = {}  # task id -> its run
        self.loop: asyncio.AbstractEventLoop | None = None
        self.astorage: AsyncStorage | None = None
        self._changed: asyncio.Event | None = None  # a run ended, a kill came, the size changed
        self._waker: asyncio.Task[bool] | None = None  # the pending BLPOP on the wake list

    # -- seen from other threads -------------------------------------------------------------
    @property
    def capacity(self) -> int:
        return self.limit

    def busy(self) -> bool:
        return bool(self.runs)

    def describe_runs(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for info in list(self.runs.values()):
            entry: dict[str, Any] = {"id": info.lease.id, "queue": info.lease.queue,
                                     "task": info.task, "started": info.started}  # fmt: skip
            if info.ctx is not None and info.ctx.comment:
                entry["comment"] = info.ctx.comment
            out[f"{self.spec.name}/{info.slot}"] = entry
        return out

    def kill(self, thread: str, task_id: str) -> bool:
        """Cancel the run of ``task_id``; ``thread`` is this pool's name or a place in it
        (what the task's record and the heartbeat show)."""
        if thread != self.spec.name and not thread.startswith(self.spec.name + "/"):
            return False
        info = self.runs.get(task_id)
        if info is None or self.loop is None:
            return False
        try:
            self.loop.call_soon_threadsafe(self._interrupt, info, Killed("killed by an operator"))
        except RuntimeError:  # the loop has ended: nothing of it runs any more
            return False
        return True

    def resize(self, limit: int) -> None:
        """Run up to ``limit`` tasks at once from now on (the console's set-threads)."""
        self.limit = limit
        self._poke()

    def abandon(self) -> None:
        if self.loop is not None and not self.loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self.loop.call_soon_threadsafe(self._cancel_all)

    def wake(self) -> None:
        self._poke()

    def _poke(self) -> None:
        if self.loop is not None and self._changed is not None:
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self._changed.set)

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> None:
        self.loop = asyncio.new_event_loop()
        try:
            self.loop.run_until_complete(self.main())
        except Exception:
            log.exception("async pool %s stopped on an error", self.spec.name)
        finally:
            with contextlib.suppress(Exception):
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()
            self.give_back_held()

    def give_back_held(self) -> None:
        """The loop ended with leases still held (it stopped on an error, or was abandoned):
        hand them back now rather than let them wait for the reaper."""
        for queue, held in self.held_by_queue().items():
            try:
                self.storage.leases.release(queue, self.host.id, held)
            except ZtqError as exc:  # the leases expire and the reaper hands them on
                log.warning("async pool %s could not give back %s: %s", self.spec.name, queue, exc)
        self.held.clear()

    async def main(self) -> None:
        self._changed = asyncio.Event()
        url = self.storage.url
        client = make_async_client(url, cluster=self.storage.is_cluster)
        self.astorage = AsyncStorage(client, prefix=self.storage.keys.prefix, url=url)
        try:
            await self.serve()
        finally:
            try:
                await self.flush(fetch=False, free=0)
                self.run_dry_hooks()
            except Exception as exc:  # what was not written expires and runs again
                log.warning("async pool %s could not flush at exit: %s", self.spec.name, exc)
            if self._waker is not None:
                self._waker.cancel()
                with contextlib.suppress(BaseException):
                    await self._waker
            with contextlib.suppress(Exception):
                await self.astorage.close()

    async def serve(self) -> None:
        delay = 0.1
        where = f"async pool {self.spec.name}"
        try:
            while True:
                exiting = self.should_exit()
                if exiting and not self.runs:
                    return
                try:
                    if await self.step(exiting):
                        return
                    delay = 0.1
                    self.host.faults.ok(where)
                except Exception as exc:  # Redis unreachable or refusing: the runs go on
                    wait = self.host.faults.failed(where, exc)  # a Redis fault: logged once
                    if wait is None:
                        if isinstance(exc, ZtqError):
                            log.warning("async pool %s: %s; again in %.1fs",
                                        self.spec.name, exc, delay)  # fmt: skip
                        else:
                            log.exception("async pool %s: again in %.1fs", self.spec.name, delay)
                        wait, delay = delay, min(delay * 2, 5.0)
                    await self._wait(fetch=False, timeout=wait)
        finally:
            self.host.faults.forget(where)

    async def step(self, exiting: bool) -> bool:
        """Write what ended, lease what fits, start it; wait when nothing more is to be had.
        True when a burst worker's queue ran dry."""
        free = self.limit - len(self.runs)
        fetch = free > 0 and not exiting and not self.host.paused.is_set()
        leased = await self.flush(fetch, free)
        for lease in leased:
            self.launch(lease)
        if fetch and len(leased) == min(free, FETCH_MAX):
            return False  # it took all it asked for: more may be ready
        if not self.runs and not leased:
            self.run_dry_hooks()
            if self.cfg.burst and self.host.queues_drained():
                return True
        paused = not fetch and not exiting and free > 0
        # registered for a rate limit's next token: wake at that instant (asyncio's timer),
        # a wake-up token or a run's end sooner
        token = self.tokens.pop()
        await self._wait(fetch=fetch, timeout=PAUSED_LOOK if paused or exiting else token)
        return False

    async def flush(self, fetch: bool, free: int) -> list[Leased]:
        """Send the acks and failures of the runs that ended, and lease up to ``free`` more,
        in one round trip."""
        assert self.astorage is not None
        ops = self.write_ops()
        n_writes = len(ops)
        queues = self.fetch_order() if fetch else []  # the queue, or its shards in turn
        want = min(free, FETCH_MAX)
        self.tokens.clear()
        if queues:
            ops.append(self.fetch_op(queues[0], want))
        if not ops:
            return []
        try:
            replies = await self.astorage.execute(ops)
        except BaseException as exc:  # unreachable, READONLY, OOM ...: kept for the next try
            self.unsent(applied_before(exc))
            raise
        self.written(replies[:n_writes])
        if self.relay_due:  # batch members ended: relayed off the event loop
            await asyncio.to_thread(
                relay_ends, self.storage, self.host.app, self.relay_due, self.host.faults
            )
        if not queues:
            return []
        leased = self.take(queues[0], replies[-1])
        for queue in queues[1:]:
            if leased:
                break
            [reply] = await self.astorage.execute([self.fetch_op(queue, want)])
            leased = self.take(queue, reply)
        return leased

    async def _wait(self, *, fetch: bool, timeout: float | None) -> None:
        """Until a run ends (or is interrupted, or the pool resized), or, when ``fetch``, a
        wake-up token arrives; ``idle_wait`` at most."""
        assert self._changed is not None and self.astorage is not None
        waits: set[asyncio.Future[Any]] = set()
        if not fetch and self._waker is not None and not self._waker.done():
            self._waker.cancel()  # full or paused: leave wake-up tokens to idle workers
            self._waker = None
        if fetch:
            if self._waker is None or self._waker.done():
                self._waker = asyncio.ensure_future(
                    self.astorage.waits.wait(self.wait_queues(), self.cfg.idle_wait)
                )
            waits.add(self._waker)
        changed = asyncio.ensure_future(self._changed.wait())
        waits.add(changed)
        try:
            await asyncio.wait(
                waits, timeout=timeout or self.cfg.idle_wait, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            changed.cancel()
            self._changed.clear()
        if self._waker is not None and self._waker.done():
            waker, self._waker = self._waker, None
            failed = None if waker.cancelled() else waker.exception()
            if (
                failed is not None
                and self.host.faults.failed(f"async pool {self.spec.name}", failed) is None
            ):  # a Redis fault is logged once per kind (resilience/faults.py)
                log.warning("async pool %s: %s", self.spec.name, failed)

    # -- one run -----------------------------------------------------------------------------
    def launch(self, lease: Leased) -> None:
        taken = {info.slot for info in self.runs.values()}
        slot = next(i for i in range(len(taken) + 1) if i not in taken)
        info = InFlight(lease, slot, time.time())
        self.runs[lease.id] = info
        info.job = asyncio.get_running_loop().create_task(
            self.run_one(info), name=f"ztq {lease.queue}:{lease.id}"
        )
        # here, not in run_one: a task cancelled before its first step never runs its body
        info.job.add_done_callback(lambda _: self._ended(info))

    async def run_one(self, info: InFlight) -> None:
        """Run one leased task on the loop and settle it, in an asyncio task of its own (so
        its context, hence ``current_run()`` and a trace span, is its own)."""
        info.begun = True
        lease = info.lease
        try:
            run, todo = self.begin(lease)
            info.task = run.task
            if isinstance(todo, Outcome):  # nothing to run: bad payload, a plain function ...
                outcome = todo
            else:
                outcome = await self._execute(run, info, *todo)
            self.settle(run, lease, outcome)
            info.settled = True
            run.app.middleware.notify("after_run", run, outcome)
        except asyncio.CancelledError:
            # abandoned after the grace period: the worker handed its lease back
            log.warning("async pool %s: run of %s abandoned", self.spec.name, lease.id)
        except ZtqError as exc:  # a hook could not reach Redis: the lease expires, it reruns
            log.warning("async pool %s: run of %s: %s", self.spec.name, lease.id, exc)
        except Exception:
            log.exception("async pool %s: run of %s crashed", self.spec.name, lease.id)

    def _ended(self, info: InFlight) -> None:
        self.runs.pop(info.lease.id, None)
        if not info.settled:  # not renewed any more: the reaper hands it on
            self.held.pop((info.lease.queue, info.lease.id), None)
        if self._changed is not None:
            self._changed.set()

    async def _execute(
        self, run: Run, info: InFlight, tf: Any, args: list[Any], kwargs: dict[str, Any]
    ) -> Outcome:
        run.app.middleware.notify("before_run", run)
        ctx = self.context(run, info.lease, tf)
        ctx.astorage = self.astorage
        info.ctx = ctx
        set_current(ctx)  # this asyncio task's own context: no reset needed
        timer = None
        if run.deadline is not None:
            why = SoftTimeout(f"the task ran past its timeout of {run.opts.get('timeout')}s")
            delay = max(0.0, run.deadline - time.time())
            timer = asyncio.get_running_loop().call_later(delay, self._interrupt, info, why)
        try:
            return await acall(tf, args, kwargs, lambda: info.why)
        finally:
            if timer is not None:
                timer.cancel()

    def _interrupt(self, info: InFlight, why: BaseException) -> None:
        """Cancel a run for a reason its outcome will carry (on the loop's thread). Again on
        each call: a task that swallowed a timeout's cancellation can still be killed."""
        if info.job is None or info.job.done():
            return
        info.why = why
        if info.begun:
            info.job.cancel()
        # not begun yet: acall sees info.why before the task's code starts

    def _cancel_all(self) -> None:
        for info in list(self.runs.values()):
            if info.job is not None:
                info.job.cancel()
