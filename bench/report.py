"""Turns the collected numbers into ``docs/benchmarks.md`` (and the console summary)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.common import median

Results = dict[str, dict[str, list[float]]]  # measure key -> peer label -> one value per rep


@dataclass(frozen=True)
class Measure:
    key: str
    title: str
    unit: str
    higher_is_better: bool
    target: str = ""
    # (ztq median, reference median) -> met?  None: no target. The reference is the best
    # peer's median, or ``versus``'s when set
    check: Callable[[float, float], bool] | None = None
    absolute: bool = False  # compare |values| (lateness may be negative)
    versus: str = ""


MEASURES = [
    Measure("enqueue", "1. enqueue, one call per task", "tasks/s", True,
            ">= 1.0x huey", lambda z, b: z >= b, versus="huey"),
    Measure("bulk", "1. enqueue, bulk API, 20,000 tasks", "tasks/s", True,
            ">= 60,000/s", lambda z, b: z >= 60_000),
    Measure("drain1", "2. drain, 1 process (1 thread / slot)", "tasks/s", True,
            ">= 2x best peer", lambda z, b: z >= 2 * b),
    Measure("drain2", "2. drain, 2 processes", "tasks/s", True,
            ">= 2x best peer", lambda z, b: z >= 2 * b),
    Measure("lat_p50", "3. latency enqueue→start, p50", "ms", False,
            "<= 1.0x huey", lambda z, b: z <= b, versus="huey"),
    Measure("lat_p99", "3. latency enqueue→start, p99", "ms", False,
            "<= 1.0x huey", lambda z, b: z <= b, versus="huey"),
    Measure("late_p50", "4. delayed lateness, p50", "ms", False, absolute=True),
    Measure("late_p99", "4. delayed lateness, p99", "ms", False,
            "<= 10 ms", lambda z, b: abs(z) <= 10.0, absolute=True),
    Measure("late_max", "4. delayed lateness, max", "ms", False, absolute=True),
    Measure("mem", "5. Redis memory per queued task", "bytes", False,
            "<= 200 B", lambda z, b: z <= 200),
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
        ref = _med(per.get(m.versus, [])) if m.versus else best
        if m.check is not None and not math.isnan(ztq):
            met = m.check(ztq, ref if not math.isnan(ref) else ztq)
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


# -- the Targets of issue 12 -------------------------------------------------------------------
@dataclass
class Target:
    key: str  # what the closing note explains it by (docs.WHY)
    line: str  # the target, as issue 12 words it
    measured: str  # the medians it compares
    ratio: float  # the figure the target bounds
    met: bool | None  # None: not measured


def _ratio(results: Results, key: str, a: str, b: str) -> tuple[float, float, float]:
    x, y = _med(results.get(key, {}).get(a, [])), _med(results.get(key, {}).get(b, []))
    return x, y, (x / y if y and not math.isnan(x) and not math.isnan(y) else math.nan)


def _best(results: Results, key: str, labels: list[str]) -> tuple[str, float]:
    per = results.get(key, {})
    got = [(label, _med(per[label])) for label in labels if label != "ztq" and label in per]
    got = [(label, v) for label, v in got if not math.isnan(v)]
    return max(got, key=lambda x: x[1]) if got else ("", math.nan)


def _met(ratio: float, ok: bool) -> bool | None:
    return None if math.isnan(ratio) else ok


def targets(
    results: Results, labels: list[str], growth: tuple[bool | None, str] | None = None
) -> list[Target]:
    """Each target of issue 12 from one run's medians; ``growth``: (flat?, what was
    measured) from the cost-growth section, None when it did not run."""
    out: list[Target] = []
    for label, need, line in (("ztq", 1.0, "enqueue one by one, deduplicating (default "
                               "`unique=True`): >= 1.0x huey"),
                              ("ztq unique=False", 1.1, "enqueue one by one, `unique=False`: "
                               ">= 1.1x huey")):  # fmt: skip
        z, h, r = _ratio(results, "enqueue", label, "huey")
        text = f"{fmt(z, 'tasks/s')} / {fmt(h, 'tasks/s')} tasks/s"
        key = "enqueue" if label == "ztq" else "enqueue_any"
        out.append(Target(key, line, text, r, _met(r, r >= need)))
    for key, what in (("lat_p50", "p50"), ("lat_p99", "p99")):
        z, h, r = _ratio(results, key, "ztq", "huey")
        text = f"{fmt(z, 'ms')} / {fmt(h, 'ms')} ms"
        line = f"latency enqueue → start on an idle worker, {what}: <= 1.0x huey"
        out.append(Target(key, line, text, r, _met(r, r <= 1.0)))
    z = _med(results.get("bulk", {}).get("ztq", []))
    _, raw, r = _ratio(results, "bulk", "ztq", "raw RPUSH")
    text = f"{fmt(z, 'tasks/s')} tasks/s; raw `RPUSH` of the same ids {fmt(raw, 'tasks/s')}/s"
    line = "bulk enqueue (`transaction()`, 20,000): >= 60,000 tasks/s"
    out.append(Target("bulk", line, text + f" (ztq / RPUSH {fmt(r, '')})", z / 60_000,
                      _met(z, z >= 60_000)))  # fmt: skip
    z, w, r = _ratio(results, "drain1", "ztq", "ztq WARNING")
    text = f"{fmt(z, 'tasks/s')} at INFO / {fmt(w, 'tasks/s')} at WARNING tasks/s, 1 process"
    line = "drain at the default log level (INFO): >= 0.9x the drain at WARNING"
    out.append(Target("drain_log", line, text, r, _met(r, r >= 0.9)))
    for procs in (1, 2):
        key = f"drain{procs}"
        z = _med(results.get(key, {}).get("ztq", []))
        best_label, best = _best(results, key, labels)
        r = z / best if best else math.nan
        text = f"{fmt(z, 'tasks/s')} / {fmt(best, 'tasks/s')} tasks/s ({best_label})"
        line = f"drain at the default log level, {procs} process{'es' if procs > 1 else ''}: "
        out.append(Target("drain", line + ">= 2x the best peer", text, r, _met(r, r >= 2.0)))
    z = _med(results.get("mem", {}).get("ztq", []))
    out.append(Target("mem", "Redis memory per queued task: <= 200 B", f"{fmt(z, 'bytes')} B",
                      z / 200, _met(z, z <= 200)))  # fmt: skip
    flat, text = growth if growth is not None else (None, "not measured")
    line = ("cost growth: enqueue, fetch + ack, the slowest console page, deleting a queued "
            "task with 0 / 100k / 1M queued and 10k / 100k errors: flat")  # fmt: skip
    out.append(Target("growth", line, text, math.nan, flat))
    return out


def targets_table(ts: list[Target]) -> str:
    lines = ["| target | measured (medians) | ratio | met |", "|---|---|---|---|"]
    for t in ts:
        met = {None: "not measured", True: "yes", False: "**no**"}[t.met]
        ratio = "—" if math.isnan(t.ratio) else f"{t.ratio:.2f}"
        lines.append(f"| {t.line} | {t.measured} | {ratio} | {met} |")
    return "\n".join(lines)


GROWTH_FLAT = 1.5  # the most a cost may grow from the smallest case to the biggest: "flat"


def growth_verdict(results: dict[str, Any] | str | None) -> tuple[bool | None, str] | None:
    """(flat?, the ratios) from bench/growth.py's results: per task (enqueue, fetch + ack)
    and per page (the slowest) the biggest case's median over the empty queue's, and the
    Redis-side time of deleting one queued task at the tail of the biggest queue over the
    head's; None when it did not run."""
    if not isinstance(results, dict) or not results.get("scenarios"):
        return None
    sc = results["scenarios"]
    base = next((x for x in sc if x["queued"] == 0 and x["errors"] == 0), sc[0])
    ratios: dict[str, float] = {}
    for key, what in (("enqueue_us", "enqueue"), ("fetch_ack_us", "fetch + ack"),
                      ("slowest", "slowest page")):  # fmt: skip
        worst = max(sc, key=lambda x: x[key]["median"])
        ratios[f"{what} ({worst['name']})"] = worst[key]["median"] / base[key]["median"]
    big = max((x for x in sc if "delete" in x), key=lambda x: x["queued"], default=None)
    if big is not None:
        d = big["delete"]
        ratios[f"delete tail / head ({big['name']}, Redis)"] = d["tail"]["redis"]["median"] / max(
            d["head"]["redis"]["median"], 1.0
        )
    flat = all(r <= GROWTH_FLAT for r in ratios.values())
    text = "; ".join(f"{k} {v:.2f}x" for k, v in ratios.items())
    return flat, f"{text} (flat: each <= {GROWTH_FLAT}x the smallest case)"
