"""What ``bench.past`` measures: the sizes of a run, the driver calls, the figures they give."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

THREADS = (1, 8, 32)
COROUTINES = 100
DRAIN_THREADS = (1, 4)
# the console's pages timed ({task}: a queued task's id); a path a tree lacks is n/a there
PAGES = {
    "overview `/`": "/",
    "queues `/queues`": "/queues",
    "one queue `/queues/default`": "/queues/default",
    "errors `/errors`": "/errors",
    "history `/history`": "/history",
    "workers `/workers`": "/workers",
    "a task `/tasks/ID`": "/tasks/{task}",
}


@dataclass
class Plan:
    reps: int = 5
    enqueue_n: int = 8_000  # per thread count, and for the coroutines
    warm: int = 200  # enqueues before the clock starts (connections, scripts, keys)
    drain_n: int = 20_000
    latency_n: int = 500
    gap: float = 0.005  # seconds between the latency run's enqueues
    idle: float = 1.0  # seconds the worker idles before them
    console_queued: int = 20_000
    console_errors: int = 2_000
    console_reps: int = 20
    mode: str = "full"

    def sizes(self) -> str:
        return (
            f"{self.reps} repetitions; enqueue: {self.enqueue_n:,} no-op tasks a run (after "
            f"{self.warm} not timed); drain: {self.drain_n:,} queued no-ops; latency: "
            f"{self.latency_n:,} tasks {self.gap * 1000:g} ms apart; console: "
            f"{self.console_queued:,} queued tasks and {self.console_errors:,} errors, each "
            f"page {self.console_reps} times"
        )


def quick() -> Plan:
    """A few minutes: enough to see a change of 20% or more, not one of 5%."""
    return Plan(
        reps=2,
        enqueue_n=2_000,
        drain_n=4_000,
        latency_n=100,
        console_queued=2_000,
        console_errors=200,
        console_reps=5,
        mode="quick",
    )


def tiny() -> Plan:
    """Under a minute: checks that the tool and both trees work (tests/test_bench_past.py);
    its figures mean nothing (no failed tasks for the console: no worker to start there)."""
    return Plan(
        reps=2,
        enqueue_n=64,
        warm=8,
        drain_n=50,
        latency_n=5,
        gap=0.002,
        idle=0.1,
        console_queued=20,
        console_errors=0,
        console_reps=1,
        mode="tiny",
    )


@dataclass(frozen=True)
class Figure:
    key: str
    group: str  # the table it is a row of
    row: str
    unit: str
    better: str  # "higher" or "lower"
    digits: int = 0


@dataclass
class Measure:
    """One driver call per side and repetition, and the figures its values are."""

    name: str
    args: dict[str, Any]
    figures: dict[str, Figure] = field(default_factory=dict)  # driver's value -> figure
    timeout: float = 600.0


ENQUEUE = "Enqueue, one call per task"
DRAIN = "Drain, one worker process, no-op tasks"
LATENCY = "Latency, enqueue to start, one idle worker"
MEMORY = "Memory per queued task"
CONSOLE = "Console pages"


def _calls(name: str, row: str) -> dict[str, Figure]:
    return {
        "rate": Figure(f"{name}.rate", ENQUEUE, row, "tasks/s", "higher"),
        "p50": Figure(f"{name}.p50", ENQUEUE, f"{row}, p50 per call", "ms", "lower", 3),
        "p99": Figure(f"{name}.p99", ENQUEUE, f"{row}, p99 per call", "ms", "lower", 3),
    }


def measures(plan: Plan) -> list[Measure]:
    out = []
    for t in THREADS:
        row = f"{t} thread{'s' if t > 1 else ''}"
        args = {"what": "enqueue", "threads": t, "n": plan.enqueue_n, "warm": plan.warm}
        m = Measure(f"enqueue{t}", {**args, "memory": t == 1}, _calls(f"enqueue{t}", row))
        if t == 1:
            m.figures["bytes"] = Figure("memory", MEMORY, "one by one, 1 thread", "bytes", "lower")
        out.append(m)
    name = f"enqueue_async{COROUTINES}"
    args = {"what": "enqueue_async", "coros": COROUTINES, "n": max(plan.enqueue_n, COROUTINES)}
    out.append(Measure(name, args, _calls(name, f"{COROUTINES} coroutines")))
    for t in DRAIN_THREADS:
        row = f"{t} thread{'s' if t > 1 else ''}"
        fig = Figure(f"drain{t}", DRAIN, row, "tasks/s", "higher")
        out.append(
            Measure(f"drain{t}", {"what": "drain", "threads": t, "n": plan.drain_n}, {"rate": fig})
        )
    args = {"what": "latency", "n": plan.latency_n, "gap": plan.gap, "idle": plan.idle}
    out.append(
        Measure(
            "latency",
            args,
            {
                "p50": Figure("latency.p50", LATENCY, "p50", "ms", "lower", 2),
                "p99": Figure("latency.p99", LATENCY, "p99", "ms", "lower", 2),
            },
        )
    )
    args = {
        "what": "console",
        "queued": plan.console_queued,
        "errors": plan.console_errors,
        "reps": plan.console_reps,
        "pages": PAGES,
    }
    pages = {name: Figure(f"console.{name}", CONSOLE, name, "ms", "lower", 1) for name in PAGES}
    out.append(Measure("console", args, pages))
    return out


def figures(plan: Plan) -> list[Figure]:
    """Every figure, in the order of the report (tables in the order their groups come)."""
    found = [f for m in measures(plan) for f in m.figures.values()]
    groups = list(dict.fromkeys(f.group for f in found))
    return sorted(found, key=lambda f: groups.index(f.group))
