"""Model-based test of keyed tasks (docs/queue-controls.md, "Per-key limits and fair turns"):
Hypothesis drives the real scripts on a real redis-server (6.2 and Cluster too) beside a
small model of what each key holds. Moves: enqueue with a key (a priority, `first`, an id
enqueued again), fetch a batch, ack, fail, release, a lease lost and reaped, a delete of a
waiting task, a running limit per key set, changed and lifted, a key paused and resumed.
After every step the stored state is read back and checked:

1. every task is where its record says (its key's list as a live entry, running, errors,
   done), and the model agrees: the same state and key for every id;
2. the counts are kept: per key, the waiting (`k:wait`) and running (`k:run`) counts equal
   the records'; `#keyed` is their sum, `pending_count` counts them;
3. a fetch never makes a key run more than its limit, and takes each key's task in its
   order (highest priority first, FIFO within a level, `first` and given-back tasks at the
   head), exactly as the model's per-key queues say;
4. turns: a fetch that takes two tasks of one key took one of every other key that had a
   task waiting, room under its limit and no pause (no key waits behind another's backlog);
   a fetch that took fewer than it asked left no such key behind (no head-of-line blocking);
5. no key is forgotten: a key with waiting tasks is in the rotation once (state 'r'),
   parked at its limit while it holds leases ('c'), or paused ('p'); the rotation holds
   only keys in state 'r', each once; a parked key's slot count is never 0;
6. fencing: every lease's token is larger than all before it, and an ack of a lease lost
   to a reap is refused and frees no slot.
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Callable
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, Phase, settings
from hypothesis import stateful as hs
from hypothesis import strategies as st

import ztq.core as ztq
from ztq.core.engine.queue_limits import keyed_level
from ztq.core.engine.storage import EnqueueEntry, Finished, Leased, Storage

Q = "kq"
IDS = tuple(f"t{i}" for i in range(7))
KEYS = ("k0", "k1", "k2")
LEVELS = ("high", "normal", "low")
THREADS = (("w1", "A"), ("w1", "B"), ("w2", "A"))
EXAMPLES = int(os.environ.get("ZTQ_MODEL_EXAMPLES", "150"))
pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]  # model-based: minutes per backend
STATS: dict[str, int] = {}
CASES = ("turns checked", "held keys checked", "parked key freed")


class KeyMachine(hs.RuleBasedStateMachine):
    storage: Storage
    flush: Callable[[], None]

    def __init__(self) -> None:
        super().__init__()
        self.flush()
        self.state: dict[str, str] = {}  # id -> queued, running, error, done
        self.key: dict[str, str] = {}
        self.prio: dict[str, str] = {}
        # per key and level, the waiting ids in the order a fetch takes them
        self.waiting = {k: {lv: deque[str]() for lv in LEVELS} for k in KEYS}
        self.live: dict[str, Leased] = {}  # id -> its live lease
        self.holder: dict[str, tuple[str, str]] = {}
        self.lost: list[tuple[tuple[str, str], Leased]] = []  # leases lost to a reap
        self.cap: int | None = None
        self.paused: set[str] = set()
        self.top_token = 0
        self.rerun: set[str] = set()  # running ids an identical enqueue asked to run again

    # -- the model ---------------------------------------------------------------------------
    def running(self, key: str) -> int:
        return sum(1 for i, s in self.state.items() if s == "running" and self.key[i] == key)

    def queued(self, key: str) -> int:
        return sum(len(q) for q in self.waiting[key].values())

    def eligible(self, key: str) -> bool:
        free = self.cap is None or self.running(key) < self.cap
        return self.queued(key) > 0 and free and key not in self.paused

    def head(self, key: str) -> str:
        return next(q[0] for q in self.waiting[key].values() if q)

    def give_back(self, task_id: str) -> None:
        """Released or reaped: back at the head of its level in its key."""
        self.state[task_id] = "queued"
        self.waiting[self.key[task_id]][self.prio[task_id]].appendleft(task_id)
        self.live.pop(task_id, None)
        self.holder.pop(task_id, None)
        self.rerun.discard(task_id)  # the run ended without its end: the request goes with it

    # -- moves -------------------------------------------------------------------------------
    @hs.initialize(
        keys=st.lists(st.sampled_from(KEYS), min_size=len(IDS), max_size=len(IDS)),
        prios=st.lists(st.sampled_from(LEVELS), min_size=len(IDS), max_size=len(IDS)),
        cap=st.sampled_from([None, 1, 1, 2]),
    )
    def seed(self, keys: list[str], prios: list[str], cap: int | None) -> None:
        """Every id waits at the start, spread over the keys (fetches meet several keys),
        mostly under a running limit per key."""
        for task_id, key, prio in zip(IDS, keys, prios, strict=True):
            self.enqueue(task_id, key, prio, False)
        if cap is not None:
            self.limit(cap)

    @hs.rule(
        task_id=st.sampled_from(IDS),
        key=st.sampled_from(KEYS),
        prio=st.sampled_from(LEVELS),
        first=st.booleans(),
    )
    def enqueue(self, task_id: str, key: str, prio: str, first: bool) -> None:
        payload = json.dumps(["model.t", [task_id]])
        entry = EnqueueEntry(task_id, payload, keyed_level(prio, key, None, None), first=first)
        (_, outcome) = self.storage.call(*self.storage.tasks.enqueue_op(Q, [entry]))
        state = self.state.get(task_id)
        if state == "queued":
            if not first:
                assert outcome == "exists"
                return
            assert outcome == "moved"  # the head of its key (its key stays the first one's)
            old = self.waiting[self.key[task_id]][self.prio[task_id]]
            old.remove(task_id)
            self.prio[task_id] = prio
            self.waiting[self.key[task_id]][prio].appendleft(task_id)
            return
        if state == "running":
            assert outcome == "rerun"
            self.rerun.add(task_id)
            return
        assert outcome == "added"
        self.state[task_id], self.key[task_id], self.prio[task_id] = "queued", key, prio
        self.rerun.discard(task_id)
        q = self.waiting[key][prio]
        q.appendleft(task_id) if first else q.append(task_id)

    @hs.rule(thread=st.sampled_from(THREADS), n=st.integers(1, 4))
    def fetch(self, thread: tuple[str, str], n: int) -> None:
        before = {k: self.eligible(k) for k in KEYS}
        got = self.storage.leases.fetch(Q, thread[0], thread[1], 3_600_000, n)
        taken: dict[str, int] = {}
        for lease in got:
            key = self.key[lease.id]
            assert self.state[lease.id] == "queued" and self.eligible(key), lease.id
            assert lease.id == self.head(key), (lease.id, key, self.waiting[key])
            self.waiting[key][self.prio[lease.id]].popleft()
            self.state[lease.id] = "running"
            assert lease.token > self.top_token
            self.top_token = lease.token
            self.live[lease.id], self.holder[lease.id] = lease, thread
            taken[key] = taken.get(key, 0) + 1
        if any(c >= 2 for c in taken.values()):  # turns: every key that could take one did
            if sum(before.values()) >= 2:
                STATS["turns checked"] = STATS.get("turns checked", 0) + 1
            for k, could in before.items():
                assert not could or taken.get(k, 0) >= 1 or not self.eligible(k), (k, taken)
        if len(got) < n:  # nothing left behind that could have run
            if any(self.queued(k) for k in KEYS):
                STATS["held keys checked"] = STATS.get("held keys checked", 0) + 1
            assert not any(self.eligible(k) for k in KEYS), taken

    def has_live(self) -> bool:
        return bool(self.live)

    @hs.precondition(has_live)
    @hs.rule(data=st.data(), move=st.sampled_from(["ack", "fail", "release", "lose"]))
    def end(self, data: st.DataObject, move: str) -> None:
        task_id = data.draw(st.sampled_from(sorted(self.live)))
        lease, (worker, thread) = self.live[task_id], self.holder[task_id]
        key = self.key[task_id]
        if self.queued(key) and self.cap is not None and self.running(key) >= self.cap:
            STATS["parked key freed"] = STATS.get("parked key freed", 0) + 1
        st_ = self.storage
        if move == "ack":
            assert st_.leases.ack(Q, worker, [Finished(task_id, lease.token, "model.t")]) == []
        elif move == "fail":
            assert st_.leases.fail(Q, worker, task_id, lease.token, "model.t", "E: x", "") in (
                "error",
                "rerun",
            )
        elif move == "release":
            assert st_.leases.release(Q, worker, [(task_id, lease.token)]) == 1
            self.give_back(task_id)
            return
        else:  # its worker died: the lease lapses and a reaper hands the task back
            st_.client.zadd(st_.keys.running(Q), {task_id: 1})
            assert [i for i, _, _ in st_.leases.reap(Q, 99).items] == [task_id]
            self.lost.append(((worker, thread), lease))
            self.give_back(task_id)
            return
        self.live.pop(task_id)
        self.holder.pop(task_id)
        if task_id in self.rerun:  # an identical enqueue came during the run: queued again
            self.rerun.discard(task_id)
            self.state[task_id] = "queued"
            self.waiting[self.key[task_id]][self.prio[task_id]].append(task_id)
        else:
            self.state[task_id] = "done" if move == "ack" else "error"

    @hs.precondition(lambda self: bool(self.lost))
    @hs.rule(data=st.data())
    def late_ack(self, data: st.DataObject) -> None:
        """A reaped run's ack comes late: refused (fenced), no slot freed twice."""
        (worker, _), lease = data.draw(st.sampled_from(self.lost))
        refused = self.storage.leases.ack(Q, worker, [Finished(lease.id, lease.token, "model.t")])
        assert refused == ([] if lease.id not in self.state else [lease.id])  # gone: not refused

    @hs.rule(task_id=st.sampled_from(IDS))
    def cancel(self, task_id: str) -> None:
        deleted, _ = self.storage.tasks.remove(Q, [task_id], cancel=True)
        if self.state.get(task_id) == "queued":
            assert deleted == 1
            self.waiting[self.key[task_id]][self.prio[task_id]].remove(task_id)
            del self.state[task_id]
        else:
            assert deleted == 0

    @hs.rule(cap=st.sampled_from([None, 1, 2]))
    def limit(self, cap: int | None) -> None:
        ztq.configure_queue(Q, key_concurrency=cap)
        # a raised limit frees parked keys as their leases end (known: not at once), so the
        # model lowers or keeps the limit only while no key is parked over it
        self.cap = cap

    @hs.rule(key=st.sampled_from(KEYS), on=st.booleans())
    def pause(self, key: str, on: bool) -> None:
        self.storage.key_turns.pause_key(Q, key, on)
        (self.paused.add if on else self.paused.discard)(key)

    # -- invariants --------------------------------------------------------------------------
    @hs.invariant()
    def stored_state_matches(self) -> None:
        c = self.storage.client
        p = f"ztq:{{{Q}}}:"
        for task_id, state in self.state.items():
            rec = self.storage.tasks.record(Q, task_id)
            assert rec is not None and rec.state.value == state, (task_id, rec, state)
            assert rec.meta["key"] == self.key[task_id]
        wait = {
            k.decode() if isinstance(k, bytes) else k: int(v)
            for k, v in c.zrange(p + "k:wait", 0, -1, withscores=True)
        }
        run = {
            k.decode() if isinstance(k, bytes) else k: int(v)
            for k, v in c.zrange(p + "k:run", 0, -1, withscores=True)
        }
        assert wait == {k: self.queued(k) for k in KEYS if self.queued(k)}
        assert run == {k: self.running(k) for k in KEYS if self.running(k)}
        assert self.storage.queues.pending_count(Q) == sum(wait.values())
        # the live entries of each key's lists, in order, are the model's
        for key in KEYS:
            for level in LEVELS:
                entries = [
                    e.decode() if isinstance(e, bytes) else e
                    for e in c.lrange(f"{p}k:r:{level}:{key}", 0, -1)
                ]
                live = []
                for e in entries:
                    rec = self.storage.tasks.record(Q, e.split("#")[0])
                    if rec and rec.state.value == "queued" and rec.meta.get("entry") == e:
                        live.append(e.split("#")[0])
                assert live == list(self.waiting[key][level]), (key, level, entries)
        states = {
            (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in c.hgetall(p + "k:state").items()
        }
        turns = [t.decode() if isinstance(t, bytes) else t for t in c.lrange(p + "k:turns", 0, -1)]
        assert len(turns) == len(set(turns))
        assert {k for k, s in states.items() if s == "r"} == set(turns)
        for key in KEYS:
            if self.queued(key):
                assert states.get(key) in ("r", "c", "p"), (key, states)
            if states.get(key) == "c":
                assert self.running(key) > 0, key  # parked with no lease to free it: leaked
            if states.get(key) == "p":
                assert key in self.paused
            if key not in self.paused and states.get(key) == "p":
                raise AssertionError(key)


def _run(storage: Storage, flush: Callable[[], None], examples: int) -> None:
    machine = type(
        "KeyMachineRun", (KeyMachine,), {"storage": storage, "flush": staticmethod(flush)}
    )
    shrink = os.environ.get("ZTQ_MODEL_SHRINK", "1") != "0"
    # The cases the turn checks are about must be met (several keys could take a task):
    # counted for this run alone (STATS was shared by the runs of one test process, so a
    # run alone in its process could pass on another's cases, or fail for want of them),
    # with more rounds of random examples while one is missing (rare: one key taken twice
    # in one fetch while another could take one).
    STATS.clear()
    for _ in range(4):
        hs.run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=examples,
                stateful_step_count=30,
                deadline=None,
                database=None,
                phases=list(Phase) if shrink else [Phase.generate],
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            ),
        )
        if all(STATS.get(case, 0) > 0 for case in CASES):
            break
    for case in CASES:
        assert STATS.get(case, 0) > 0, (case, STATS)


def _on_server(server: Any, examples: int) -> None:
    client = redis.Redis(port=server.port)
    storage = ztq.connect(server.url)
    try:
        _run(storage, client.flushall, examples)
    finally:
        client.close()
        ztq.disconnect_all()


def test_key_state_machine_on_redis(redis_server: Any) -> None:
    _on_server(redis_server, EXAMPLES)


def test_key_state_machine_on_redis_62(redis_62: Any) -> None:
    _on_server(redis_62, max(10, EXAMPLES // 3))


@pytest.mark.cluster
def test_key_state_machine_on_cluster(redis_cluster: Any) -> None:
    storage = ztq.connect(redis_cluster.url)
    try:
        _run(storage, redis_cluster.flush, max(10, EXAMPLES // 3))
    finally:
        ztq.disconnect_all()


def test_key_state_machine_on_the_in_memory_engine() -> None:
    """The same moves on ``memory://`` (fakeredis): users' unit tests meet keys there."""
    storage = ztq.connect("memory://key-state-machine")
    try:
        _run(storage, storage.client.flushall, max(10, EXAMPLES // 3))
    finally:
        ztq.disconnect_all()
