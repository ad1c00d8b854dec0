"""The autoscaler's policy (ZTQ's 智能调度): how many threads each autoscaled queue runs.

Pure: :meth:`Autoscaler.decide` takes what the worker measured over the last heartbeat
(:class:`Load` per queue, :class:`Host`) and returns the changes (:class:`Decision`), with
no Redis, threads or clock; :mod:`ztq.worker.scaler` measures and applies. The rules
(docs/autoscaling.md):

- **need**: threads for the flow (the busy threads of the last beat, with a quarter more
  of headroom; the share of the beat's runs that drained the backlog, as many as the
  backlog went down, is not flow: a queue whose burst just drained needs one thread) plus
  threads to drain the backlog within ``HORIZON_BEATS`` heartbeats at the recent run time;
  a queue whose thread-pool runs are CPU-bound gets no more threads than the GIL lets run
  (1 / the CPU share of a run, rounded down: a share of a half or more is one thread, as a
  CPU-bound run waiting for the GIL shows about that); then within ``low..high``. Before
  any run ended here, the run time is the queue's mean of the last minutes (every
  worker's runs).
- **grow** at once to the need when tasks would otherwise wait (no thread serves the queue,
  the backlog outlasts the horizon, the oldest task has waited that long); a milder need must
  hold ``GROW_BEATS`` heartbeats in a row.
- **shrink** only after the threads were more than needed ``idle_beats`` heartbeats in a row
  and as long since the last growth, by half the excess each beat (at least one).
- **ceilings**: from ``cpu_max`` host CPU % or ``memory_max`` host memory % (100: no
  ceiling) nothing grows
  (logged once when it starts holding a queue back); over the memory ceiling the largest
  queue above its minimum lets one thread go each beat. ``threads_max`` caps the threads of
  the autoscaled thread and process queues together: the most pressed queue is served
  first, and one that must grow takes the unneeded threads of the others at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

GROW_BEATS = 2  # heartbeats a mild need to grow must hold
HORIZON_BEATS = 2  # the backlog should be drained within this many heartbeats
HEADROOM = 1.25  # threads kept over the busy ones
SMOOTH = 0.5  # weight of the last beat in the run time and CPU share remembered
PRESSED = 1e9  # added to a pressed queue's urgency: served before any milder need


@dataclass(frozen=True)
class Load:
    """One autoscaled queue as the worker measured it over the last heartbeat."""

    queue: str
    threads: int  # running now (process slots; an async pool's tasks at once)
    low: int
    high: int
    ready: int = 0  # tasks waiting, every shard (0 for a paused queue)
    oldest_wait: float = 0.0  # seconds the oldest waiting task has waited
    busy: float = 0.0  # threads busy on average over the beat
    runs: int = 0  # runs that ended during the beat
    run_time: float | None = None  # their mean seconds (None: none ended)
    cpu_share: float | None = None  # their thread CPU seconds / run seconds (thread pools)
    pool: str = "thread"
    pinned: bool = False  # an operator set its threads: not autoscaled until unpinned
    queue_run_time: float | None = None  # the queue's mean of the last minutes, every worker


@dataclass(frozen=True)
class Host:
    cpu: float  # percent of every core, over the last beat
    memory: float  # percent


@dataclass(frozen=True)
class Limits:
    cpu_max: float = 85.0
    memory_max: float = 90.0
    threads_max: int = 0  # autoscaled thread and process queues together; 0: no cap
    idle_beats: int = 3
    heartbeat: float = 3.0  # seconds between two decisions


@dataclass(frozen=True)
class Decision:
    """A change of a queue's threads (or, ``after == before``, a growth held back)."""

    queue: str
    before: int
    after: int
    why: str  # grow, shrink, reclaim, memory, range; hold_cpu, hold_memory
    reason: str  # "340 waiting, CPU 41%"
    facts: dict[str, str] = field(default_factory=dict)  # for the worker log's fields

    @property
    def message(self) -> str:
        """``mail 2 → 5 threads: 340 waiting, CPU 41%`` (the worker log's line)."""
        if self.after == self.before:
            return f"{self.queue} held at {self.before} threads: {self.reason}"
        return f"{self.queue} {self.before} → {self.after} threads: {self.reason}"


