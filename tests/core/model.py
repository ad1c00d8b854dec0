"""A small pure-Python model of one queue's task states, written from docs/design.md.

It knows nothing of Redis or Lua: the state-machine test (``test_state_machine.py``) runs
every operation on the model and on the real scripts and compares the outcomes and the
whole stored state after each step. Times come from Redis (the replies' clocks, or a score
read back once when a step sets it): the model decides what happens, never when.
"""

from __future__ import annotations

from dataclasses import dataclass, field

LEVELS = ("high", "normal", "low")
LISTS = (*LEVELS, "overflow")  # the lists a waiting task's entry is in


@dataclass
class Rec:
    state: str  # queued | overflow | delayed | running | error | done | expired
    prio: str = "normal"
    due: int | None = None  # delayed: due time (ms, Redis clock)
    fence: int | None = None  # running: the live lease's token
    worker: str | None = None
    thread: str | None = None
    deadline: int | None = None  # running: lease deadline (ms)
    failed_at: int | None = None  # error: when it entered the error queue (ms)
    rerun: bool = False
    attempts: int = 0
    failures: int = 0
    lost: int = 0
    progress: str | None = None
    result: str | None = None
    entry: str | None = None  # its list entry when not the id itself (``<id>#<n>``)
    settled: tuple[int, str] | None = None  # the last run that ended: (token, outcome)
    exp: str | None = None  # its expiry (``expires=``): None, "live" or "passed"


@dataclass(frozen=True)
class Lease:
    worker: str
    thread: str
    id: str
    token: int


