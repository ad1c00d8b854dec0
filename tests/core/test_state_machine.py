"""Model-based test of the storage layer: Hypothesis drives the real Lua scripts on a real
redis-server (and on the local Cluster) side by side with ``tests/core/model.py``.

Simulated workers and threads keep every lease they were ever given, so acks, failures,
renewals, progress reports and releases are also sent with stale tokens. After every step
the whole stored state of the queue is read back and checked against the invariants of
docs/design.md:

1. each task id is in exactly one place (a ready list once, delayed, running, errors, done),
   and that place agrees with the state in its record; no list or set holds an id without
   a record;
2. the ready lists equal the model's, in order (FIFO within a level, priorities apart),
   entry for entry: the entries a delete or a move left behind (leftovers, not taken out:
   O(1)) are where the model says, each marked once and counted per list; an id pushed
   where its leftover waits has an entry of its own (``<id>#<n>``), so the live entries,
   the ones a fetch takes, keep the model's exact order;
3. delayed / running / errors / done hold exactly the model's ids, with the model's due
   times;
4. no two live leases: of all leases ever handed out for an id, at most one passes the
   ownership check, and a running task has exactly one;
5. a fencing token is never handed out twice: every lease takes the queue counter's next
   value, larger than every token before it;
6. each record's state, priority, counters (attempts, failures, lost), rerun flag, live
   token, holder, progress and result equal the model's;
7. what the console shows (``monitor.queue_stats``, ``monitor.pending_page``, the history
   stream and the per-minute counters) equals the model's counts;
8. a queue's running limit (``max_running``) holds: a fetch takes no more than the limit
   leaves free (leases count until acked, failed, released or reaped), as the model says;
9. a queue's pending limit (``max_pending``) holds: a new task for now never makes the ready
   lists longer than the limit (it is refused, or goes to the overflow buffer), and a task
   waits in the buffer only while the queue is full: buffered tasks enter, oldest first, as
   soon as a fetch, a delete or a raised limit makes room. Refused and buffered enqueues are
   counted;
10. a new task for now that finds the queue empty while an executor waits for it (a fetch
   that took nothing registered it) is leased straight to that executor and put on the
   queue's hand list: at most one such entry, always a live lease of the executor it names,
   never while another executor is registered; the reaper drops it with the lease;
11. a fetch, ack, failure or renewal whose reply was lost, sent again as it was, gets what
   the first send did and moves nothing twice: the same leases (``attempts`` counted once),
   no refusal of a run that ended, the same failure outcome (``settled`` on the record);
   so does a producer's enqueue (its request id), sent again after any moves in between;
12. expiry (``expires=``): a task whose expiry passed (the *lapse* move) is never leased: a
   fetch that pops it, or takes it handed too late, ends it as ``expired`` (kept in the
   done set, one history entry, counted) and goes on; an enqueue of an expired id runs
   afresh, a redo clears the expiry.
13. batches (docs/batches.md): some ids are members of one of two batches; every end of a
   member (ack, failure into the errors, reap to a poison pill, delete or purge of one not
   done) is in the queue's outbox in order, as the model lists it; the relay (a rule, with
   replays of entries applied before) gives each batch the model's counters and members'
   last ends by fence (failed, then done after a redo), and pushes each batch's
   ``on_complete`` and ``on_success`` exactly once, when the model says.
14. a queue's rate limit (``1/h burst B``, set, changed and lifted by the operator move)
   holds on Redis's clock: a fetch or a hand-over takes no more tokens than there are (the
   stored ``tat`` is the model's count of starts, in hours ahead of Redis's ``TIME``), a
   fetch with tasks ready and no token takes nothing and registers one executor for the
   next token (the others are told to sleep), and a change of the rate drops it.

``ZTQ_MODEL_EXAMPLES`` scales the number of runs (CI uses the default);
``ZTQ_MODEL_SHRINK=0`` reports the first failing run unshrunk (quick when checking that a
deliberately broken script is caught).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import ztq.core as ztq
from tests.core.batch_model import BatchModel
from tests.core.model import LEVELS, LISTS, Lease, Model
from ztq.core.engine.storage import EnqueueEntry, Finished, Storage
from ztq.core.monitor import queues as monitor
from ztq.core.monitor.groups import group_key, kind_key

Q = "mq"
IDS = ("t0", "t1", "t2", "t3", "t4")
# two batches (docs/batches.md): their members are always enqueued as members
BATCHES = {"ma": ("t0",), "mb": ("t1", "t2")}
BATCH_OF = {i: b for b, ids in BATCHES.items() for i in ids}
# failures of three groups, two of one kind (two lines raise it), one that died (no traceback)
FAILURES = (
    ("E: x", 'Traceback:\n  File "/a/m.py", line 1, in t\nE: x'),
    ("E: x", 'Traceback:\n  File "/a/m.py", line 2, in t\nE: x'),
    ("WorkerLost: gone", ""),
)
THREADS = (("w1", "A"), ("w1", "B"), ("w2", "A"))  # two threads share a worker id
HOUR = 3_600_000
HOUR_MS = HOUR  # the period of the rate limits the runs set ("1/h burst B")
EXAMPLES = int(os.environ.get("ZTQ_MODEL_EXAMPLES", "150"))
STEPS = 40
# 150 examples of 40 steps take 1-2 minutes on a quiet 2-core machine and several under the
# parallel suite's load: a pytest-timeout mid-run shows up as Hypothesis's FlakyStrategyDefinition
pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]  # model-based: minutes per backend
STATS: dict[str, int] = {}  # steps and examples run, per backend (printed by the test)


def payload(task_id: str) -> str:
    return json.dumps({"task": "model.t", "args": [task_id]})


class QueueMachine(RuleBasedStateMachine):
    storage: Storage
    flush: Callable[[], None]
    backend: str

    def __init__(self) -> None:
        super().__init__()
        self.flush()
        self.model = Model(members=frozenset(BATCH_OF))
        self.batches = {b: BatchModel(ids) for b, ids in BATCHES.items()}
        self.relayed: list[str] = []  # outbox entries the relay applied (to replay)
        # callbacks pushed to the global outbox, per batch and kind
        self.fired = {(b, k): 0 for b in BATCHES for k in ("complete", "success")}
        self.leases: dict[tuple[str, str], list[Lease]] = {t: [] for t in THREADS}
        # enqueue calls applied whose reply was lost, to send again: (op, first answer)
        self.unanswered: list[tuple[Any, list[str]]] = []
        STATS[f"{self.backend}:examples"] = STATS.get(f"{self.backend}:examples", 0) + 1

    # -- plumbing ------------------------------------------------------------------------------
    def _key(self, zset: str) -> str:
        k = self.storage.keys
        return {"delayed": k.delayed, "running": k.running, "errors": k.errors}[zset](Q)

    def read_stamps(self) -> None:
        """Read back the times the last step set (due, lease deadline, failed at)."""
        kept = {"delayed": "delayed", "running": "running", "errors": "error"}
        stamped = [  # a later move of the same step (a batch) may have moved it on already
            (zset, i) for zset, i in self.model.stamped if self.model.state(i) == kept[zset]
        ]
        self.model.stamped = []
        if not stamped:
            return
        pipe = self.storage.client.pipeline(transaction=False)
        for zset, task_id in stamped:
            pipe.zscore(self._key(zset), task_id)
        soon = 0
        for (zset, task_id), score in zip(stamped, pipe.execute(), strict=True):
            assert score is not None, f"{task_id} is not in {zset} after the step"
            rec = self.model.recs[task_id]
            if zset == "delayed":
                rec.due = int(score)
            elif zset == "running":
                rec.deadline = int(score)
            else:
                rec.failed_at = int(score)
            if zset != "errors" and score < HOUR // 2 + time.time() * 1000:
                soon = max(soon, int(score))
        # A 1 ms delay or a 0 ms lease falls due within a millisecond or two: wait until it
        # surely has (the scripts' clock is this machine's), so that every later move sees
        # it due whatever the timing of this run. Otherwise what the model holds, and so
        # what Hypothesis draws next, would change from one replay to the next.
        while soon and time.time() * 1000 < soon + 2:
            time.sleep(0.0005)

    def step(self, *outcomes: object) -> None:
        """After a move: count it (and what came of it), read back the times it set."""
        for key in ("steps", *(str(o) for o in outcomes)):
            STATS[f"{self.backend}:{key}"] = STATS.get(f"{self.backend}:{key}", 0) + 1
        self.read_stamps()

    def pick_thread(self, data: st.DataObject) -> tuple[str, str]:
        """A thread that was given leases; one that holds a live lease 3 times in 4."""
        given = [t for t in THREADS if self.leases[t]]
        live = [t for t in given if any(self.model.holds(lease) for lease in self.leases[t])]
        pool = live if live and data.draw(st.integers(0, 3), label="live thread") else given
        return data.draw(st.sampled_from(pool), label="thread")

    def pick_leases(self, data: st.DataObject, thread: tuple[str, str], most: int) -> list[Lease]:
        """Leases this thread was given: mostly live ones (4 in 5), sometimes stale ones."""
        mine = self.leases[thread]
        live = [lease for lease in mine if self.model.holds(lease)]
        pool = live if live and data.draw(st.integers(0, 4), label="live") else mine
        n = data.draw(st.integers(1, most), label="n")
        return [data.draw(st.sampled_from(pool), label="lease") for _ in range(n)]

    def has_leases(self) -> bool:
        return any(self.leases.values())

    def has_live_lease(self) -> bool:
        return any(self.model.holds(lease) for ls in self.leases.values() for lease in ls)

    # -- rules ---------------------------------------------------------------------------------
    enqueue_entries = st.lists(
        st.tuples(
            st.sampled_from(IDS),
            st.sampled_from(LEVELS),
            st.sampled_from(["now", "now", "soon", "later"]),
            st.sampled_from([False, False, True]),  # first
            st.one_of(
                st.none(), st.none(), st.tuples(st.sampled_from(["c1", "c2"]), st.integers(0, 4))
            ),
            st.sampled_from([False, False, True]),  # expires (in 2 hours; see lapse)
        ),
        min_size=1,
        max_size=3,
    )

    @initialize(
        entries=enqueue_entries,
        limit=st.sampled_from([None, None, 1, 2]),
        pending=st.sampled_from([None, None, 1, 1, 2, 3]),
        when_full=st.sampled_from(["buffer", "raise", "buffer", "block"]),
        rate=st.sampled_from([None, None, None, 1, 2]),
    )
    def start(
        self,
        entries: list[tuple[Any, ...]],
        limit: int | None,
        pending: int | None,
        when_full: str,
        rate: int | None,
    ) -> None:
        """Half the runs start with a serial or two-at-once queue (``max_running``), 2 in 3
        with a pending limit (``max_pending``) that refuses or buffers, 2 in 5 with a rate
        limit (``1/h burst 1`` or ``2``: the tokens run out within the run)."""
        if rate is not None:
            self.model.set_rate(rate)
            self.storage.queues.configure(Q, rate_limit=f"1/h burst {rate}")
        if limit is not None:
            self.model.max_running = limit
            self.storage.queues.configure(Q, max_running=limit)
        if pending is not None:
            self.model.configure(max_pending=pending, when_full=when_full)
            self.storage.queues.configure(Q, max_pending=pending, when_full=when_full)
        for b, ids in BATCHES.items():
            create = self.storage.batches.batch_create_op(b, [f"{Q}:{i}" for i in ids],
                                                          on_complete=True, on_success=True,
                                                          ttl_ms=HOUR)  # fmt: skip
            assert self.storage.call(*create) == ["created", len(ids)]
        self.enqueue(entries)

    @staticmethod
    def entries_of(entries: list[tuple[Any, ...]]) -> tuple[list[EnqueueEntry], list[Any]]:
        """The drawn tasks as the client sends them, and as the model takes them."""
        batch, moves = [], []
        for task_id, prio, delay, first, cron, *more in entries:
            expires = bool(more and more[0])
            delay_ms = {"now": 0, "soon": 1, "later": HOUR}[delay]
            moves.append((task_id, prio, delay_ms > 0, first, cron, expires))
            name, tick = cron or ("", 0)
            member = BATCH_OF.get(task_id, "")
            batch.append(EnqueueEntry(task_id, payload(task_id), prio, delay_ms, first, name, tick,
                                      2 * HOUR if expires else 0, member))  # fmt: skip
        return batch, moves

    @rule(entries=enqueue_entries)
    def enqueue(self, entries: list[tuple[Any, ...]]) -> None:
        """One script call for a batch, as a transaction sends it."""
        batch, moves = self.entries_of(entries)
        # every other batch goes as concurrent delay() calls send it when they are coalesced
        # (core/client/coalesce.py): one script call per task, in one round trip
        self.coalesced = coalesced = len(batch) > 1 and not getattr(self, "coalesced", True)
        if coalesced:
            outcomes = [o for move in moves for o in self.model.enqueue_batch([move])]
        else:
            outcomes = self.model.enqueue_batch(moves)
        expected = [
            x for (task_id, *_), o in zip(moves, outcomes, strict=True) for x in (task_id, o)
        ]
        if coalesced:
            replies = self.storage.execute_each(
                [self.storage.tasks.enqueue_op(Q, [e]) for e in batch]
            )
            reply = [x for one in replies for x in one]
        else:
            [reply] = self.storage.execute([self.storage.tasks.enqueue_op(Q, batch)])
        assert reply == expected
        self.step(*(f"enqueue:{o}" for o in expected[1::2]))

    @rule(entries=enqueue_entries)
    def enqueue_reply_lost(self, entries: list[tuple[Any, ...]]) -> None:
        """A producer's enqueue (one task, or a transaction's or a batch's tasks) that Redis
        applied while its reply was lost: the client holds the call, with its request id, to
        send it again (:meth:`enqueue_resent`) after any moves of the tasks in between."""
        batch, moves = self.entries_of(entries)
        outcomes = self.model.enqueue_batch(moves)
        expected = [x for (task_id, *_), o in zip(moves, outcomes, strict=True)
                    for x in (task_id, o)]  # fmt: skip
        op = self.storage.tasks.enqueue_op(Q, batch)
        assert self.storage.call(*op) == expected
        # a call all of whose tasks met a full queue wrote nothing and keeps no answer: the
        # client sends it again as a new try (the enqueue move covers that)
        if any(o != "full" for o in outcomes):
            self.unanswered.append((op, expected))
        self.step(*(f"enqueue-reply-lost:{o}" for o in outcomes))

    @precondition(lambda self: self.unanswered)
    @rule(data=st.data())
    def enqueue_resent(self, data: st.DataObject) -> None:
        """The call of :meth:`enqueue_reply_lost` sent again as it was (redis-py's retry):
        it gets the first answer and moves nothing, whatever happened to its tasks since
        (handed over, fetched, run, failed, redone, deleted); the model does not move."""
        n = data.draw(st.integers(0, len(self.unanswered) - 1), label="call")
        op, expected = self.unanswered.pop(n)
        assert self.storage.call(*op) == expected
        self.step("enqueue-resent")

    @rule(
        thread=st.sampled_from(THREADS),
        expiring=st.booleans(),
        task_id=st.sampled_from(IDS),
        prio=st.sampled_from(LEVELS),
        meanwhile=st.sampled_from(["", "", "run-now", "pause", "limit"]),
        expires=st.booleans(),
    )
    def idle_then_enqueue(
        self,
        thread: tuple[str, str],
        expiring: bool,
        task_id: str,
        prio: str,
        meanwhile: str,
        expires: bool = False,
    ) -> None:
        """An idle executor (its fetch found nothing: it registers), then a producer: the
        task is handed to it if nothing stands in the way (an expiring lease: it dies with
        the task in its hand list, for the reaper). ``meanwhile`` something stands in the
        way: a task ready before it (run now), a paused queue, a running limit reached."""
        if meanwhile == "limit":  # another thread takes what is ready: leases run, none wait
            self.fetch(next(t for t in THREADS if t != thread), 3, expiring=False)
        self.fetch(thread, 1, expiring, wait=True)
        st_, model = self.storage, self.model
        if meanwhile == "run-now" and model.in_state("delayed"):
            ids = sorted(model.in_state("delayed"))[:1]
            assert st_.tasks.requeue(Q, "delayed", ids) == model.requeue("delayed", ids)
        elif meanwhile == "pause":
            model.paused = True
            st_.queues.pause(Q)
        elif meanwhile == "limit" and model.in_state("running"):  # reached: no room
            model.max_running = len(model.in_state("running"))
            st_.queues.configure(Q, max_running=model.max_running)
        else:
            meanwhile = "" if meanwhile == "limit" else meanwhile
        waiting = "waiting" if model.waiter == thread else "busy"
        self.step(f"idle-then-enqueue:{meanwhile or 'nothing'}:{waiting}")
        self.enqueue([(task_id, prio, "now", False, None, expires)])

    def has_expiring(self) -> bool:
        return any(r.exp == "live" for r in self.model.recs.values())

    @precondition(has_expiring)
    @rule(data=st.data(), then_fetch=st.booleans())
    def lapse(self, data: st.DataObject, then_fetch: bool) -> None:
        """A task's expiry passes: its stored `exp` is moved into the past (Redis's clock
        decides nothing here, the model does); a waiting one is picked first, and a fetch
        follows (half the time for the others)."""
        live = sorted(i for i, r in self.model.recs.items() if r.exp == "live")
        waiting = [i for i in live if self.model.state(i) == "queued"]
        task_id = data.draw(st.sampled_from(waiting or live), label="lapsed")
        assert self.model.lapse(task_id)
        key = self.storage.keys.tasks(Q)
        meta_text, _, body = str(self.storage.client.hget(key, task_id)).partition("\n")
        meta = json.loads(meta_text)
        meta["exp"] = 1
        self.storage.client.hset(key, task_id, json.dumps(meta) + "\n" + body)
        self.step(f"lapse:{self.model.state(task_id)}")
        if then_fetch or waiting:
            self.fetch(data.draw(st.sampled_from(THREADS), label="fetcher"), 3, expiring=False)

    def has_handed(self) -> bool:
        return bool(self.model.hand)

    @precondition(has_handed)
    @rule()
    def take_handed(self) -> None:
        """The waiting executor's blocked read returns the task an enqueue handed it."""
        worker, name, task_id, _ = self.model.hand[0]
        expected = self.model.take_handed(worker, name)
        got = self.storage.waits.wait_handed(Q, worker, name, 1.0)
        assert not isinstance(got, bool) and got is not None
        assert (got.id, got.token, got.failures) == expected
        assert got.payload == payload(task_id)
        self.leases[(worker, name)].append(Lease(worker, name, got.id, got.token))
        self.step("take-handed")

    @rule(ids=st.lists(st.sampled_from(IDS), min_size=2, max_size=5, unique=True))
    def burst(self, ids: list[str]) -> None:
        """A producer under load: new tasks for now, more than a bounded queue holds."""
        self.enqueue([(i, "normal", "now", False, None) for i in ids])

    @rule(
        thread=st.sampled_from(THREADS),
        limit=st.integers(1, 3),
        expiring=st.booleans(),
        wait=st.booleans(),
    )
    def fetch(
        self, thread: tuple[str, str], limit: int, expiring: bool, wait: bool = False
    ) -> None:
        """A fetch; with ``wait`` the caller becomes the queue's waiter when it takes nothing."""
        worker, name = thread
        before = self.model.counter
        buffered = len(self.model.overflow)
        handed = bool(self.model.hand) and self.model.hand[0][:2] == thread
        ended = self.model.expired_count
        expected, registered = self.model.fetch(worker, name, limit, wait)
        st_ = self.storage
        op = st_.leases.fetch_op(
            Q, worker, name, 0 if expiring else HOUR, limit, HOUR if wait else 0
        )
        reply = st_.call(*op)
        if self.model.expired_count > ended:
            self.step("fetch:ended-expired" + (":handed" if handed else ""))
        got = st_.leases.parse_fetch(Q, reply)
        assert st_.leases.fetch_registered(reply) == registered
        throttled = st_.leases.fetch_throttled(reply)
        if self.model.throttle is None:
            assert throttled is None
        else:  # the one registered executor is told when the next token comes (~ hours)
            assert throttled == math.inf if self.model.throttle == "sleep" else throttled > 60
            self.step(f"fetch:throttled:{self.model.throttle}")
        if buffered > len(self.model.overflow):
            self.step("fetch:fed-from-buffer")
        if registered or handed:
            self.step("fetch:registered" if registered else "fetch:took-handed")
            before = min([before, *(g.token - 1 for g in got)])  # leased before this fetch
        assert [(g.id, g.token, g.failures) for g in got] == expected
        for g in got:
            assert g.token > before  # larger than every token the queue handed out before
            assert g.payload == payload(g.id)
            self.leases[thread].append(Lease(worker, name, g.id, g.token))
        self.step(f"fetch:{len(got)}")

    @rule(
        thread=st.sampled_from(THREADS),
        limit=st.integers(1, 3),
        ends=st.lists(
            st.sampled_from(
                ["ack"] * 4 + ["ack-drop", "fail", "retry-soon", "retry-later", "release", "crash"]
            ),
            min_size=3,
            max_size=3,
        ),
    )
    def worker_cycle(self, thread: tuple[str, str], limit: int, ends: list[str]) -> None:
        """What a worker does with a batch: fetch, then end each run one way or another
        ("crash": its lease is left to run out, for the reaper)."""
        self.fetch(thread, limit, expiring=True)
        model, st_ = self.model, self.storage
        live = [lease for lease in self.leases[thread] if model.holds(lease)]
        acks: dict[bool, list[Lease]] = {True: [], False: []}
        for lease, end in zip(live, ends, strict=False):
            if end in ("ack", "ack-drop"):
                acks[end == "ack"].append(lease)  # sent together, as the executor does
            elif end == "release":
                got = st_.leases.release(Q, lease.worker, [(lease.id, lease.token)])
                assert got == model.release([lease])
            elif end != "crash":
                retry = {"fail": "none", "retry-soon": "soon", "retry-later": "later"}[end]
                delay = {"none": -1, "soon": 0, "later": HOUR}[retry]
                expected = model.fail(lease, retry)
                got = st_.leases.fail(Q, lease.worker, lease.id, lease.token, "model.t", "E: x",
                                      "tb", retry_delay_ms=delay)  # fmt: skip
                assert got == expected
                end = f"{end}:{expected}"
            self.step(f"cycle:{end}")
        for keep, leases in acks.items():
            if leases:
                assert all(model.ack(lease, keep, '"ok"') == "ok" for lease in leases)
                items = [Finished(lease.id, lease.token, "model.t", '"ok"') for lease in leases]
                assert st_.leases.ack(Q, thread[0], items, result_ttl_ms=HOUR if keep else 0) == []
                self.step(f"cycle:ack-batch-of-{len(items)}")

    @precondition(has_leases)
    @rule(keep=st.booleans(), data=st.data())
    def ack(self, keep: bool, data: st.DataObject) -> None:
        thread = self.pick_thread(data)
        leases = self.pick_leases(data, thread, 2)
        result = data.draw(st.sampled_from(["", '"ok"', "[1,2]"]), label="result")
        outcomes = [self.model.ack(lease, keep, result) for lease in leases]
        refused = [lease.id for lease, o in zip(leases, outcomes, strict=True) if o == "refused"]
        items = [Finished(lease.id, lease.token, "model.t", result) for lease in leases]
        got = self.storage.leases.ack(Q, thread[0], items, result_ttl_ms=HOUR if keep else 0)
        assert got == refused
        self.step(*(f"ack:{o}" for o in outcomes))

    @precondition(has_leases)
    @rule(
        retry=st.sampled_from(["none", "soon", "later"]),
        failure=st.sampled_from(FAILURES),
        data=st.data(),
    )
    def fail(self, retry: str, failure: tuple[str, str], data: st.DataObject) -> None:
        [lease] = self.pick_leases(data, self.pick_thread(data), 1)
        expected = self.model.fail(lease, retry)
        delay = {"none": -1, "soon": 0, "later": HOUR}[retry]
        got = self.storage.leases.fail(
            Q, lease.worker, lease.id, lease.token, "model.t", *failure, retry_delay_ms=delay
        )
        assert got == expected
        self.step(f"fail:{got}")

    @precondition(has_leases)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        thread = self.pick_thread(data)
        leases = self.pick_leases(data, thread, 3)
        expected = self.model.release(leases)
        got = self.storage.leases.release(
            Q, thread[0], [(lease.id, lease.token) for lease in leases]
        )
        assert got == expected
        self.step(f"release:{got}")

    @precondition(has_leases)
    @rule(expiring=st.booleans(), data=st.data())
    def renew(self, expiring: bool, data: st.DataObject) -> None:
        thread = self.pick_thread(data)
        leases = self.pick_leases(data, thread, 3)
        expected = self.model.renew(leases)
        pairs = [(lease.id, lease.token) for lease in leases]
        assert self.storage.leases.renew(Q, thread[0], 0 if expiring else HOUR, pairs) == expected
        self.step(f"renew:lost={len(expected)}/{len(pairs)}")

    @precondition(has_leases)
    @rule(n=st.integers(0, 99), data=st.data())
    def progress(self, n: int, data: st.DataObject) -> None:
        [lease] = self.pick_leases(data, self.pick_thread(data), 1)
        value = json.dumps({"pct": n})
        expected = self.model.progress(lease, value)
        got = self.storage.leases.set_run_info(
            Q, lease.id, lease.token, lease.worker, "progress", value
        )
        assert got == expected
        self.step(f"progress:{got}")

    @rule(move=st.sampled_from(["fetch", "fetch", "ack", "fail", "renew"]), data=st.data())
    def reply_lost(self, move: str, data: st.DataObject) -> None:
        """A call whose reply was lost (a timeout, a reset connection, while Redis applied
        it) is sent again as it was, by the client's retry or the worker's next round trip:
        both sends get what the first one did, and the model moves once. A fetch gets the
        same leases (attempts counted once; not left to idle until the lease runs out); an
        ack or a failure of a run that went through is not refused; a renewal that crossed
        the run's ack does not report the lease lost."""
        st_, model = self.storage, self.model
        if move != "fetch" and not self.has_leases():
            move = "fetch"
        if move == "fetch":
            thread = data.draw(st.sampled_from(THREADS), label="thread")
            limit = data.draw(st.integers(1, 3), label="limit")
            lease_ms = data.draw(st.sampled_from([0, HOUR]), label="lease")
            handed = bool(model.hand) and model.hand[0][:2] == thread
            expected, _ = model.fetch(thread[0], thread[1], limit)
            op = st_.leases.fetch_op(Q, thread[0], thread[1], lease_ms, limit)
            first = st_.call(*op)  # applied, its reply lost: not read
            again = st_.call(*op)
            got = st_.leases.parse_fetch(Q, again)
            assert [(g.id, g.token, g.failures) for g in got] == expected
            sent = [str(x) for g in got for x in (g.id, g.token, g.failures, g.payload)]
            # what the first send would have said (but the ms left until an expiry: later now)
            leased = [] if st_.leases.fetch_throttled(first) is not None else first[2:]
            first_sent = [str(x) for n, x in enumerate(leased) if n % 5 != 4]
            assert first_sent == sent
            assert [int(x) < 0 for x in first[6::5]] == [g.expires_at is None for g in got]
            # held back by the rate limit: both sends are, alike (nothing was taken)
            assert (st_.leases.fetch_throttled(first) is None) == (model.throttle is None)
            assert (st_.leases.fetch_throttled(again) is None) == (model.throttle is None)
            for g in got:
                self.leases[thread].append(Lease(thread[0], thread[1], g.id, g.token))
            self.step(f"reply-lost:fetch:{'handed' if handed else len(got)}")
            return
        thread = self.pick_thread(data)
        if move == "ack":
            leases = self.pick_leases(data, thread, 2)
            keep = data.draw(st.booleans(), label="keep")
            outcomes = [model.ack(lease, keep, '"ok"') for lease in leases]
            refused = [
                lease.id for lease, o in zip(leases, outcomes, strict=True) if o == "refused"
            ]
            items = [Finished(lease.id, lease.token, "model.t", '"ok"') for lease in leases]
            for _ in range(2):
                assert (
                    st_.leases.ack(Q, thread[0], items, result_ttl_ms=HOUR if keep else 0)
                    == refused
                )
            self.step(*(f"reply-lost:ack:{o}" for o in outcomes))
        elif move == "fail":
            [lease] = self.pick_leases(data, thread, 1)
            retry = data.draw(st.sampled_from(["none", "soon", "later"]), label="retry")
            expected = model.fail(lease, retry)
            delay = {"none": -1, "soon": 0, "later": HOUR}[retry]
            for _ in range(2):
                got = st_.leases.fail(Q, lease.worker, lease.id, lease.token, "model.t", "E: x",
                                      "tb", retry_delay_ms=delay)  # fmt: skip
                assert got == expected
            self.step(f"reply-lost:fail:{expected}")
        else:  # a renewal, its reply lost, sent again after the run's ack went through
            leases = self.pick_leases(data, thread, 2)
            expected = model.renew(leases)
            pairs = [(lease.id, lease.token) for lease in leases]
            assert st_.leases.renew(Q, thread[0], HOUR, pairs) == expected
            live = [lease for lease in leases if model.holds(lease)]
            if live and data.draw(st.booleans(), label="acked meanwhile"):
                assert model.ack(live[0], True, '"ok"') == "ok"
                done = Finished(live[0].id, live[0].token, "model.t", '"ok"')
                assert st_.leases.ack(Q, thread[0], [done], result_ttl_ms=HOUR) == []
                expected = model.renew(leases)
            assert st_.leases.renew(Q, thread[0], HOUR, pairs) == expected
            self.step(f"reply-lost:renew:lost={len(expected)}/{len(pairs)}")

    @precondition(has_live_lease)
    @rule(move=st.sampled_from(["ack", "fail", "renew", "release", "progress"]), data=st.data())
    def intruder(self, move: str, data: st.DataObject) -> None:
        """A live lease's token presented by another worker: refused, nothing changes."""
        live = [lease for ls in self.leases.values() for lease in ls if self.model.holds(lease)]
        lease = data.draw(st.sampled_from(live), label="lease")
        other = "w2" if lease.worker == "w1" else "w1"
        st_ = self.storage
        if move == "ack":
            assert st_.leases.ack(Q, other, [Finished(lease.id, lease.token, "model.t")]) == [
                lease.id
            ]
        elif move == "fail":
            assert st_.leases.fail(Q, other, lease.id, lease.token, "model.t", "E", "") == "refused"
        elif move == "renew":
            assert st_.leases.renew(Q, other, HOUR, [(lease.id, lease.token)]) == [lease.id]
        elif move == "release":
            assert st_.leases.release(Q, other, [(lease.id, lease.token)]) == 0
        else:
            assert not st_.leases.set_run_info(Q, lease.id, lease.token, other, "progress", "{}")
        self.step(f"intruder:{move}")

    @rule(max_lost=st.integers(1, 3))
    def reap(self, max_lost: int) -> None:
        reaped = self.storage.leases.reap(Q, max_lost)
        assert reaped.items == self.model.reap(reaped.now, max_lost)
        self.step(*(f"reap:{outcome}" for _, _, outcome in reaped.items))
        assert reaped.next_deadline == self.model.next_deadline()

    @rule()
    def promote(self) -> None:
        promoted = self.storage.tasks.promote(Q)
        assert promoted.moved == self.model.promote(promoted.now)
        assert promoted.next_due == self.model.next_due()
        self.step(f"promote:{promoted.moved}")

    @rule(
        move=st.sampled_from(
            ["redo", "redo", "redo_oldest", "run_now", "delete", "cancel", "purge", "pause"]
            + ["redo_followed"]
            + ["resume"] * 3
            + ["limit", "unlimit", "bound", "bound", "unbound", "rate", "rate", "unrate"]
        ),
        n=st.integers(1, 3),
        what=st.sampled_from(["ready", "delayed", "errors"]),
        data=st.data(),
    )
    def operator(self, move: str, n: int, what: str, data: st.DataObject) -> None:
        """What the console and the CLI do: redo, run now, delete, purge, pause, resume, and
        set or lift the queue's running limit (``max_running``: ``n``); and what
        ``handle.cancel()`` does (delete only what has not run yet).

        The ids are mostly ones in the state the move acts on, sometimes any."""
        st_, model = self.storage, self.model
        wanted = {"redo": "error", "redo_followed": "error", "run_now": "delayed"}.get(move, "")
        pool = sorted(model.in_state(wanted)) if wanted else []
        if not pool or not data.draw(st.integers(0, 3), label="aimed"):
            pool = list(IDS)
        ids = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3), label="ids")
        if move == "redo":
            assert st_.tasks.requeue(Q, "error", ids) == (got := model.requeue("error", ids))
        elif move == "redo_oldest":
            got = model.requeue("error", model.errors_oldest(n))
            assert st_.tasks.requeue(Q, "error", oldest=n) == got
        elif move == "redo_followed":  # the console's redo, noted for its follow page
            got = model.requeue("error", ids)
            assert st_.errors.redo_errors(Q, "b1", ids) == got
        elif move == "run_now":
            assert st_.tasks.requeue(Q, "delayed", ids) == (got := model.requeue("delayed", ids))
        elif move in ("delete", "cancel"):
            got = model.remove(ids, cancel=move == "cancel")
            assert st_.tasks.remove(Q, ids, cancel=move == "cancel") == got
        elif move == "purge":
            got = model.purge(what, n)
            assert st_.tasks.remove(Q, purge=what, limit=n) == got
            move = f"purge:{what}"
        elif move in ("limit", "unlimit"):
            model.max_running = n if move == "limit" else None
            st_.queues.configure(Q, max_running=model.max_running)
            got = n if move == "limit" else 0
        elif move in ("rate", "unrate"):  # set, change or lift the rate limit
            burst = data.draw(st.integers(1, 3), label="burst") if move == "rate" else None
            model.set_rate(burst)
            st_.queues.configure(Q, rate_limit=None if burst is None else f"1/h burst {burst}")
            got = burst or 0
        elif move in ("bound", "unbound"):  # set, change or lift the pending limit
            when = data.draw(st.sampled_from(["buffer", "raise", "block"]), label="when_full")
            bound = {"max_pending": n if move == "bound" else None, "when_full": when}
            got = model.configure(**bound)
            assert st_.queues.configure(Q, **bound) == got  # type: ignore[arg-type]
            move = f"{move}:{when}"
        else:
            model.paused = move == "pause"
            (st_.queues.pause if model.paused else st_.queues.resume)(Q)
            got = 1
        self.step(f"{move}:{got[0] if isinstance(got, tuple) else got}")

    def has_errors(self) -> bool:
        return bool(self.model.in_state("error"))

    @precondition(has_errors)
    @rule(n=st.integers(0, 1), data=st.data())
    def console_delete(self, n: int, data: st.DataObject) -> None:
        """The console's delete of errors: into one of two trash batches (trash.lua)."""
        errors = sorted(self.model.in_state("error"))
        ids = data.draw(st.lists(st.sampled_from(errors + list(IDS[:1])), min_size=1, max_size=3))
        got = self.model.to_trash(f"b{n}", ids)
        assert self.storage.errors.trash_errors(Q, f"b{n}", ids) == got
        self.step(f"trash:{got[0]}")

    @precondition(has_errors)
    @rule(n=st.integers(1, 3))
    def purge_errors(self, n: int) -> None:
        """``ztq queue purge QUEUE errors``: the oldest errors deleted for good (remove.lua,
        which moves the error counters with them)."""
        got = self.model.purge("errors", n)
        assert self.storage.tasks.remove(Q, purge="errors", limit=n) == got
        self.step(f"purge:errors:{got[0]}")

    def has_trash(self) -> bool:
        return any(self.model.trash.values())

    @precondition(has_trash)
    @rule(data=st.data())
    def console_restore(self, data: st.DataObject) -> None:
        """Restore from the trash (restore.lua): back as it was, unless the id has a record
        again (then it stays in the trash)."""
        batches = sorted(b for b, kept in self.model.trash.items() if kept)
        batch = data.draw(st.sampled_from(batches))
        ids = data.draw(st.lists(st.sampled_from(sorted(self.model.trash[batch])), min_size=1,
                                 max_size=3))  # fmt: skip
        got = self.model.restore(batch, ids)
        assert self.storage.errors.restore_errors(Q, batch, ids) == got
        self.step(f"restore:{'restored' if got[0] else 'skipped' if got[1] else 'none'}")

    def has_waiting(self) -> bool:
        return bool(self.model.pending() or self.model.live("overflow"))

    @precondition(has_waiting)
    @rule(n=st.integers(1, 3))
    def purge_counted(self, n: int) -> None:
        """An operator purges what waits, as ``ztq queue purge`` and the console's bulk purge
        do: count the tasks (``queue_stats``: leftovers not counted), then purge batches of
        at most ``n`` until that many are taken. Leftovers of deletes and ``first`` moves
        (and a moved task's ``<id>#<n>`` entry) are met on the way: each task is counted and
        deleted once, and none that was counted stays behind."""
        st_, model = self.storage, self.model
        [stats] = monitor.queue_stats(st_, [Q], minutes=0)
        present = stats.pending + stats.overflow
        assert present == model.pending() + len(model.live("overflow"))
        met = sum(len(model.marks[name]) for name in LISTS)
        deleted = taken_all = 0
        while taken_all < present:
            got = model.purge("ready", min(n, present - taken_all))
            assert st_.tasks.remove(Q, purge="ready", limit=min(n, present - taken_all)) == got
            if not got[1]:
                break
            deleted, taken_all = deleted + got[0], taken_all + got[1]
        assert deleted == taken_all == present
        assert not model.pending() and not model.live("overflow")
        self.step(f"purge-counted:{'leftovers' if met else 'clean'}")

    def has_leftovers(self) -> bool:
        return self.has_waiting() and any(self.model.marks[name] for name in LISTS)

    @precondition(has_leftovers)
    @rule(n=st.integers(1, 3))
    def purge_counted_past_leftovers(self, n: int) -> None:
        """:meth:`purge_counted` offered once more while leftovers wait (the rules are
        drawn alike): the case issue 24 found is met in most runs, not in one of ten."""
        self.purge_counted(n)

    def has_buffered(self) -> bool:
        return bool(self.model.live("overflow"))

    @precondition(has_buffered)
    @rule(
        move=st.sampled_from(["delete", "cancel", "purge", "first"]),
        n=st.integers(1, 3),
        data=st.data(),
    )
    def make_room(self, move: str, n: int, data: st.DataObject) -> None:
        """An operator deletes waiting tasks of a full queue whose buffer holds some: the
        buffer feeds the room made (a purge of ready tasks takes the buffer's after them);
        or a buffered task is asked to run first (it jumps the queue, full or not)."""
        st_, model = self.storage, self.model
        if move == "first":
            task_id = data.draw(st.sampled_from(model.live("overflow")), label="buffered")
            self.enqueue([(task_id, "high", "now", True, None)])
            return
        if move == "purge":
            assert st_.tasks.remove(Q, purge="ready", limit=n) == model.purge("ready", n)
        else:
            waiting = sorted(model.in_state("queued") | model.in_state("overflow"))
            ids = data.draw(st.lists(st.sampled_from(waiting), min_size=1, max_size=2), label="ids")
            cancel = move == "cancel"
            assert st_.tasks.remove(Q, ids, cancel=cancel) == model.remove(ids, cancel=cancel)
        self.step(f"make-room:{move}")

    # -- invariants ----------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        k = self.storage.keys
        pipe = self.storage.client.pipeline(transaction=False)
        pipe.hgetall(k.tasks(Q))
        for level in LEVELS:
            pipe.lrange(k.ready(Q, level), 0, -1)
        for zset in (k.delayed(Q), k.running(Q), k.errors(Q), k.done(Q)):
            pipe.zrange(zset, 0, -1, withscores=True)
        pipe.exists(k.paused(Q))
        pipe.get(k.fence(Q))
        pipe.xlen(k.history(Q))
        pipe.hget(k.config(Q), "max_running")
        pipe.lrange(k.overflow(Q), 0, -1)
        pipe.hmget(k.config(Q), "max_pending", "when_full")
        pipe.hmget(k.totals(Q), "refused", "overflowed")
        pipe.get(k.waiter(Q))
        pipe.lrange(k.hand(Q), 0, -1)
        pipe.hmget(k.config(Q), "rate_limit", "rate_burst")
        pipe.hmget(k.rate(Q), "tat", "who")
        # the batches' outbox, records and members, read in the same round trip
        pipe.lrange(k.batch_out(Q), 0, -1)
        for b in BATCHES:
            pipe.hgetall(k.batch(b))
            pipe.hgetall(k.batch_members(b))
        r = pipe.execute()
        r, batch_reads = [*r[:19], monitor.redis_now(self.storage)], r[19:]
        return {
            "records": {
                i: ztq.TaskRecord.from_raw(Q, i, raw)
                for i, raw in r[0].items()
                if not i.startswith("#")
            },
            "marks": {i: raw for i, raw in r[0].items() if i.startswith("#") and i[1:2] != "e"},
            "error_counters": {i: raw for i, raw in r[0].items() if i.startswith("#e")},
            "ready": dict(zip(LEVELS, r[1:4], strict=True)),
            "delayed": dict(r[4]),
            "running": dict(r[5]),
            "errors": dict(r[6]),
            "done": dict(r[7]),
            "paused": bool(r[8]),
            "counter": int(r[9] or 0),
            "history": int(r[10]),
            "max_running": None if r[11] is None else int(r[11]),
            "overflow": r[12],
            "max_pending": None if r[13][0] is None else int(r[13][0]),
            "when_full": r[13][1] or "raise",
            "counted": [int(n or 0) for n in r[14]],
            "waiter": tuple(r[15].split("\t")[:2]) if r[15] else None,
            "hand": [tuple(e.split("\t", 5)) for e in r[16]],
            "rate": r[17],
            "tat": None if r[18][0] is None else float(r[18][0]),
            "sleeper": tuple(r[18][1].split("\t")) if r[18][1] else None,
            "now": r[19],
            "outbox": [str(e).split("\t") for e in batch_reads[0]],
            "batches": {
                b: (batch_reads[1 + 2 * n], batch_reads[2 + 2 * n]) for n, b in enumerate(BATCHES)
            },
        }

    @precondition(lambda self: self.model.ends)  # spends no steps when there is nothing
    @rule(replay=st.booleans(), data=st.data())
    def relay_batch_ends(self, replay: bool, data: st.DataObject) -> None:
        """The relay (docs/batches.md): every end in the queue's outbox applied to the batch
        by fence, then removed; ``replay``: an entry applied before is pushed again first (a
        relay that crashed between apply and remove), which must change nothing."""
        k = self.storage.keys
        if replay and self.relayed:
            self.storage.client.rpush(k.batch_out(Q), data.draw(st.sampled_from(self.relayed)))
        self.relayed += [str(e) for e in self.storage.client.lrange(k.batch_out(Q), 0, -1)]
        self.storage.batches.relay_queue(Q)
        for b, batch in self.batches.items():
            batch.relay([e for e in self.model.ends if BATCH_OF[e[0]] == b])
        self.model.ends = []
        for entry in self.storage.batches.batch_sends():
            cb, b, what = entry.split("\t")
            assert cb == "cb" and b in BATCHES, entry
            self.fired[(b, what)] += 1
            self.storage.batches.batch_sent(entry)
        ended = [k for b in self.batches.values() for k, e in
                 (("complete", b.complete), ("success", b.success)) if e]  # fmt: skip
        self.step("relay:replayed" if replay else "relay", *(f"relay:{k}" for k in ended))

    def batch_matches(self, snap: dict[str, Any]) -> None:
        """The outbox holds the model's ends in order; the batch's counters and members are
        the model's; each callback was pushed once, when the model says. (Part of the one
        invariant below: its reads ride in the snapshot's round trip.)"""
        outbox = snap["outbox"]
        assert [(m, o, int(f)) for _, m, o, f, *_ in outbox] == self.model.ends
        assert all(b == BATCH_OF[m] for b, m, *_ in outbox)
        for b, batch in self.batches.items():
            rec, stored = snap["batches"][b]
            assert rec  # the batch's record (hash) exists
            assert (int(rec["done"]), int(rec["failed"])) == (batch.done, batch.failed)
            assert ("complete" in rec, "success" in rec) == (batch.complete, batch.success)
            want = {f"{Q}:{i}": f"{o}\t{f}" for i, (o, f) in batch.applied.items()}
            assert {m: v for m, v in stored.items() if v} == want
            assert self.fired[(b, "complete")] == int(batch.complete)
            assert self.fired[(b, "success")] == int(batch.success)

    @invariant()
    def stored_state_matches(self) -> None:
        snap = self.snapshot()
        recs, model = snap["records"], self.model
        self.batch_matches(snap)

        # 15. the exact error counters (_lib.lua) equal the error list counted record by
        # record, per group and per kind, with the live keys listed once each
        want: dict[str, int] = {}
        for i in snap["errors"]:
            rec = recs.get(i)
            if rec is not None and rec.state.value == "error":
                again = "a" if (rec.get("redone") or 0) > 0 else "-"
                for part in ("", again):
                    for field_ in (f"#eg{part}:{group_key(rec)}", f"#ek{part}:{kind_key(rec)}"):
                        want[field_] = want.get(field_, 0) + 1
        want = {f: n for f, n in want.items() if "-" not in f}
        counters = snap["error_counters"]
        tallies = ("#eg:", "#ek:", "#ega:", "#eka:")
        got = {f: int(v) for f, v in counters.items() if f.startswith(tallies)}
        assert got == want, (got, want)
        for kind in ("g", "k"):
            listed = str(counters.get(f"#e{kind}s") or "").split()
            assert sorted(listed) == sorted(f[4:] for f in want if f[2] == kind and f[3] == ":")
            assert all(f"#e{kind}i:{key}" in counters for key in listed)

        # 2'. leftovers: each marked entry is in its list once, each list's count is its
        # marks, no entry is in a list twice; the other entries are the live ones
        marks = {n: set() for n in LISTS}
        for field_, value in snap["marks"].items():
            name, _, entry = field_[1:].partition(":")
            if entry:
                marks[name].add(entry)
            else:
                assert int(value) > 0, field_  # a count of 0 is deleted
        lists = {**snap["ready"], "overflow": snap["overflow"]}
        for name in LISTS:
            assert len(set(lists[name])) == len(lists[name]), (name, lists[name])
            assert marks[name] <= set(lists[name]), (name, marks[name])
            counted = snap["marks"].get(f"#{name}")
            assert int(counted or 0) == len(marks[name]), (name, counted)
            if any("#" in e for e in lists[name]):
                STATS[f"{self.backend}:entry-renamed"] = (
                    STATS.get(f"{self.backend}:entry-renamed", 0) + 1
                )
        assert marks == model.marks
        live = {n: [e.partition("#")[0] for e in lists[n] if e not in marks[n]] for n in LISTS}

        # 1. each id in exactly one place, the one its record's state names
        places: dict[str, list[str]] = {}
        for level in LEVELS:
            for i in live[level]:
                places.setdefault(i, []).append(f"ready:{level}")
        for name in ("delayed", "running", "errors", "done"):
            for i in snap[name]:
                places.setdefault(i, []).append(name)
        for i in live["overflow"]:
            places.setdefault(i, []).append("overflow")
        where = {"queued": "ready", "delayed": "delayed", "running": "running"}
        where |= {"overflow": "overflow"}
        where |= {"error": "errors", "done": "done", "expired": "done"}
        assert set(places) <= set(recs), f"ids without a record: {set(places) - set(recs)}"
        for i, rec in recs.items():
            found = places.get(i, [])
            assert len(found) == 1, f"{i} ({rec.state}) is in {found}"
            assert found[0].split(":")[0] == where[str(rec.state)], f"{i}: {rec.state} in {found}"
            if rec.state == "queued":
                assert found[0] == f"ready:{rec.priority}"

        # 2, 3. the lists and sets equal the model's
        assert snap["ready"] == model.ready
        assert snap["delayed"] == {i: float(model.recs[i].due or 0) for i in model.delayed()}
        assert set(snap["running"]) == model.in_state("running")
        assert set(snap["errors"]) == model.in_state("error")
        assert set(snap["done"]) == model.in_state("done") | model.in_state("expired")
        assert snap["paused"] == model.paused
        assert snap["max_running"] == model.max_running
        assert snap["overflow"] == model.overflow
        assert (snap["max_pending"], snap["when_full"]) == (model.max_pending, model.when_full)

        # 9. the pending limit: the buffer holds tasks only while the queue is full
        if snap["overflow"]:
            assert model.max_pending is not None
            assert sum(len(live[level]) for level in LEVELS) >= model.max_pending
        assert snap["counted"] == [model.refused, model.overflowed]

        # 10. a task handed to the waiting executor is a live lease of that executor
        assert snap["waiter"] == model.waiter

        # 12. the rate limit (1/h burst B): its tokens on Redis's clock, as the model counts
        # them (tat - now is the debt in hours, less the ms the run took), and the executor
        # registered for the next token
        burst = model.rate_burst
        assert snap["rate"] == (["1/h", None if burst in (None, 1) else str(burst)]
                                if burst is not None else [None, None])  # fmt: skip
        if snap["tat"] is None:
            assert model.debt == 0
        else:
            assert math.ceil((snap["tat"] - snap["now"]) / HOUR_MS - 1e-9) == model.debt
        assert snap["sleeper"] == model.sleeper
        assert [(w, t, i, int(token)) for w, t, token, _, i, _ in snap["hand"]] == model.hand
        assert len(snap["hand"]) <= 1 and not (snap["hand"] and snap["waiter"])
        for w, _, token, _, i, body in snap["hand"]:
            rec = recs[i]
            assert (str(rec.state), rec.get("fence"), rec.get("worker")) == ("running", token, w)
            assert body == payload(i)

        # 4. at most one live lease per id; a running task has exactly one
        for i in IDS:
            holders = [
                lease
                for leases in self.leases.values()
                for lease in leases
                if lease.id == i and (rec := recs.get(i)) is not None
                and rec.state == "running" and rec.get("fence") == str(lease.token)
                and rec.get("worker") == lease.worker
            ]  # fmt: skip
            in_hand = any(h[2] == i for h in model.hand)  # its lease is still in the hand list
            assert len(holders) + in_hand == (1 if model.state(i) == "running" else 0), (i, holders)

        # 5. tokens: every token Redis handed out is new, and the counter is the last of them
        # (a task handed to a waiting executor took its token too, taken or not yet)
        issued = sorted(lease.token for leases in self.leases.values() for lease in leases)
        issued += [h[3] for h in model.hand]
        assert len(issued) == len(set(issued)), "a fencing token was handed out twice"
        assert snap["counter"] == model.counter >= max(issued, default=0)

        # 6. each record equals the model's
        assert set(recs) == set(model.recs)
        for i, m in model.recs.items():
            rec = recs[i]
            got = {
                "state": str(rec.state),
                "prio": rec.priority,
                "attempts": rec.get("attempts") or 0,
                "failures": rec.get("failures") or 0,
                "lost": rec.get("lost") or 0,
                "rerun": bool(rec.get("rerun")),
                "progress": rec.get("progress"),
                "result": rec.get("result"),
                "settled": rec.get("settled"),
                "exp": "live" if rec.get("exp", 0) > 2 else "passed" if rec.get("exp") else None,
            }
            want = {
                "state": m.state,
                "prio": m.prio,
                "attempts": m.attempts,
                "failures": m.failures,
                "lost": m.lost,
                "rerun": m.rerun,
                "progress": m.progress,
                "result": m.result if m.state == "done" else None,
                "settled": None if m.settled is None else f"{m.settled[0]} {m.settled[1]}",
                "exp": m.exp,
            }
            if m.state == "running":
                got |= {"fence": int(rec.get("fence")), "worker": rec.get("worker")}
                want |= {"fence": m.fence, "worker": m.worker}
            assert got == want, i

        # 7. what the console shows
        [stats] = monitor.queue_stats(self.storage, [Q], minutes=2)
        assert self.storage.queues.pending_count(Q) == model.pending() + len(
            model.in_state("delayed")
        )
        assert (stats.delayed, stats.running, stats.errors, stats.paused) == (
            len(model.in_state("delayed")),
            len(model.in_state("running")),
            len(model.in_state("error")),
            model.paused,
        )
        assert sum(done for _, done, _ in stats.throughput) == model.done_count
        assert sum(failed for _, _, failed in stats.throughput) == model.failed_count
        assert stats.window.expired == model.expired_count
        assert snap["history"] == model.history
        page = monitor.pending_page(self.storage, Q, 0, 50)
        assert [row.id for row in page.rows] == [
            *(i for lv in LEVELS for i in model.live(lv)),
            *model.live("overflow"),
        ]
        assert stats.overflow == len(model.live("overflow"))
        assert stats.ready == {lv: len(model.live(lv)) for lv in LEVELS}
        assert stats.full == (
            model.max_pending is not None and model.pending() >= model.max_pending
        )