@dataclass
class _State:
    grow_streak: int = 0
    idle_streak: int = 0
    last_grow: int = -(10**9)  # the beat of the last growth
    run_time: float | None = None
    cpu_share: float | None = None
    holding: str = ""  # the ceiling that holds it back now ("" none), logged once
    ready: int | None = None  # tasks waiting at the last beat


class Autoscaler:
    """Remembers what hysteresis needs (streaks, last growth, run times) between beats."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.beat = 0
        self.states: dict[str, _State] = {}
        self.needed_by: dict[str, str] = {}  # queue -> the queue its threads went to (reclaim)

    # -- what a queue needs ------------------------------------------------------------------
    def _remember(self, load: Load) -> _State:
        st = self.states.setdefault(load.queue, _State())
        if st.run_time is None and load.queue_run_time:  # nothing ran here yet: the queue's
            st.run_time = load.queue_run_time
        if load.runs and load.run_time is not None:
            old = st.run_time
            st.run_time = load.run_time if old is None else old + SMOOTH * (load.run_time - old)
        if load.runs and load.cpu_share is not None:
            old = st.cpu_share
            st.cpu_share = load.cpu_share if old is None else old + SMOOTH * (load.cpu_share - old)
        return st

    def need(self, load: Load, st: _State) -> int:
        """Threads the queue needs now, within its range (see the module's docstring)."""
        busy = load.busy
        if load.runs and st.ready is not None:  # the runs that drained the backlog are not flow
            drained = min(load.runs, max(0, st.ready - load.ready))
            busy *= 1 - drained / load.runs
        flow = math.ceil(busy * HEADROOM - 1e-9) if busy > 0.01 else 0
        if load.busy > 0.01 or load.runs:
            flow = max(flow, 1)
        backlog = 0
        if load.ready:
            if st.run_time is None:  # nothing ran yet: double, as many as wait at most
                backlog = min(load.ready, max(1, load.threads))
            else:
                horizon = HORIZON_BEATS * self.limits.heartbeat
                backlog = math.ceil(load.ready * st.run_time / horizon - 1e-9)
            backlog = max(1, backlog)
        want = flow + backlog
        if load.pool == "thread" and st.cpu_share:  # the GIL: CPU-bound threads run one at once
            want = min(want, max(1, math.floor(1 / st.cpu_share - 0.5)))
        return max(load.low, min(load.high, want))

    def pressing(self, load: Load, st: _State) -> bool:
        """Tasks wait and would go on waiting: grow now, without waiting for a streak."""
        if not load.ready:
            return False
        horizon = HORIZON_BEATS * self.limits.heartbeat
        if load.threads == 0 or load.oldest_wait >= horizon:
            return True
        return st.run_time is not None and load.ready * st.run_time > load.threads * horizon

    # -- the decision ------------------------------------------------------------------------
    def decide(self, loads: list[Load], host: Host) -> list[Decision]:
        """The changes for this heartbeat, in the order to apply them (shrinks first)."""
        self.beat += 1
        self.needed_by = {}
        lim = self.limits
        cpu = f"CPU {host.cpu:.0f}%"
        targets: dict[str, int] = {}
        reasons: dict[str, tuple[str, str]] = {}
        urgent: dict[str, float] = {}  # how pressed each growing queue is (for the cap)
        wants: dict[str, int] = {}
        by_queue = {ld.queue: ld for ld in loads if not ld.pinned}
        for load in by_queue.values():
            st = self._remember(load)
            want = self.need(load, st)
            st.ready = load.ready
            n = load.threads
            targets[load.queue] = n
            wants[load.queue] = want
            busy = f"{load.busy:.1f} of {n} busy"
            if n < load.low or n > load.high:
                targets[load.queue] = max(load.low, min(load.high, n))
                reasons[load.queue] = ("range", f"range {load.low}..{load.high}")
            elif want > n:
                st.idle_streak = 0
                st.grow_streak += 1
                pressed = self.pressing(load, st)
                if pressed or st.grow_streak >= GROW_BEATS:
                    targets[load.queue] = want
                    reasons[load.queue] = ("grow", f"{load.ready} waiting, {cpu}")
                    backlog = load.ready * (st.run_time or 1.0) / max(1, n)
                    urgent[load.queue] = backlog + load.oldest_wait + (PRESSED if pressed else 0)
            elif want < n:
                st.grow_streak = 0
                st.idle_streak += 1
                calm = self.beat - st.last_grow >= lim.idle_beats
                if st.idle_streak >= lim.idle_beats and calm:
                    targets[load.queue] = n - max(1, (n - want + 1) // 2)
                    idle = "idle" if load.busy <= 0.01 else busy
                    reasons[load.queue] = ("shrink", f"{idle}, none waiting, {cpu}")
            else:
                st.grow_streak = st.idle_streak = 0
        out = self._ceilings(by_queue, targets, reasons, host)
        self._cap(by_queue, targets, reasons, urgent, wants)
        for q, target in targets.items():
            load = by_queue[q]
            if target > load.threads:
                self.states[q].last_grow = self.beat
                self.states[q].grow_streak = 0
            if target != load.threads:
                why, reason = reasons[q]
                facts = {"waiting": str(load.ready), "busy": f"{load.busy:.1f}",
                         "cpu": f"{host.cpu:.0f}", "memory": f"{host.memory:.0f}"}  # fmt: skip
                if q in self.needed_by:
                    facts["for"] = self.needed_by[q]
                out.append(Decision(q, load.threads, target, why, reason, facts))
        return sorted(out, key=lambda d: (d.after > d.before, d.queue))

    def _ceilings(
        self,
        loads: dict[str, Load],
        targets: dict[str, int],
        reasons: dict[str, tuple[str, str]],
        host: Host,
    ) -> list[Decision]:
        """Hold back every growth over a ceiling (a decision logged once per hold); over the
        memory ceiling let one thread of the largest queue above its minimum go."""
        lim = self.limits
        over = ""
        if lim.memory_max < 100 and host.memory >= lim.memory_max:
            over = "memory"
            label = f"memory {host.memory:.0f}% ≥ {lim.memory_max:.0f}%"
        elif lim.cpu_max < 100 and host.cpu >= lim.cpu_max:
            over = "cpu"
            label = f"CPU {host.cpu:.0f}% ≥ {lim.cpu_max:.0f}%"
        shed = ""
        above = [q for q, ld in loads.items() if ld.threads > ld.low]
        if over == "memory" and above:
            shed = max(above, key=lambda q: (loads[q].threads - loads[q].low, q))
            targets[shed] = loads[shed].threads - 1
            reasons[shed] = ("memory", label)
        out: list[Decision] = []
        for q, load in loads.items():
            st = self.states[q]
            held = over and q != shed and targets[q] > load.threads and reasons[q][0] == "grow"
            if not held:
                st.holding = ""
                continue
            targets[q] = load.threads
            if st.holding != over:
                st.holding = over
                facts = {"waiting": str(load.ready), "cpu": f"{host.cpu:.0f}",
                         "memory": f"{host.memory:.0f}"}  # fmt: skip
                out.append(Decision(q, load.threads, load.threads, f"hold_{over}",
                                    f"{load.ready} waiting, {label}", facts))  # fmt: skip
        return out

    def _cap(
        self,
        loads: dict[str, Load],
        targets: dict[str, int],
        reasons: dict[str, tuple[str, str]],
        urgent: dict[str, float],
        wants: dict[str, int],
    ) -> None:
        """Keep the thread and process queues within ``threads_max`` together: grant the
        growths most pressed first; a pressed one takes the threads the others do not need."""
        cap = self.limits.threads_max
        counted = [q for q, ld in loads.items() if ld.pool != "async"]
        if not cap or not counted:
            return
        growing = sorted((q for q in counted if targets[q] > loads[q].threads),
                         key=lambda q: -urgent.get(q, 0.0))  # fmt: skip
        base = {q: min(targets[q], loads[q].threads) for q in counted}
        free = cap - sum(base.values())
        for q in growing:
            wanted = targets[q] - base[q]
            if free < wanted and urgent.get(q, 0.0) >= PRESSED:
                for other in sorted(counted, key=lambda o: wants[o] - base[o]):
                    give = min(base[other] - wants[other], wanted - free)
                    if other in growing or give <= 0:
                        continue
                    base[other] -= give
                    free += give
                    targets[other] = base[other]
                    busy = f"{loads[other].busy:.1f} of {loads[other].threads} busy"
                    reasons[other] = ("reclaim", f"needed by {q}, {busy}")
                    self.needed_by[other] = q
            granted = max(0, min(wanted, free))
            base[q] += granted
            free -= granted
            targets[q] = base[q]
