"""``make bench``: every measurement of issue 5 for ztq and its peers, into docs/benchmarks.md.

Run as ``python -m bench.run [--reps N] [--quick] [--skip-console] [--only asyncio]``.
Outside ``.venv-bench`` it builds that venv (first run) and re-executes itself inside it.
``--only SECTION`` measures one section of the report and rewrites only that section of
``--out`` (the rest of the file stays as the last full run wrote it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
import traceback
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import env
from bench.common import ROOT


@dataclass
class Plan:
    reps: int = 3
    enqueue_n: int = 5_000
    bulk_n: int = 20_000
    drain_n: int = 20_000
    drain_small: int = 1_000  # peers that drain under ~500 tasks/s
    drain_celery: int = 5_000
    latency_n: int = 500
    gap: float = 0.005
    delayed_n: int = 500
    lead: float = 2.0
    recovery_cap: float = 90.0
    console_reps: int = 30
    sleep_n: int = 10_000  # asyncio sleep measure (issue 9): tasks, each sleeping sleep_s
    sleep_s: float = 0.1

    def drain_size(self, label: str) -> int:
        if label in ("rq", "arq", "dramatiq"):
            return self.drain_small
        if label == "celery":
            return self.drain_celery
        return self.drain_n

    def lines(self) -> list[str]:
        return [
            f"enqueue one by one: {self.enqueue_n:,} no-op tasks with distinct arguments "
            f"(ztq deduplicates by id, so every task is a real one); bulk: {self.bulk_n:,} in "
            "one call of the bulk API (only ztq and RQ have one); memory: `used_memory` after "
            "the one-by-one run minus before, / N",
            f"drain: {self.drain_n:,} queued no-ops for ztq, huey and dramatiq p64; "
            f"{self.drain_celery:,} for Celery and {self.drain_small:,} for RQ, arq and "
            "dramatiq with its default prefetch (they drain at a few hundred per second; "
            "smaller runs keep `make bench` under 15 minutes, the rate is measured the same "
            "way). Timed from the first progress poll (every 5 ms) that sees <= 90% left to "
            "the first that sees none left: worker start-up is excluded",
            f"latency: {self.latency_n} stamp tasks {self.gap * 1000:.0f} ms apart to one idle "
            "worker (1 s after a warm-up task), clock from just before the enqueue call to the "
            "first line of the task body (`time.time()` in both processes)",
            f"delayed: {self.delayed_n} tasks due {self.gap * 1000:.0f} ms apart from "
            f"{self.lead:.0f} s after the enqueue started, each with the library's own "
            "eta/delay API; lateness = start - due. The run sends nothing to Redis from the "
            "first due time until 2 s after the last (an idle Redis fires BLPOP timeouts on "
            "its 100 ms cron; a client's polling would wake it sooner and flatter a library "
            "that sleeps in BLPOP)",
            "references, measured interleaved with the peers but not peers themselves: "
            "*ztq WARNING* drains with the same ztq worker at `--log-level warning` (what the "
            "default INFO level costs); *ztq unique=False* enqueues one by one a task declared "
            "`unique=False` (a random id: no canonical JSON, no MD5); *raw RPUSH* pushes the "
            f"ids of the bulk run's {self.bulk_n:,} tasks to one list in one redis-py pipeline "
            "(the floor of a bulk enqueue over one connection)",
            f"recovery: one run, all libraries at once (idle workers); worker A runs a task "
            "that sleeps, worker B idles, the process running the task gets SIGKILL; time "
            f"until B starts it, capped at {self.recovery_cap:.0f} s. ztq with its default "
            f"lease (15 s) and heartbeat (3 s), {self.reps} runs (the later ones ztq alone, "
            "the kill 8-11 s after B started, at random, so that the heartbeat phases vary)",
        ]


def quick_plan() -> Plan:
    return Plan(
        reps=1,
        enqueue_n=2_000,
        bulk_n=5_000,
        drain_n=5_000,
        drain_small=500,
        drain_celery=2_000,
        latency_n=100,
        delayed_n=100,
        recovery_cap=30.0,
        console_reps=5,
        sleep_n=2_000,
    )


def rotate(items: list[Any], n: int) -> list[Any]:
    k = n % len(items)
    return items[k:] + items[:k]


class Runner:
    def __init__(self, plan: Plan, logs: Path) -> None:
        self.plan = plan
        self.logs = logs
        self.results: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        self.failures: list[str] = []

    def attempt(
        self, what: str, label: str, fn: Callable[..., dict[str, float]], *args: Any
    ) -> dict[str, float]:
        t0 = time.monotonic()
        try:
            got = fn(*args)
        except Exception as exc:  # one peer failing must not sink the run
            self.failures.append(f"{what} / {label}: {exc}")
            traceback.print_exc()
            got = {}
        shown = ", ".join(f"{k}={v:,.2f}" for k, v in got.items())
        print(f"  {what:9s} {label:12s} {shown}  ({time.monotonic() - t0:.1f}s)", flush=True)
        return got

    def sleeps(self, rep: int, sleepers: list[tuple[Any, str]]) -> None:
        from bench import measures as m

        p = self.plan
        for peer, label in rotate(sleepers, rep):
            args = (peer, label, p.sleep_n, p.sleep_s, self.logs)
            got = self.attempt("asyncio", label, m.sleeps, *args)
            for key in ("wall", "rate", "first", "most"):
                self.put(f"sleep_{key}", label, got.get(key))

    def put(self, key: str, label: str, value: float | None) -> None:
        self.results[key][label].append(math.nan if value is None else value)

    def repetition(self, rep: int, peers: list[Any], drainers: list[Any]) -> None:
        from bench import measures as m
        from bench.peers.ztq_peer import AT_WARNING, NOT_UNIQUE

        p, logs = self.plan, self.logs
        for peer in rotate([*peers, NOT_UNIQUE], rep):
            got = self.attempt("enqueue", peer.label, m.enqueue_serial, peer, p.enqueue_n)
            self.put("enqueue", peer.label, got.get("rate"))
            self.put("mem", peer.label, got.get("mem"))
        for peer in rotate([*(x for x in peers if x.bulk_api), None], rep):
            if peer is None:  # the reference: the same ids, RPUSH in one pipeline
                got = self.attempt("bulk", "raw RPUSH", m.rpush_reference, peers[0], p.bulk_n)
                self.put("bulk", "raw RPUSH", got.get("rate"))
                continue
            got = self.attempt("bulk", peer.label, m.enqueue_bulk, peer, p.bulk_n)
            self.put("bulk", peer.label, got.get("rate"))
        for procs in (1, 2):
            for peer in rotate([*drainers, AT_WARNING], rep):
                n = p.drain_size(peer.label)
                got = self.attempt(f"drain{procs}", peer.label, m.drain, peer, n, procs, logs)
                self.put(f"drain{procs}", peer.label, got.get("rate"))
        for peer in rotate(peers, rep):
            got = self.attempt("latency", peer.label, m.latency, peer, p.latency_n, p.gap, logs)
            self.put("lat_p50", peer.label, got.get("p50"))
            self.put("lat_p99", peer.label, got.get("p99"))
        for peer in rotate(peers, rep):
            args = (peer, p.delayed_n, p.gap, p.lead, logs)
            got = self.attempt("delayed", peer.label, m.delayed, *args)
            for key in ("p50", "p99", "max"):
                self.put(f"late_{key}", peer.label, got.get(key))


SECTIONS = ("asyncio",)  # what --only can pick: the sections that stand alone in the report


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    ap.add_argument("--reps", type=int, help="repetitions (default 3)")
    ap.add_argument("--quick", action="store_true", help="1 repetition, small sizes (a smoke run)")
    ap.add_argument("--skip-console", action="store_true", help="leave point 7 out")
    ap.add_argument("--skip-growth", action="store_true", help="leave how cost grows out")
    ap.add_argument("--only", choices=SECTIONS, help="measure one section, rewrite only it")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    ap.add_argument("--render", metavar="RESULTS_JSON", help="only rewrite --out from a run")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    if not env.inside():
        env.ensure_venv()
        env.reexec_inside(argv)
    if args.render:
        render(json.loads(Path(args.render).read_text()), Path(args.out))
        return 0
    from ztq.worker.embedded import RedisProcess

    plan = quick_plan() if args.quick else Plan()
    if args.reps:
        plan.reps = args.reps
    started = time.monotonic()
    load_start = " ".join(f"{x:.2f}" for x in os.getloadavg())
    code_start = env.git_state()
    server = RedisProcess().start()
    os.environ["BENCH_REDIS"] = f"redis://127.0.0.1:{server.port}"
    logs = Path(tempfile.mkdtemp(prefix="ztq-bench-logs-"))
    print(f"bench: redis-server pid {server.pid} port {server.port}; worker logs in {logs}")
    try:
        return run(plan, args, logs, started, load_start, code_start)
    finally:
        server.cleanup()


def run(
    plan: Plan, args: argparse.Namespace, logs: Path, started: float, load: str, code: str
) -> int:
    from bench import peers
    from bench.common import SLEEP_CONCURRENCY, stamp_client
    from bench.peers.dramatiq_peer import PREFETCH_64

    names = [n for n in peers.MODULES if peers.available(n)]
    lineup = [peers.load(n) for n in names]
    drainers = [*lineup, PREFETCH_64]
    sleepers = [(peer, label) for peer in lineup for label in peer.sleep_pools]
    runner = Runner(plan, logs)
    for rep in range(plan.reps):
        print(f"bench: repetition {rep + 1} of {plan.reps}", flush=True)
        if not args.only:
            runner.repetition(rep, lineup, drainers)
        runner.sleeps(rep, sleepers)
    profiles, routes = (None, "Not run (`--only`).") if args.only else rest(runner, lineup, args)
    growth: dict[str, Any] | str = "Not run (`--only`)."
    if not args.only and not args.skip_growth:
        print("bench: how cost grows (bench/growth.py)", flush=True)
        growth = growth_run()
    info = stamp_client().info("server")
    dump: dict[str, Any] = {
        "only": args.only,
        "results": {k: dict(v) for k, v in runner.results.items()},
        "labels": [p.label for p in drainers],
        "never": {"recovery": f"not in {plan.recovery_cap:.0f} s"},
        "machine": {
            **env.machine(str(info["redis_version"])),
            "load_start": load,
            "code_start": code,
            "code_end": env.git_state(),
        },
        "versions": env.versions(),
        "settings": [(p.label, p.setting_1, p.setting_2) for p in drainers],
        "sizes": plan.lines(),
        "sleep": {
            "n": plan.sleep_n,
            "seconds": plan.sleep_s,
            "concurrency": SLEEP_CONCURRENCY,
            "settings": [(label, peer.sleep_pools[label]) for peer, label in sleepers],
            "missing": [n for n in env.OPTIONAL if n not in names],
        },
        "profiles": None if profiles is None else dataclasses.asdict(profiles),
        "growth": growth,
        "console": routes if isinstance(routes, str) else [dataclasses.asdict(r) for r in routes],
        "failures": runner.failures,
        "elapsed": time.monotonic() - started,
        "reps": plan.reps,
    }
    saved = logs / "results.json"
    saved.write_text(json.dumps(dump, indent=1))
    render(dump, Path(args.out))
    if not runner.failures:  # worker logs are tens of MB of per-task lines: keep them on failure
        for log_file in logs.glob("*.log"):
            log_file.unlink()
    print(f"bench: raw numbers in {saved} (re-render with --render {saved})")
    return 0


def rest(runner: Runner, lineup: list[Any], args: argparse.Namespace) -> tuple[Any, Any]:
    """Recovery, the profiles and the console: once each, after the repetitions."""
    from bench import console, measures, profile
    from bench.peers.ztq_peer import ZtqPeer

    plan, logs = runner.plan, runner.logs
    print("bench: recovery after SIGKILL (all libraries at once)", flush=True)
    got = runner.attempt("recovery", "all", measures.recovery, lineup, logs, plan.recovery_cap)
    for peer in lineup:
        runner.put("recovery", peer.label, got.get(peer.name))
    for _ in range(1, plan.reps):  # ztq alone again: its result depends on timer phases
        settle = 8.0 + random.uniform(0.0, 3.0)
        more = runner.attempt("recovery", "ztq", measures.recovery, lineup[:1], logs, 30.0, settle)
        runner.put("recovery", "ztq", more.get("ztq"))
    print("bench: profiling ztq", flush=True)
    ztq_peer = lineup[0]
    assert isinstance(ztq_peer, ZtqPeer)
    profiles = None
    try:
        profiles = profile.run(ztq_peer, plan.enqueue_n, plan.bulk_n, plan.drain_n)
    except Exception as exc:
        runner.failures.append(f"profile: {exc}")
        traceback.print_exc()
    routes: list[console.RouteTimes] | str = "Not run (`--skip-console`)."
    if not args.skip_console:
        print("bench: console at scale (filling Redis)", flush=True)
        routes = console_at_scale(plan.console_reps, logs)
    return profiles, routes


def console_at_scale(reps: int, logs: Path) -> list[Any] | str:
    """Point 7 in a fresh process (``python -m bench.console``) on database 7."""
    from bench.console import RouteTimes

    out = logs / "console.json"
    url = f"{os.environ['BENCH_REDIS']}/7"
    cmd = [sys.executable, "-m", "bench.console", url, str(reps), str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"Not measured: the console failed ({last})."
    return [RouteTimes(**r) for r in json.loads(out.read_text())]


def growth_run() -> dict[str, Any] | str:
    """The cost-growth section (``bench/growth.py``, issue 12) on database 8 of this run's
    Redis; a text when it is missing or failed."""
    try:
        from bench import growth
    except ImportError:
        return "Not measured: bench/growth.py is not there."
    try:
        results: dict[str, Any] = growth.run(url=f"{os.environ['BENCH_REDIS']}/8")
    except Exception as exc:  # its failure must not sink the report
        traceback.print_exc()
        return f"Not measured: bench/growth.py failed ({exc})."
    return results


def render(dump: dict[str, Any], out: Path) -> None:
    """Write the report from the plain numbers of a run (``results.json``)."""
    from bench import docs, report
    from bench.console import RouteTimes
    from bench.profile import Profiles

    labels = dump["labels"]
    rows = report.rows(dump["results"], labels, dump["never"])
    console = dump["console"]
    ctx = docs.Context(
        machine=dump["machine"],
        versions=dump["versions"],
        settings=[tuple(x) for x in dump["settings"]],
        sizes=dump["sizes"],
        rows=rows,
        labels=labels,
        profiles=None if dump["profiles"] is None else Profiles(**dump["profiles"]),
        console=console if isinstance(console, str) else [RouteTimes(**r) for r in console],
        failures=dump["failures"],
        elapsed=dump["elapsed"],
        reps=dump["reps"],
        sleep=dump.get("sleep"),
        sleep_results={k: v for k, v in dump["results"].items() if k.startswith("sleep_")},
        targets=report.targets(dump["results"], labels, report.growth_verdict(dump.get("growth"))),
        growth=dump.get("growth") or "Not run.",
    )
    if dump.get("only"):
        docs.update(out, ctx, dump["only"])
    else:
        docs.write(out, ctx)
        print(report.table(rows, labels))
    if ctx.sleep:
        print(report.sleep_table(ctx.sleep_results, ctx.sleep["settings"], docs.ideal(ctx)))
    print(f"bench: wrote {out} ({dump['elapsed'] / 60:.1f} min of measuring)")


if __name__ == "__main__":
    sys.exit(main())