def _run(backend: str, storage: Storage, flush: Callable[[], None], examples: int) -> None:
    machine = type(
        f"QueueMachine_{backend.replace('-', '_')}",
        (QueueMachine,),
        {"storage": storage, "flush": staticmethod(flush), "backend": backend},
    )
    # The cases below are each met in most runs, not in all: a run that missed one runs
    # again (at most three more times) rather than pass without it or fail by chance.
    wanted: tuple[str, ...] = ("entry-renamed", "purge-counted:leftovers") if examples >= 50 else ()
    if examples >= 100:  # a fetch met tasks past their expiry
        wanted += ("fetch:ended-expired",)
    for _ in range(4):
        _generate(machine, examples)
        if all(STATS.get(f"{backend}:{case}", 0) > 0 for case in wanted):
            break
    print(
        f"\nstate machine on {backend}: {STATS.get(f'{backend}:examples', 0)} runs, "
        f"{STATS.get(f'{backend}:steps', 0)} steps; moves: "
        + ", ".join(
            f"{k.split(':', 1)[1]}={v}" for k, v in sorted(STATS.items()) if k.startswith(backend)
        )
    )
    assert STATS.get(f"{backend}:steps", 0) >= examples  # it really ran
    # leftovers were met with a live entry of the same id in their list, and by a purge of
    # everything counted (issue 24: one live task was left behind); expired tasks fetched
    for case in wanted:
        assert STATS.get(f"{backend}:{case}", 0) > 0, case