@dataclass
class Model:
    recs: dict[str, Rec] = field(default_factory=dict)
    # the lists as Redis holds them: entries, leftovers included (see ``marks``)
    ready: dict[str, list[str]] = field(default_factory=lambda: {lv: [] for lv in LEVELS})
    # per list (a level or "overflow"): the entries left behind by a delete or a move
    marks: dict[str, set[str]] = field(default_factory=lambda: {n: set() for n in LISTS})
    paused: bool = False
    max_running: int | None = None  # the queue's limit on leases at once (configure_queue)
    max_pending: int | None = None  # the queue's limit on ready tasks (configure_queue)
    when_full: str = "raise"  # raise | block | buffer
    # the queue's rate limit, "1/h burst B" (None: none): an hour is far longer than a run,
    # so no token comes back during one and the tokens are exact on Redis's clock (GCRA:
    # tat - now is ``debt`` hours, less the few ms the run took; a fetch finds B - debt)
    rate_burst: int | None = None
    debt: int = 0  # starts counted against the rate since the run began (kept when lifted)
    sleeper: tuple[str, str] | None = None  # the executor registered for the next token
    throttle: str | None = None  # the last fetch: None, "sleep" (code 2), "slot" (code 3)
    overflow: list[str] = field(default_factory=list)  # the buffer of a full queue, in order
    waiter: tuple[str, str] | None = None  # the idle executor a new task is handed to
    hand: list[tuple[str, str, str, int]] = field(default_factory=list)  # (w, t, id, token)
    refused: int = 0  # enqueues refused by a full queue (the totals' counter)
    overflowed: int = 0  # enqueues that went to the buffer
    # the console's trash: per delete (batch), the error records it took, as they were
    trash: dict[str, dict[str, Rec]] = field(default_factory=dict)
    counter: int = 0  # the queue's lease counter: the last token handed out
    cron_last: dict[str, int] = field(default_factory=dict)
    done_count: int = 0  # accepted acks (stats)
    failed_count: int = 0  # accepted failures (stats)
    expired_count: int = 0  # tasks a fetch found past their expiry (stats)
    history: int = 0  # entries in the history stream
    # what the step just (re)timed, for the test to read back from Redis: (zset, id)
    stamped: list[tuple[str, str]] = field(default_factory=list)
    # batch members (docs/batches.md): their ends, in the order the queue's outbox holds
    # them, (id, 'done' or 'failed', fence) until relayed (tests/core/batch_model.py)
    members: frozenset[str] = frozenset()
    ends: list[tuple[str, str, int]] = field(default_factory=list)

    def _ended(self, task_id: str, outcome: str, fence: int | None) -> None:
        if task_id in self.members:
            self.ends.append((task_id, outcome, fence or 0))

    # -- helpers -------------------------------------------------------------------------------
    def state(self, task_id: str) -> str:
        rec = self.recs.get(task_id)
        return rec.state if rec else "none"

    def holds(self, lease: Lease) -> bool:
        rec = self.recs.get(lease.id)
        return (
            rec is not None
            and rec.state == "running"
            and rec.fence == lease.token
            and rec.worker == lease.worker
        )

    def _unready(self, task_id: str) -> None:
        """A waiting task leaves its list (deleted, moved): its entry stays, marked."""
        rec = self.recs[task_id]
        if rec.state in ("queued", "overflow"):
            name = rec.prio if rec.state == "queued" else "overflow"
            self.marks[name].add(rec.entry or task_id)
            rec.entry = None

    def _push(self, name: str, task_id: str, rec: Rec, head: bool) -> None:
        """Push the task's entry: the id, or ``<id>#<n>`` where a leftover of it waits."""
        entry, n = task_id, 0
        while entry in self.marks[name]:
            n += 1
            entry = f"{task_id}#{n}"
        rec.entry = entry if n else None
        lst = self.overflow if name == "overflow" else self.ready[name]
        lst.insert(0, entry) if head else lst.append(entry)

    def _pop(self, name: str, want: str) -> str | None:
        """Pop the head entry of a list: the id of a live one, None for a leftover."""
        lst = self.overflow if name == "overflow" else self.ready[name]
        entry = lst.pop(0)
        if entry in self.marks[name]:
            self.marks[name].discard(entry)
            return None
        task_id = entry.partition("#")[0]
        rec = self.recs[task_id]  # an entry that is not marked is its task's, always
        assert rec.state == want and (rec.entry or task_id) == entry, (name, entry, rec)
        rec.entry = None
        return task_id

    def live(self, name: str) -> list[str]:
        """The ids waiting in a list, in order (its entries less the leftovers)."""
        lst = self.overflow if name == "overflow" else self.ready[name]
        return [e.partition("#")[0] for e in lst if e not in self.marks[name]]

    def _end_run(self, rec: Rec) -> bool:
        """A run ended: nothing of it stays. Returns whether a rerun was asked for meanwhile."""
        rerun, rec.rerun = rec.rerun, False
        rec.worker = rec.thread = rec.progress = None
        rec.deadline = None
        return rerun

    def _new_series(self, rec: Rec) -> None:
        rec.attempts = rec.failures = rec.lost = 0
        rec.exp = None

    def _to_ready(self, task_id: str, rec: Rec, head: bool) -> None:
        rec.state, rec.due, rec.rerun = "queued", None, False
        self._push(rec.prio, task_id, rec, head)

    def pending(self) -> int:
        return sum(len(self.live(level)) for level in LEVELS)

    def full(self, stale: Rec | None = None) -> bool:
        """A new task for now finds no room (with a buffer that holds tasks, none either:
        they enter first). ``stale``: a waiting copy of it about to leave, not counted."""
        if self.max_pending is None:
            return False
        in_ready = 1 if stale is not None and stale.state == "queued" else 0
        buffered = len(self.live("overflow")) - (stale is not None and stale.state == "overflow")
        return self.pending() - in_ready >= self.max_pending or (
            self.when_full == "buffer" and buffered > 0
        )

    def room_made(self, most: int = 1000) -> int:
        """Buffered tasks enter the ready lists (at the tail) while there is room."""
        free = most if self.max_pending is None else self.max_pending - self.pending()
        moved = 0
        while self.overflow and moved < min(free, most):
            task_id = self._pop("overflow", "overflow")
            if task_id is not None:
                self._to_ready(task_id, self.recs[task_id], head=False)
                moved += 1
        return moved

    def configure(self, **changes: object) -> int:
        for name, value in changes.items():
            setattr(self, name, value)
        return self.room_made()

    def delayed(self) -> list[str]:
        """Delayed ids in the order of the zset (due time, then id)."""
        items = [(r.due or 0, i) for i, r in self.recs.items() if r.state == "delayed"]
        return [i for _, i in sorted(items)]

    def in_state(self, state: str) -> set[str]:
        return {i for i, r in self.recs.items() if r.state == state}

    # -- moves ---------------------------------------------------------------------------------
    def enqueue_batch(
        self, entries: list[tuple[str, str, bool, bool, tuple[str, int] | None, bool]]
    ) -> list[str]:
        """One script call: buffered tasks first enter where there is room, then each task."""
        if self.max_pending is not None and self.when_full == "buffer" and self.overflow:
            self.room_made()
        return [self.enqueue(*e) for e in entries]

    def enqueue(
        self,
        task_id: str,
        prio: str,
        delay: bool,
        first: bool,
        cron: tuple[str, int] | None,
        expires: bool = False,
    ) -> str:
        if cron is not None:
            name, tick = cron
            if self.cron_last.get(name, -1) >= tick:
                return "skipped"
            self.cron_last[name] = tick
        rec = self.recs.get(task_id)
        waits = rec is not None and rec.state in ("queued", "delayed", "overflow")
        stale = waits and rec is not None and rec.exp == "passed"  # would never run: replaced
        if rec is not None and waits and not stale:
            if not first:
                return "exists"
            self._unready(task_id)
            rec.prio = prio
            self._to_ready(task_id, rec, head=True)
            return "moved"
        if rec is not None and rec.state == "running":
            rec.rerun = True
            return "rerun"
        limited = not delay and not first and self.full(rec if stale else None)
        if limited and self.when_full != "buffer":
            self.refused += 1
            return "full"  # nothing written: a finished record stays as it was
        if stale:
            self._unready(task_id)
            if rec is not None and rec.state == "queued" and self.when_full == "buffer":
                self.room_made()  # the room it leaves: buffered tasks first
        # a task with an expiry is never handed over (only a fetch checks the expiry)
        if not delay and not limited and not expires and self.can_hand_over():
            return self.hand_over(task_id, prio)
        # none, error or done: a fresh record (an enqueue of a finished task acts as a redo)
        rec = self.recs[task_id] = Rec("queued", prio=prio, exp="live" if expires else None)
        if delay:
            rec.state = "delayed"
            self.stamped.append(("delayed", task_id))
        elif limited:
            rec.state = "overflow"
            self._push("overflow", task_id, rec, head=False)
            self.overflowed += 1
            return "overflow"
        else:
            self._to_ready(task_id, rec, head=first)
        return "added"

    def can_hand_over(self) -> bool:
        """A new task for now goes straight to the waiting executor: only when nothing waits
        before it, the queue is not paused and its running limit has room."""
        return (
            self.waiter is not None
            and not self.hand
            and self.pending() == 0
            and not self.overflow
            and not self.paused
            and (self.max_running is None or len(self.in_state("running")) < self.max_running)
            and self.tokens() > 0
        )

    def tokens(self) -> int:
        """Starts the rate limit allows now (a large number without one)."""
        return 10**9 if self.rate_burst is None else max(0, self.rate_burst - self.debt)

    def set_rate(self, burst: int | None) -> None:
        """configure_queue(rate_limit="1/h burst B" or None): the registration is dropped,
        the tokens' state kept."""
        self.rate_burst, self.sleeper = burst, None

    def hand_over(self, task_id: str, prio: str) -> str:
        assert self.waiter is not None
        worker, thread = self.waiter
        self.waiter = None
        rec = self.recs[task_id] = Rec("running", prio=prio)
        self.counter += 1
        if self.rate_burst is not None:
            self.debt += 1  # the hand-over takes a token
        rec.fence, rec.worker, rec.thread, rec.attempts = self.counter, worker, thread, 1
        self.stamped.append(("running", task_id))
        self.hand.append((worker, thread, task_id, self.counter))
        return "added"

    def take_handed(self, worker: str, thread: str) -> tuple[str, int, int] | None:
        """The waiting executor takes what was handed to it (its blocked read, or a fetch)."""
        if self.hand and self.hand[0][:2] == (worker, thread):
            _, _, task_id, token = self.hand.pop(0)
            return task_id, token, self.recs[task_id].failures
        return None

    def fetch(
        self, worker: str, thread: str, limit: int, wait: bool = False
    ) -> tuple[list[tuple[str, int, int]], bool]:
        """A fetch: (leases, whether the caller is now the queue's waiter); ``throttle``
        says whether the rate limit held it back."""
        self.throttle = None
        if self.waiter == (worker, thread):
            self.waiter = None
        handed = self.take_handed(worker, thread)
        if handed is not None and self.recs[handed[0]].exp != "passed":
            return [handed], False
        if handed is not None:  # taken after its expiry: it ends there, the fetch goes on
            self.end_expired(handed[0])
        if self.paused:
            return [], False
        if self.max_running is not None:  # expired leases count until they are reaped
            free = self.max_running - len(self.in_state("running"))
            if free <= 0:
                return [], False
            limit = min(limit, free)
        if self.rate_burst is not None and limit > 0:
            if self.tokens() == 0 and self.pending() > 0:  # throttled: takes nothing
                if self.sleeper is not None and self.sleeper != (worker, thread):
                    self.throttle = "sleep"  # another executor waits for the token
                else:
                    self.sleeper, self.throttle = (worker, thread), "slot"
                return [], False
            limit = min(limit, self.tokens())
            if self.sleeper == (worker, thread):
                self.sleeper = None
        out: list[tuple[str, int, int]] = []
        for level in LEVELS:
            lst = self.ready[level]
            while lst and len(out) < limit:
                task_id = self._pop(level, "queued")
                if task_id is None:
                    continue
                rec = self.recs[task_id]
                if rec.exp == "passed":  # not leased: it ends as expired
                    self.end_expired(task_id)
                    continue
                self.counter += 1
                rec.state, rec.fence = "running", self.counter
                rec.worker, rec.thread = worker, thread
                rec.attempts += 1
                self.stamped.append(("running", task_id))
                out.append((task_id, self.counter, rec.failures))
        if self.rate_burst is not None:
            self.debt += len(out)
        self.room_made()  # the queue drained by len(out)
        if not out and wait and not self.hand and self.waiter is None:
            self.waiter = (worker, thread)
            return out, True
        return out, False

    def end_expired(self, task_id: str) -> None:
        """A task not started by its expiry: `expired`, kept like a done record (no result),
        one history entry, counted; a handed lease it never used is dropped; a batch member's
        end goes to the outbox, failed."""
        rec = self.recs[task_id]
        self._ended(task_id, "failed", rec.fence)  # a batch member: it ended, never to run
        if rec.state == "running":
            self._end_run(rec)
            rec.attempts = max(0, rec.attempts - 1)
        rec.state = "expired"
        self.expired_count += 1
        self.history += 1

    def lapse(self, task_id: str) -> bool:
        """The task's expiry passes (the test moves it into the past)."""
        rec = self.recs.get(task_id)
        if rec is None or rec.exp != "live":
            return False
        rec.exp = "passed"
        return True

    def settled_by(self, lease: Lease) -> str | None:
        """The outcome of the lease's run when it ended already (an ack or a failure sent
        again after its reply was lost is answered with it), else None."""
        rec = self.recs.get(lease.id)
        if rec is None or rec.settled is None or rec.settled[0] != lease.token:
            return None
        return rec.settled[1]

    def ack(self, lease: Lease, keep: bool, result: str) -> str:
        """'ok'; 'again' (this run was acked or failed already), 'gone' (no record): not
        refused either; or 'refused' (the run lost its lease)."""
        if not self.holds(lease):
            if lease.id not in self.recs:
                return "gone"
            return "again" if self.settled_by(lease) else "refused"
        rec = self.recs[lease.id]
        rec.settled = (lease.token, "done")
        rerun = self._end_run(rec)
        self.done_count += 1
        self.history += 1
        if not rerun:
            self._ended(lease.id, "done", lease.token)
        if rerun:
            self._new_series(rec)
            self._to_ready(lease.id, rec, head=False)
        elif keep:
            rec.state, rec.result = "done", result or None
        else:
            del self.recs[lease.id]
        return "ok"

    def fail(self, lease: Lease, retry: str) -> str:
        if not self.holds(lease):
            if lease.id not in self.recs:
                return "gone"
            return self.settled_by(lease) or "refused"
        rec = self.recs[lease.id]
        rerun = self._end_run(rec)
        self.failed_count += 1
        self.history += 1
        if rerun:
            self._new_series(rec)
            self._to_ready(lease.id, rec, head=False)
            outcome = "rerun"
        else:
            rec.failures += 1
            rec.state, outcome = ("delayed", "retry") if retry != "none" else ("error", "error")
            if outcome == "error":
                self._ended(lease.id, "failed", lease.token)
            self.stamped.append(("delayed" if retry != "none" else "errors", lease.id))
        rec.settled = (lease.token, outcome)
        return outcome

    def release(self, leases: list[Lease]) -> int:
        """Given-back tasks go to the head of their ready lists in the order given (a lease
        given twice counts once, where it was given last)."""
        last = {lease: i for i, lease in enumerate(leases)}
        held = [lease for lease in sorted(last, key=last.__getitem__) if self.holds(lease)]
        for lease in reversed(held):
            rec = self.recs[lease.id]
            self._end_run(rec)
            self._to_ready(lease.id, rec, head=True)
        return len(held)

    def renew(self, leases: list[Lease]) -> list[str]:
        lost = []
        for lease in leases:
            if self.holds(lease):
                self.stamped.append(("running", lease.id))
            elif not self.settled_by(lease):  # a run that ended is not lost
                lost.append(lease.id)
        return lost

    def progress(self, lease: Lease, value: str) -> bool:
        if not self.holds(lease):
            return False
        self.recs[lease.id].progress = value
        return True

    def reap(self, now: int, max_lost: int) -> list[tuple[str, str, str]]:
        expired = sorted(
            (r.deadline, i)
            for i, r in self.recs.items()
            if r.state == "running" and r.deadline is not None and r.deadline <= now
        )
        lost = {i for _, i in expired}  # handed to an executor that never took it: dropped
        self.hand = [h for h in self.hand if h[2] not in lost]
        out = []
        for _, task_id in expired:
            rec = self.recs[task_id]
            worker = rec.worker or ""
            rec.lost += 1
            self._end_run(rec)
            if rec.lost >= max_lost:
                rec.state = "error"
                self._ended(task_id, "failed", rec.fence)
                self.stamped.append(("errors", task_id))
                out.append((task_id, worker, "error"))
            else:
                self._to_ready(task_id, rec, head=True)
                out.append((task_id, worker, "ready"))
        return out

    def next_deadline(self) -> int | None:
        deadlines = [r.deadline for r in self.recs.values() if r.state == "running"]
        return min((d for d in deadlines if d is not None), default=None)

    def promote(self, now: int) -> int:
        moved = 0
        for task_id in self.delayed():
            rec = self.recs[task_id]
            if rec.due is not None and rec.due <= now:
                self._to_ready(task_id, rec, head=False)
                moved += 1
        return moved

    def next_due(self) -> int | None:
        return min(
            (r.due for r in self.recs.values() if r.state == "delayed" and r.due), default=None
        )

    def requeue(self, want: str, ids: list[str]) -> int:
        moved = 0
        for task_id in ids:
            rec = self.recs.get(task_id)
            if rec is None or rec.state != want:
                continue
            if want == "error":
                self._new_series(rec)
                rec.failed_at = None
                rec.exp = None  # a redo runs whatever its expiry
            self._to_ready(task_id, rec, head=False)
            moved += 1
        return moved

    def errors_oldest(self, n: int) -> list[str]:
        items = sorted((r.failed_at or 0, i) for i, r in self.recs.items() if r.state == "error")
        return [i for _, i in items[:n]]

    def to_trash(self, batch: str, ids: list[str]) -> tuple[int, int, int]:
        """The console's delete of errors (trash.lua): each record in error leaves, kept
        in the batch's trash as it was. Returns (deleted, ids given, kept)."""
        kept = self.trash.setdefault(batch, {})
        deleted = 0
        for task_id in ids:
            rec = self.recs.get(task_id)
            if rec is None or rec.state != "error":
                continue
            kept[task_id] = self.recs.pop(task_id)
            deleted += 1
        return deleted, len(ids), deleted

    def restore(self, batch: str, ids: list[str]) -> tuple[int, int]:
        """Trashed errors back as they were (restore.lua); one whose id has a record again
        stays in the trash. Returns (restored, skipped)."""
        kept = self.trash.get(batch, {})
        restored = skipped = 0
        for task_id in ids:
            if task_id not in kept:
                continue
            if task_id in self.recs:
                skipped += 1
                continue
            self.recs[task_id] = kept.pop(task_id)
            restored += 1
        return restored, skipped

    def remove(self, ids: list[str], cancel: bool = False) -> tuple[int, int]:
        deleted = unready = 0
        for task_id in ids:
            rec = self.recs.get(task_id)
            if rec is None or rec.state == "running":
                continue
            if cancel and rec.state not in ("queued", "delayed", "overflow"):
                continue
            unready += rec.state == "queued"
            self._unready(task_id)
            if rec.state != "done":
                self._ended(task_id, "failed", rec.fence)
            del self.recs[task_id]
            deleted += 1
        if unready:
            self.room_made()
        return deleted, len(ids)

    def purge(self, what: str, limit: int) -> tuple[int, int]:
        unready = popped = 0
        if what == "ready":  # the ready lists, then the buffer: up to `limit` tasks, each
            taken: list[str] = []  # once; the leftovers met on the way dropped, not counted
            for name in LISTS:
                lst = self.overflow if name == "overflow" else self.ready[name]
                while lst and len(taken) < limit:
                    task_id = self._pop(name, "overflow" if name == "overflow" else "queued")
                    if task_id is not None:
                        taken.append(task_id)
                        unready += name != "overflow"
            popped = len(taken)
        elif what == "delayed":
            taken = self.delayed()[:limit]
            popped = len(taken)
        else:
            taken = self.errors_oldest(limit)
            popped = len(taken)
        for task_id in taken:
            self._ended(task_id, "failed", self.recs[task_id].fence)
            del self.recs[task_id]
        if unready:
            self.room_made()
        return len(taken), popped
