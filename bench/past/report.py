"""The figures of a ``bench.past`` run, and the tables it prints and writes to the docs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from bench.common import median
from bench.past.plan import Figure

HEADING = "## Against ztq's own past"
SIDES = ("ref", "tree")
# where a report without the section gets it: beside the peers' tables, before these
BEFORE = ("## Producers", "## Where the time goes", "## Targets missed")


@dataclass
class Results:
    """Each side's value of each figure per repetition (None: not measured), why a figure is
    n/a on a side, and the order the driver calls ran in."""

    reps: int
    values: dict[str, dict[str, list[float | None]]] = field(default_factory=dict)
    na: dict[str, dict[str, str]] = field(default_factory=dict)
    order: list[tuple[int, str, str]] = field(default_factory=list)  # (rep, measure, side)
    failures: list[str] = field(default_factory=list)

    def put(self, side: str, rep: int, key: str, value: float | None) -> None:
        row = self.values.setdefault(side, {}).setdefault(key, [None] * self.reps)
        row[rep] = None if value is None or math.isnan(value) else float(value)

    def why(self, side: str, key: str, reason: str) -> None:
        self.na.setdefault(side, {}).setdefault(key, reason)

    def got(self, side: str, key: str) -> list[float]:
        return [v for v in self.values.get(side, {}).get(key, []) if v is not None]

    def value(self, side: str, key: str) -> float | None:
        got = self.got(side, key)
        return median(got) if got else None

    def ratios(self, key: str) -> list[float]:
        """tree / ref of each repetition that has both (the runs of one repetition ran one
        after the other: paired)."""
        ref = self.values.get("ref", {}).get(key, [])
        tree = self.values.get("tree", {}).get(key, [])
        return [t / r for r, t in zip(ref, tree, strict=False) if r and t is not None]


def number(value: float | None, fig: Figure) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{fig.digits}f}"


def ratio(res: Results, fig: Figure) -> str:
    got = res.ratios(fig.key)
    if not got:
        return "n/a"
    text = f"{median(got):.2f}×"
    if len(got) > 1:
        text += f" ({min(got):.2f}–{max(got):.2f})"
    return text


def tables(res: Results, figures: list[Figure], ref_label: str) -> list[str]:
    """One table per group of figures: ref, tree, tree / ref, and which way is better."""
    lines: list[str] = []
    groups = list(dict.fromkeys(f.group for f in figures))
    for group in groups:
        rows = [f for f in figures if f.group == group]
        unit = rows[0].unit if len({f.unit for f in rows}) == 1 else ""
        lines += [
            f"### {group}{f' ({unit})' if unit else ''}",
            "",
            f"| figure | ref {ref_label} | tree | tree / ref | better |",
            "|---|---|---|---|---|",
        ]
        for fig in rows:
            shown = fig.row if unit else f"{fig.row} ({fig.unit})"
            ref, tree = res.value("ref", fig.key), res.value("tree", fig.key)
            lines.append(
                f"| {shown} | {number(ref, fig)} | {number(tree, fig)} | {ratio(res, fig)} | "
                f"{fig.better} |"
            )
        lines.append("")
    return lines


def notes(res: Results, figures: list[Figure]) -> list[str]:
    """Why each n/a is n/a, one line per side and reason."""
    names = {f.key: f"{f.group}: {f.row}" for f in figures}
    out = []
    for side in SIDES:
        reasons: dict[str, list[str]] = {}
        for key, why in res.na.get(side, {}).items():
            reasons.setdefault(why, []).append(names.get(key, key))
        for why, keys in reasons.items():
            out.append(f"- n/a on the {side}: {', '.join(keys)} ({why})")
    return out


HOW = [
    "`make bench` runs this after the peers; alone: `make bench-past` (full, about 10 minutes on 2 "
    "cores) or `make bench-quick` (a few minutes), with `REF=...` to pick the ref; or "
    "`python -m bench.past [--quick] [--ref REF] [--reps N] [--out docs/benchmarks.md]`. "
    "The ref is the last release tag when the repo has one, else the commit `bench/BASELINE` "
    "names; `--ref HEAD~1` measures the last commit's change. A change to a hot path "
    "(enqueue, fetch, ack, the scripts, the executors) shows this table in its closing note. "
    "`--python-ref PY` (or `--python-tree PY`) measures the ztq another python imports, an "
    "installed release say, instead of building a venv; `--json FILE` keeps every "
    "repetition's figures; `--tiny` only checks that the tool works (the suite runs it: "
    "tests/test_bench_past.py).",
    "",
    "How: the working tree (its package files as they are on disk, uncommitted ones "
    "included) and the ref (`git archive`) each get a venv of their own, cached in "
    "`.venv-bench-past/` by a digest of the files (a rebuild only when the package files "
    "change); both read the same third-party packages from one shared venv, so redis-py "
    "and hiredis are the same on both sides. Each side talks to a redis-server of its own "
    "(same binary, same settings, never the one on 6379). Every measure is a small driver "
    "(`bench/past/driver.py`) run by that side's python, using only the APIs every ztq has "
    "had; what one side cannot do is n/a, with the reason below the tables. The sides take "
    "turns measure by measure (ref then tree, tree then ref the next repetition), so the "
    "load of a shared machine falls on both alike. A side's figure is the median of its "
    "repetitions; tree / ref is the median of each repetition's ratio (min–max in "
    "brackets), and *better* says which way is good for that figure.",
    "",
    "The figures: **enqueue**: 1, 8 and 32 threads share the run's no-op `delay()` calls, "
    "one call per task, each thread its share (100 coroutines of one event loop with "
    "`adelay()`): tasks/s over the wall time, and the p50 and p99 of one call. **Drain**: "
    "the run's no-ops queued (in `transaction()`s), then one fresh worker process "
    "(`python -m ztq.worker --queue default:N`, 1 and 4 threads, INFO logging as shipped) "
    "empties the queue: tasks/s from the first progress poll (every 5 ms) that sees 90% or "
    "less left to the first that sees none, so start-up is not counted. **Latency**: tasks "
    "sent a few ms apart to one idle worker with one thread; from just before the enqueue "
    "call to the first line of the task (`time.time()` in both processes). **Memory**: "
    "Redis's `used_memory` after the 1-thread enqueue run minus before it, per task (what "
    "one queued task costs Redis: its record and its place in the ready list). "
    "**Console**: the console of each tree (WebTest, in the driver's process, logged in as "
    "an operator) on a Redis holding the run's queued tasks and failed tasks (run by a "
    "worker, then stopped): the median time of each page.",
]


def brief(subject: str, most: int = 72) -> str:
    """A commit's subject as the report names it (this repo's subjects run to paragraphs)."""
    return subject if len(subject) <= most else subject[: most - 1].rstrip() + "…"


def busy(meta: dict[str, Any]) -> list[str]:
    """A warning when the machine had more runnable work than cores during the run."""
    cores = int(meta["machine"]["nproc"])
    loads = [float(meta[k].split()[0]) for k in ("load_start", "load_end")]
    if max(loads) <= cores:
        return []
    return [
        f"**The machine was busy** (load average above its {cores} cores): other jobs "
        "weighed on both sides alike, but the min–max ranges are wide; measure again on a "
        "quiet machine before reading a ratio within 20% of 1.",
        "",
    ]


def section(res: Results, figures: list[Figure], meta: dict[str, Any]) -> str:
    """The section ``HEADING`` of docs/benchmarks.md (also what the run prints)."""
    ref, m = meta["ref"], meta["machine"]
    sides = meta["sides"]
    lines = [
        HEADING,
        "",
        *HOW,
        "",
        f"Last run ({meta['mode']} mode, {meta['plan']}): **ref** {ref['short']} "
        f"({ref['why']}: {brief(ref['subject'])}) against the **tree** ({meta['tree']}), on this "
        f"{m['nproc']}-core machine ({m['cpu']}, Python {m['python']}, Redis {m['redis']}); "
        f"load average {meta['load_start']} at the start, {meta['load_end']} at the end; "
        f"{meta['elapsed'] / 60:.1f} min. redis-py {sides['ref'].get('redis', '?')} / "
        f"{sides['tree'].get('redis', '?')}, hiredis {sides['ref'].get('hiredis', '?')} / "
        f"{sides['tree'].get('hiredis', '?')} (ref / tree).",
        "",
        *busy(meta),
        *tables(res, figures, ref["short"]),
    ]
    found = notes(res, figures)
    if found:
        lines += [*found, ""]
    if res.failures:
        lines += ["Failures (their figures are n/a):", ""]
        lines += [f"- {f}" for f in res.failures] + [""]
    return "\n".join(lines)
