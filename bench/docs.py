"""Writes ``docs/benchmarks.md``: machine, versions, settings, the table, profiles, misses."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import write_section
from bench.console import RouteTimes
from bench.profile import Profiles
from bench.report import (
    Row,
    Target,
    fmt,
    sleep_median,
    sleep_ratios,
    sleep_table,
    table,
    targets_table,
)

FRAME = re.compile(r"^[\s|`-]*(\d+\.\d+)\s+(\S+)")  # a pyinstrument text frame: time, name
COMMAND = "make bench    # = .venv/bin/python -m bench.run (creates .venv-bench on first use)"

# Why ztq misses a target of issue 12 (report.Target.key), what was tried, what it would
# take; numbers in braces come from this run's profiles.
WHY = {
    "enqueue": (
        "One enqueue is one round trip, as one huey enqueue is one `LPUSH` ({rt_lpush} µs "
        "here through redis-py; an empty `EVALSHA` {rt_eval} µs, best of 5 rounds, the "
        "machine's noise included); then the `enqueue` function runs {enqueue_us} µs in Redis "
        "(`INFO commandstats`; huey's `LPUSH` about 1 µs): the dedup lookup, the queue's "
        "limits, the hand-over to a waiting executor, the record, the ready list, the wake "
        "token. Built for this issue: the call goes out as one prebuilt command on a "
        "connection its thread holds (taking a pooled connection and giving it back was a "
        "fifth of the call: 0.73 to 0.87x huey in interleaved runs), as a Redis 7 function "
        "(`FCALL`: `_lib.lua` is not run again on every call, a quarter less Redis time), "
        "reading the task's record and the ready lists' leftover counts in one `HMGET`, "
        "with the JSON encoder built once. ztq's client now spends less CPU per call than "
        "huey's (about 30 µs less, measured with `time.process_time`); what is left is the "
        "script's Redis time, which adds to every round trip. A call here took {call_us} µs. "
        "To reach huey, the script would have to cost about what an `LPUSH` costs, that is "
        "no dedup lookup and no state record: what ztq is for. Where the function's time "
        "goes, from cut-down copies of it run one call at a time: about a quarter is the "
        "call itself (an empty function given the same 18 keys and 7 arguments; 5 keys "
        "instead of 18 would save under 2 µs), an eighth the reads every call makes (the "
        "clock, the queue's settings, its waiting executor), the rest the task's own reads "
        "and writes. A perf profile of Redis running one enqueue at a time puts 44% of its "
        "CPU in the kernel (socket, event loop), 24% in the Lua VM (10 points of it in "
        "Lua's garbage collector) and spreads the rest over Redis's command path: no hot "
        "spot."
    ),
    "enqueue_any": (
        "The same path as with dedup: a random id (16 random bytes in hex) saves the "
        "canonical JSON and the MD5 (about 2 µs of a call) but not the script or the round "
        "trip."
    ),
    "bulk": (
        "`transaction()` sends one `enqueue` function call per chunk of 500 tasks of a queue, "
        "each written to the socket as soon as it is framed; Redis spends {bulk_us} µs per "
        "call ({bulk_redis_ms} ms of the 20,000), with the wake tokens pushed once per call. "
        "A transaction writes at its end, so the client's work before it (a call and a "
        "handle per task: the second profile) cannot overlap Redis's. Built for this issue: "
        "arguments framed as one string, the C JSON encoder built once, connections and "
        "queues looked up once per transaction, plain tuples for the script's arguments "
        "(client time per task with Redis's replies faked: 12.0 to 10.1 µs). Tried and "
        "dropped: building each chunk while Redis runs the previous one (no gain measured). "
        "A raw pipelined `RPUSH` of the same ids is the floor of one connection."
    ),
    "growth": (
        "The figures are bench/growth.py's (its section above); a page that reads a bigger "
        "queue costs more (O(page) plus the counts), and a cost counts as flat up to 1.5x."
    ),
    "drain_log": (
        "The run line is one tuple handed to ztq's log handler (no `LogRecord`), formatted "
        "and written every 0.1 s by its thread; what is left is that formatting and the "
        "tuple: the drain loop spends {log_share} of its time in `LogRuns.after_run`. The "
        "spread of the drains on this shared machine is as large as the gap."
    ),
    "drain": "",
    "lat_p50": (
        "Another change of issue 12 hands a task to a waiting idle executor in the enqueue "
        "script itself (one round trip); see docs/design.md for that path."
    ),
    "lat_p99": "Same path as p50; the tail is scheduling noise on a 2-core machine.",
    "mem": (
        "Each queued task is one field of the queue's `tasks` hash (the 32-character id, then "
        "the bare enqueue time and the payload list `[task, args]`: docs/design.md, *The "
        "record*) plus the id again in a `ready` list. What is left is this layout's floor: "
        "the id twice (hash field and list entry, about 75 B with their headers), the hash "
        "entry (24 B plus its bucket) and the record's allocation (64 B for the benchmark's "
        "no-op). Less needs ids stored as 16 raw bytes (about 30 B less), a change of the key "
        "layout and of every script."
    ),
}


# Why a configuration of the asyncio measure has a tail (its last 10% took longer than the rest).
SLEEP_WHY = {
    "ztq threads": (
        "The executor threads of a ztq worker share one redis-py client, whose connection pool "
        "holds at most 100 connections (redis-py 8's default): the worker log fills with `Too "
        "many connections`, so only about 100 of the 200 threads run tasks (the others back "
        "off, up to 5 s between tries), and the tasks whose ack could not be sent wait for "
        "their lease (15 s) to expire and run again."
    ),
}


@dataclass
class Context:
    machine: dict[str, str]
    versions: dict[str, str]
    settings: list[tuple[str, ...]]  # label, 1 process, 2 processes
    sizes: list[str]
    rows: list[Row]
    labels: list[str]
    profiles: Profiles | None
    console: list[RouteTimes] | str
    failures: list[str] = field(default_factory=list)
    elapsed: float = 0.0
    reps: int = 0
    sleep: dict[str, Any] | None = None  # the asyncio sleep measure: sizes, settings
    sleep_results: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    targets: list[Target] = field(default_factory=list)
    growth: dict[str, Any] | str = "Not run."  # bench/growth.py's results


def _why(key: str, ctx: Context) -> str:
    p = ctx.profiles
    values = {
        "enqueue_us": f"{p.script_us.get('enqueue (one by one)', math.nan):.1f}" if p else "?",
        "bulk_us": f"{p.script_us.get('enqueue (transaction)', math.nan):.1f}" if p else "?",
        "bulk_redis_ms": _redis_ms(p, "enqueue (transaction)"),
        "warn_rate": fmt(p.drain_rate_warning, "tasks/s") if p else "?",
        "info_rate": fmt(p.drain_rate_info, "tasks/s") if p else "?",
        "log_share": _share(p.drain_tree, "LogRuns.after_run") if p else "?",
        "call_us": _call_us(p),
        "rt_lpush": f"{p.round_trip_us.get('LPUSH', math.nan):.0f}" if p else "?",
        "rt_eval": (
            f"{p.round_trip_us.get('EVALSHA of an empty script', math.nan):.0f}" if p else "?"
        ),
    }
    return WHY.get(key, "").format(**values)


def _call_us(p: Profiles | None) -> str:
    """µs per one-by-one enqueue without the profiler (the profile's own run)."""
    return f"{1e6 / p.enqueue_rate_plain:.0f}" if p and p.enqueue_rate_plain else "?"


def _redis_ms(p: Profiles | None, name: str) -> str:
    """Redis time of all the calls of one profiled script, in ms."""
    if p is None or name not in p.script_us:
        return "?"
    return f"{p.script_us[name] * p.script_calls.get(name, 0) / 1000:.0f}"


def _share(tree: str, name: str) -> str:
    """The share of the root time spent in the first frame called ``name`` of a tree."""
    total = part = None
    for line in tree.splitlines():
        m = FRAME.match(line)
        if m is None:
            continue
        seconds = float(m.group(1))
        if total is None:
            total = seconds
        if m.group(2) == name and part is None:
            part = seconds
    if not total or part is None:
        return "?"
    return f"{100 * part / total:.0f}%"


def render(ctx: Context) -> str:
    m = ctx.machine
    out = [
        "# Benchmarks: ztq against RQ, huey, dramatiq, Celery and arq",
        "",
        "Written by `make bench` (`bench/run.py`); do not edit by hand. Reproduce with:",
        "",
        "```sh",
        COMMAND,
        "```",
        "",
        "ztq against its own earlier commits (a git ref, the tree and the ref side by side): "
        "section *Against ztq's own past* (`bench/past/`, also `make bench-quick`).",
        "",
        "## Machine and versions",
        "",
        f"- {m['nproc']} CPUs: {m['cpu']}; {m['os']}; load average (1, 5, 15 min) at the "
        f"start {m.get('load_start', '?')}, at the end {m['load']} (the machine is shared: "
        "other test runs may overlap a benchmark; the interleaving spreads that over all "
        "libraries)",
        f"- Python {m['python']}; Redis {m['redis']} (a private `redis-server` started by the "
        "run, no persistence); every library uses the same redis-py with hiredis",
        "- " + ", ".join(f"{k} {v}" for k, v in ctx.versions.items()),
        f"- ztq code measured: the tree of commit {m.get('code_start', '?')} (last change to "
        "core/, worker/, console/)"
        + (
            ""
            if m.get("code_start") == m.get("code_end")
            else f" at the start, {m.get('code_end', '?')} at the end (the code changed "
            "during the run: later measurements ran newer code)"
        ),
        f"- total run time {ctx.elapsed / 60:.1f} min; {ctx.reps} repetitions, peers interleaved "
        "(the order rotates each repetition)",
        "",
        "## Settings",
        "",
        "| library | 1 process | 2 processes |",
        "|---|---|---|",
        *(f"| {label} | {one} | {two} |" for label, one, two in ctx.settings),
        "",
        *(f"- {line}" for line in ctx.sizes),
        "",
        "## Results",
        "",
        "Each cell: median (min–max) over the repetitions. *ztq / best peer* divides ztq's "
        "median by the best peer's (for rates higher is better, for times and bytes lower "
        "is better; lateness compares absolute values, negative lateness = ran early). "
        "'—' = not measured or never finished.",
        "",
        table(ctx.rows, ctx.labels),
        "",
        *_targets_section(ctx),
    ]
    out += _console_section(ctx.console)
    out += _growth_section(ctx.growth)
    out += _asyncio_section(ctx)
    out += _profile_section(ctx.profiles)
    misses = [t for t in ctx.targets if t.met is False]
    out += ["## Targets missed", ""]
    if not misses:
        out += ["None in this run.", ""]
    for t in misses:
        ratio = "" if math.isnan(t.ratio) else f", ratio {t.ratio:.2f}"
        out += [f"- **{t.line}**: {t.measured}{ratio}. {_why(t.key, ctx)}"]
    out.append("")
    if ctx.failures:
        out += ["## Runs that failed", "", *(f"- {f}" for f in ctx.failures), ""]
    return "\n".join(out)


def _growth_section(growth: dict[str, Any] | str) -> list[str]:
    if isinstance(growth, str):
        return ["## How cost grows", "", growth, ""]
    from bench.growth import section

    return [section(growth).rstrip("\n"), ""]


def _targets_section(ctx: Context) -> list[str]:
    return [
        "## Targets",
        "",
        "Issue 12's targets, each from this run's medians (the peers and the references "
        "interleaved). *ratio*: ztq / huey for enqueue and latency; the bulk rate / 60,000; "
        "the drain at INFO / the drain at WARNING; ztq's drain / the best peer's; the bytes "
        "/ 200. The spread of each median is in the table above.",
        "",
        targets_table(ctx.targets),
        "",
    ]


def _console_section(console: list[RouteTimes] | str) -> list[str]:
    out = ["## 7. The console at scale", ""]
    if isinstance(console, str):
        return [*out, console, ""]
    out += [
        "1,000,000 queued tasks (3 queues), 100,000 errors, 100 workers heartbeating every 3 s, "
        "10,000 history entries per queue, 10,000 log events; written in ztq's stored format "
        "by `bench/console.py`. Server time of each GET, in-process through WebTest, logged in "
        "as an operator. Target: every page <= 50 ms median.",
        "",
        "| route | status | median ms | p99 ms | <= 50 ms |",
        "|---|---|---|---|---|",
    ]
    for r in console:
        if r.ms:
            ok = "yes" if r.median <= 50 else "**no**"
            out.append(f"| `{r.path}` | {r.status} | {r.median:.1f} | {r.p99:.1f} | {ok} |")
        else:
            out.append(f"| `{r.path}` | {r.status} | — | — | **no** |")
    return [*out, ""]


def ideal(ctx: Context) -> float:
    s = ctx.sleep or {}
    return float(s.get("n", 0) * s.get("seconds", 0.0) / s.get("concurrency", 1))


def _asyncio_section(ctx: Context) -> list[str]:
    out = ["## 8. asyncio: tasks that sleep, on one worker process", ""]
    s, m = ctx.sleep, ctx.machine
    if not s or not ctx.sleep_results:
        return [*out, "Not run.", ""]
    n, seconds, conc = s["n"], s["seconds"], s["concurrency"]
    changed = m.get("code_start") != m.get("code_end")
    versions = ", ".join(f"{k} {ctx.versions.get(k, '?')}" for k in ("ztq", "arq", "redis"))
    out += [
        f"Issue 9: {n:,} tasks that each sleep {seconds} s are queued first (not timed), then "
        f"one worker process runs up to {conc} of them at once. Wall time: from starting the "
        "worker process (its start-up included) to the first progress poll (every 5 ms) that "
        f"sees none left; tasks/s = {n:,} / wall time; *first done* and *90% done*: until a "
        "poll first sees one finished, and at most 10% left. The ideal is "
        f"{n:,} × {seconds} s / {conc} = {ideal(ctx):.1f} s. Each "
        f"cell: median (min–max) of {ctx.reps} repetitions, configurations interleaved (the "
        "order rotates each repetition); INFO logging for ztq, as in the drain. This section "
        "alone: `.venv/bin/python -m bench.run --only asyncio` (rewrites only it).",
        "",
        f"Measured on {m['nproc']} CPUs ({m['cpu']}), load average at the start "
        f"{m.get('load_start', '?')}, at the end {m['load']}; Python {m['python']}, {versions}; "
        f"ztq code of commit {m.get('code_start', '?')}"
        + (f" (at the end {m.get('code_end')})" if changed else "")
        + ".",
        "",
        sleep_table(ctx.sleep_results, s["settings"], ideal(ctx)),
        "",
    ]
    for label, ratio in sleep_ratios(ctx.sleep_results).items():
        out.append(
            f"- ztq async against {label}: {fmt(ratio, '')}x as fast (the median wall time of "
            f"{label} / that of ztq async)"
        )
    for label, _ in s["settings"]:
        most, wall = (sleep_median(ctx.sleep_results, k, label) for k in ("most", "wall"))
        if wall > 2 * most:
            out.append(
                f"- {label}: 90% were done after {fmt(most, 's')} s, all after {fmt(wall, 's')} "
                "s. " + SLEEP_WHY.get(label, "")
            )
    out += [f"- failed: {f}" for f in ctx.failures if f.startswith("asyncio /")]
    for name in s.get("missing", []):
        out.append(
            f"- {name}: not measured, it is not installed in `.venv-bench` (`bench/env.py` "
            "installs it only where it fits beside the others' redis-py)"
        )
    return [*out, ""]


def _profile_section(p: Profiles | None) -> list[str]:
    if p is None:
        return []
    scripts = ", ".join(
        f"{name}: {us:.1f} µs × {p.script_calls[name]:,}" for name, us in p.script_us.items()
    )
    return [
        "## Where the time goes",
        "",
        "pyinstrument, in-process, on this run's Redis (`bench/profile.py`). The rates here are "
        "with the profiler attached, so lower than in the table.",
        "",
        f"- Redis server time per script call (`INFO commandstats`): {scripts}.",
        f"- enqueue one by one under the profiler: {p.enqueue_rate:,.0f}/s; "
        f"bulk: {p.bulk_rate:,.0f}/s.",
        f"- drain with one executor stepped in-process, no profiler: {p.drain_rate_info:,.0f}/s "
        f"with the worker's default INFO logging, {p.drain_rate_warning:,.0f}/s at WARNING.",
        f"- enqueue one by one without the profiler: {p.enqueue_rate_plain:,.0f}/s, "
        f"{1e6 / p.enqueue_rate_plain if p.enqueue_rate_plain else math.nan:.0f} µs a call, "
        f"of which {p.script_us.get('enqueue (one by one)', math.nan):.1f} µs in Redis (the "
        "script) and the rest in the client and the kernel.",
        f"- drain loop shares (third profile): the per-run INFO line (`LogRuns.after_run`) "
        f"{_share(p.drain_tree, 'LogRuns.after_run')}; waiting for Redis in `Executor.flush` (the "
        "`ack` + `fetch` pipeline, mostly Lua time in Redis) "
        f"{_share(p.drain_tree, 'Executor.flush')}; "
        f"`prepare` (payload decode, argument binding) {_share(p.drain_tree, 'prepare')}; "
        f"`encode_result` of `None` {_share(p.drain_tree, 'encode_result')}.",
        "- one round trip from ztq's client, best of 5 alternating rounds of 2,000: "
        + ", ".join(f"{k} {v:.0f} µs" for k, v in p.round_trip_us.items())
        + ".",
        "",
        "### enqueue, one call per task",
        "",
        "```",
        p.enqueue_tree,
        "```",
        "",
        "### enqueue, `transaction()` of 20,000",
        "",
        "```",
        p.bulk_tree,
        "```",
        "",
        "### drain, one executor (`Executor.step`), INFO logging as the CLI sets it",
        "",
        "```",
        p.drain_tree,
        "```",
        "",
    ]


def write(path: Path, ctx: Context) -> None:
    path.write_text(render(ctx), encoding="utf-8")


SECTIONS = {"asyncio": _asyncio_section}  # what ``run.py --only`` can rewrite alone
LATER = ("## Where the time goes", "## Targets missed")  # a new section goes before these


def update(path: Path, ctx: Context, name: str) -> None:
    """Rewrite one section of an existing report, from its heading to the next ``## ``;
    a section the report lacks goes before the profiles (where ``render`` puts it)."""
    new = SECTIONS[name](ctx)
    write_section(path, new[0], "\n".join(new), before=LATER)