def _generate(machine: type[QueueMachine], examples: int) -> None:
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=STEPS,
            deadline=None,
            database=None,
            print_blob=True,
            phases=list(Phase)
            if os.environ.get("ZTQ_MODEL_SHRINK", "1") != "0"
            else [Phase.generate],
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


def test_state_machine_on_redis(redis_server: Any) -> None:
    client = redis.Redis(port=redis_server.port)
    storage = ztq.connect(redis_server.url)
    try:
        _run("redis", storage, client.flushall, EXAMPLES)
    finally:
        client.close()
        ztq.disconnect_all()


def test_state_machine_on_redis_62(redis_62: Any) -> None:
    """The oldest server ztq supports."""
    client = redis.Redis(port=redis_62.port)
    storage = ztq.connect(redis_62.url)
    try:
        _run("redis-6.2", storage, client.flushall, max(10, EXAMPLES // 3))
    finally:
        client.close()
        ztq.disconnect_all()


@pytest.mark.cluster
def test_state_machine_on_cluster(redis_cluster: Any) -> None:
    storage = ztq.connect(redis_cluster.url)
    try:
        _run("cluster", storage, redis_cluster.flush, max(10, EXAMPLES // 3))
    finally:
        ztq.disconnect_all()


def test_state_machine_on_the_in_memory_engine() -> None:
    """The same moves on ``memory://`` (fakeredis): what users' unit tests and eager mode
    run on must behave as a server does."""
    storage = ztq.connect("memory://state-machine")
    try:
        _run("memory", storage, storage.client.flushall, max(10, EXAMPLES // 3))
    finally:
        ztq.disconnect_all()
