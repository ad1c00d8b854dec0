"""Turns the collected numbers into ``docs/benchmarks.md`` (and the console summary)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.common import median

Results = dict[str, dict[str, list[float]]]  # measure key -> peer label -> one value per rep


@dataclass(frozen=True)
class Measure:
    key: str
    title: str
    unit: str
    higher_is_better: bool
    target: str = ""
    # (ztq median, best peer median) -> met?  None: no target
    check: Callable[[float, float], bool] | None = None
    absolute: bool = False  # compare |values| (lateness may be negative)


MEASURES = [
    Measure("enqueue", "1. enqueue, one call per task", "tasks/s", True,
            ">= best peer", lambda z, b: z >= b),
    Measure("bulk", "1. enqueue, bulk API, 20,000 tasks", "tasks/s", True,
            ">= 50,000/s", lambda z, b: z >= 50_000),
    Measure("drain1", "2. drain, 1 process (1 thread / slot)", "tasks/s", True,
            ">= 2x best peer", lambda z, b: z >= 2 * b),
    Measure("drain2", "2. drain, 2 processes", "tasks/s", True),
    Measure("lat_p50", "3. latency enqueue→start, p50", "ms", False,
            "<= 0.5 ms", lambda z, b: z <= 0.5),
    Measure("lat_p99", "3. latency enqueue→start, p99", "ms", False,
            "<= 2 ms", lambda z, b: z <= 2.0),
    Measure("late_p50", "4. delayed lateness, p50", "ms", False, absolute=True),
    Measure("late_p99", "4. delayed lateness, p99", "ms", False,
            "<= 10 ms", lambda z, b: abs(z) <= 10.0, absolute=True),
    Measure("late_max", "4. delayed lateness, max", "ms", False, absolute=True),
    Measure("mem", "5. Redis memory per queued task", "bytes", False,
            "<= 250 B", lambda z, b: z <= 250),
    Measure("recovery", "6. recovery after SIGKILL", "s", False,
            "<= lease (15 s)", lambda z, b: z <= 15.0),
]  # fmt: skip
BY_KEY = {m.key: m for m in MEASURES}


def fmt(value: float, unit: str) -> str:
    if math.isnan(value):
        return "—"
    if unit in ("tasks/s", "bytes"):
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def summary(values: list[float], unit: str, never: str = "") -> str:
    good = [v for v in values if not math.isnan(v)]
    if not good:
        return never or "—"
    mid = fmt(median(good), unit)
    spread = f" ({fmt(min(good), unit)}–{fmt(max(good), unit)})" if len(good) > 1 else ""
    text = mid + spread
    if len(good) < len(values):
        text += f" [{len(values) - len(good)} of {len(values)} runs failed]"
    return text


@dataclass
class Row:
    measure: Measure
    cells: dict[str, str]
    ztq: float
    best_label: str
    best: float
    ratio: float
    met: bool | None
    notes: list[str] = field(default_factory=list)


def _med(values: list[float]) -> float:
    good = [v for v in values if not math.isnan(v)]
    return median(good) if good else math.nan


def rows(results: Results, labels: list[str], never: dict[str, str] | None = None) -> list[Row]:
    """One row per measure; ``never`` gives the text for a peer that never finished one."""
    out = []
    for m in MEASURES:
        per = results.get(m.key, {})
        if not per:
            continue
        text = (never or {}).get(m.key, "")
        cells = {
            label: summary(per[label], m.unit, text) if label in per else "n/a" for label in labels
        }
        ztq = _med(per.get("ztq", []))
        best_label, best = "", math.nan
        for label in labels:
            if label == "ztq" or label not in per:
                continue
            value = _med(per[label])
            if math.isnan(value):
                continue
            key = abs(value) if m.absolute else value
            best_key = abs(best) if m.absolute else best
            better = key > best_key if m.higher_is_better else key < best_key
            if math.isnan(best) or better:
                best_label, best = label, value
        ratio = math.nan
        if not math.isnan(ztq) and not math.isnan(best) and best != 0:
            ratio = (abs(ztq) / abs(best)) if m.absolute else ztq / best
        met = None
        if m.check is not None and not math.isnan(ztq):
            met = m.check(ztq, best if not math.isnan(best) else ztq)
        out.append(Row(m, cells, ztq, best_label, best, ratio, met))
    return out


def table(rs: list[Row], labels: list[str]) -> str:
    head = ["measure", "unit", *labels, "best peer", "ztq / best peer", "target", "met"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rs:
        ratio = "—" if math.isnan(r.ratio) else f"{r.ratio:.2f}"
        met = {None: "", True: "yes", False: "**no**"}[r.met]
        best = r.best_label or "none"
        cols = [r.measure.title, r.measure.unit, *(r.cells[label] for label in labels)]
        cols += [best, ratio, r.measure.target, met]
        lines.append("| " + " | ".join(cols) + " |")
    return "\n".join(lines)


# -- 8: asyncio sleep measure ------------------------------------------------------------------
SLEEP_BASE = "ztq async"  # the configuration the others are compared with


def sleep_table(results: Results, settings: list[list[str]], ideal: float) -> str:
    """One row per configuration: wall time, tasks/s, ideal / wall, first and 90% done."""
    head = ["configuration", "worker", "wall time, s", "tasks/s", "ideal / wall"]
    head += ["first done, s", "90% done, s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, setting in settings:
        got = {k[len("sleep_") :]: v.get(label, []) for k, v in results.items()}
        wall = got.get("wall", [])
        share = ideal / _med(wall) if wall else math.nan
        cols = [label, setting, summary(wall, "s"), summary(got.get("rate", []), "tasks/s")]
        cols += [fmt(share, ""), summary(got.get("first", []), "s")]
        lines.append("| " + " | ".join([*cols, summary(got.get("most", []), "s")]) + " |")
    return "\n".join(lines)


def sleep_median(results: Results, key: str, label: str) -> float:
    return _med(results.get(f"sleep_{key}", {}).get(label, []))


def sleep_ratios(results: Results) -> dict[str, float]:
    """How many times as fast as each other configuration ``SLEEP_BASE`` is (median walls)."""
    walls = {label: _med(values) for label, values in results.get("sleep_wall", {}).items()}
    base = walls.get(SLEEP_BASE, math.nan)
    return {label: wall / base for label, wall in walls.items() if label != SLEEP_BASE}
