"""``python -m bench.past``: the working tree against a git ref, interleaved, as ratios.

    python -m bench.past [--ref REF] [--quick | --tiny] [--reps N] [--out docs/benchmarks.md]

The ref defaults to the last release tag, else the commit bench/BASELINE names. Each side
gets its own venv (``bench/past/venvs.py``) and its own redis-server; every measure runs as
``python -m bench.past.driver`` in that side's venv, ref and tree taking turns (the order
swapped each repetition). Prints one table per group of figures (ref, tree, tree / ref, which
way is better) and the load average at the start and the end; ``--out`` rewrites the section
"Against ztq's own past" of that file, the rest kept.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from bench import env
from bench.common import write_section
from bench.past import plan as plans
from bench.past import report, venvs
from bench.past.plan import Measure, Plan
from bench.past.report import Results

HERE = Path(__file__).resolve().parent


@dataclass
class Side:
    name: str  # "ref" or "tree"
    python: Path
    url: str = ""


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.past",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ref = "the git ref to compare with (default: the last release tag, else bench/BASELINE)"
    ap.add_argument("--ref", help=ref + "; HEAD~1 measures the last commit's change")
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="2 repetitions, small sizes")
    tiny = "the smallest sizes: checks that the tool works, measures nothing"
    size.add_argument("--tiny", action="store_true", help=tiny)
    ap.add_argument("--reps", type=int, help="repetitions (default 5, --quick 2)")
    ap.add_argument("--out", help="rewrite the section 'Against ztq's own past' of this file")
    ap.add_argument("--json", help="also write the raw figures, per side and repetition, here")
    given = "the ztq this python imports is the %s (instead of a venv built for it)"
    ap.add_argument("--python-ref", help=given % "ref")
    ap.add_argument("--python-tree", help=given % "tree")
    deps = "read the third-party packages from this venv (default: one built in the cache)"
    ap.add_argument("--deps-venv", help=deps)
    ap.add_argument("--cache", default=str(venvs.CACHE), help="where the venvs are kept")
    ap.add_argument(
        "--render",
        metavar="RAW_JSON",
        help="measure nothing: print (and --out) the tables of a run saved with --json",
    )
    args = ap.parse_args(argv)
    if args.reps is not None and args.reps < 1:
        ap.error(f"--reps must be 1 or more, not {args.reps}")
    return args


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def given(path: str | None, option: str) -> Path | None:
    """A python named on the command line (absolute: the drivers run in another folder)."""
    if path is None:
        return None
    python = Path(path).absolute()  # not resolve(): a venv's python is a symlink
    if not (python.is_file() and os.access(python, os.X_OK)):
        raise venvs.BuildError(f"{option} {path}: not an executable file")
    return python


def prepare_sides(args: argparse.Namespace, commit: venvs.Commit | None) -> dict[str, Side]:
    """Each side's python: given, or its venv (built on first use)."""
    cache = Path(args.cache).absolute()
    ref = given(args.python_ref, "--python-ref")
    tree = given(args.python_tree, "--python-tree")
    if ref is None or tree is None:
        deps_venv = Path(args.deps_venv).absolute() if args.deps_venv else None
        deps = venvs.deps_from(deps_venv) if deps_venv else venvs.ensure_deps(cache)
        if ref is None:
            assert commit is not None  # name_sides resolved it: no python was given for it
            ref = venvs.venv_for_commit(commit, deps, cache)
        tree = tree or venvs.venv_for_tree(deps, cache)
    return {"ref": Side("ref", ref), "tree": Side("tree", tree)}


def run_dir() -> Path:
    """The drivers' folder: ``bench/past/{driver,tasks}.py`` and ``bench/common.py`` alone,
    so that a side's python imports nothing of this tree but them."""
    home = Path(tempfile.mkdtemp(prefix="ztq-bench-past-"))
    (home / "bench" / "past").mkdir(parents=True)
    (home / "bench" / "__init__.py").write_text("")
    (home / "bench" / "past" / "__init__.py").write_text("")
    shutil.copy2(HERE.parent / "common.py", home / "bench" / "common.py")
    for name in ("driver.py", "tasks.py"):
        shutil.copy2(HERE / name, home / "bench" / "past" / name)
    return home


def call(side: Side, args: dict[str, Any], home: Path, timeout: float) -> dict[str, Any]:
    """One driver call; a crash or a timeout comes back as n/a with the reason."""
    a = {**args, "url": side.url, "log": str(home / f"worker-{side.name}.log")}
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ZTQ_")}
    env_ = {**clean, "PYTHONPATH": str(home), "PYTHONDONTWRITEBYTECODE": "1"}
    log = home / f"driver-{side.name}.log"
    cmd = [str(side.python), "-m", "bench.past.driver", json.dumps(a)]
    with open(log, "ab") as err:
        proc = subprocess.Popen(
            cmd, cwd=home, env=env_, stdout=subprocess.PIPE, stderr=err, start_new_session=True
        )
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the driver and the worker it started
            proc.wait()
            return {"na": {"*": f"failed: timed out after {timeout:.0f} s"}, "failed": True}
    lines = out.decode(errors="replace").strip().splitlines()
    try:
        got: dict[str, Any] = json.loads(lines[-1])
    except (IndexError, ValueError):
        why = f"failed: the driver exited {proc.returncode} without a result, see {log}"
        return {"na": {"*": why}, "failed": True}
    return got


def record(res: Results, rep: int, side: str, m: Measure, got: dict[str, Any]) -> str:
    """Put one call's values in ``res``; what to print of it."""
    na = got.get("na", {})
    for name, fig in m.figures.items():
        value = got.get("values", {}).get(name)
        res.put(side, rep, fig.key, value)
        if value is None:
            res.why(side, fig.key, na.get(name) or na.get("*") or "not measured")
    if got.get("failed"):
        res.failures.append(f"{m.name} on the {side}, repetition {rep + 1}: {na.get('*')}")
    shown = [f"{k}={v:,.3g}" for k, v in got.get("values", {}).items()]
    shown += [f"{k}: n/a ({v})" for k, v in na.items()]
    return ", ".join(shown)


def measure(p: Plan, sides: dict[str, Side], home: Path, res: Results) -> None:
    for rep in range(p.reps):
        order = list(report.SIDES) if rep % 2 == 0 else list(reversed(report.SIDES))
        print(f"bench.past: repetition {rep + 1} of {p.reps} ({' then '.join(order)})", flush=True)
        for m in plans.measures(p):
            for name in order:
                t0 = time.monotonic()
                got = call(sides[name], m.args, home, m.timeout)
                res.order.append((rep, m.name, name))
                shown = record(res, rep, name, m, got)
                took = time.monotonic() - t0
                print(f"  {m.name:16s} {name:4s} {shown}  ({took:.1f}s)", flush=True)


def name_sides(args: argparse.Namespace) -> tuple[dict[str, str], str, venvs.Commit | None]:
    """How the report names the ref and the tree, and the ref's commit (None when a python
    was given for it)."""
    if args.python_ref:
        given = f"the ztq {args.python_ref} imports"
        return {"short": "given", "why": "--python-ref", "subject": given}, "", None
    ref, why = (args.ref, "--ref") if args.ref else venvs.default_ref()
    commit = venvs.resolve(ref)
    tree = f"the ztq {args.python_tree} imports" if args.python_tree else venvs.describe_tree()
    return {"short": commit.short, "why": why, "subject": commit.subject}, tree, commit


def run(p: Plan, sides: dict[str, Side], home: Path, res: Results) -> dict[str, Any]:
    """Start a redis-server per side, probe both, measure; what the probes and Redis said."""
    from ztq.worker.embedded import RedisProcess

    servers = [RedisProcess(die_with_parent=True) for _ in sides]
    try:
        for side, server in zip(sides.values(), servers, strict=True):
            server.start()
            side.url = f"redis://127.0.0.1:{server.port}"
        probes = {name: call(side, {"what": "probe"}, home, 120) for name, side in sides.items()}
        for name, got in probes.items():
            print(f"  {name}: {got.get('values') or got.get('na')}", flush=True)
        measure(p, sides, home, res)
        with redis.Redis.from_url(sides["tree"].url) as client:
            version = str(client.info("server")["redis_version"])
    finally:
        for server in servers:
            server.cleanup()
    return {"sides": {n: got.get("values", {}) for n, got in probes.items()}, "redis": version}


def show(res: Results, meta: dict[str, Any], out: str | None) -> None:
    """Print the section, and put it in ``out`` when given."""
    text = report.section(res, plans.figures(Plan()), meta)
    print(text)
    if out:
        write_section(Path(out), report.HEADING, text, before=report.BEFORE)
        print(f"bench.past: wrote the section to {out}")


def render(raw: Path, out: str | None) -> int:
    """``--render``: the tables of a saved run (after a change to how they are written)."""
    got = json.loads(raw.read_text())
    res = Results(1 + max(rep for rep, _, _ in got["order"]))
    res.values, res.na, res.failures = got["values"], got["na"], got["failures"]
    res.order = [tuple(x) for x in got["order"]]
    show(res, got["meta"], out)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    p = plans.tiny() if args.tiny else plans.quick() if args.quick else Plan()
    if args.reps:
        p.reps = args.reps
    if args.render:
        return render(Path(args.render), args.out)
    started, load_start = time.monotonic(), load()
    try:
        ref, tree, commit = name_sides(args)
        sides = prepare_sides(args, commit)
    except venvs.BuildError as exc:
        print(f"bench.past: {exc}", file=sys.stderr)
        return 2
    home = run_dir()
    print(
        f"bench.past: ref {ref['short']} ({ref['why']}) against the {tree or 'tree'}; "
        f"load average {load_start}; logs in {home}",
        flush=True,
    )
    res = Results(p.reps)
    got = run(p, sides, home, res)
    meta = {
        "mode": p.mode,
        "plan": p.sizes(),
        "ref": ref,
        "tree": tree,
        "machine": env.machine(got["redis"]),
        "load_start": load_start,
        "load_end": load(),
        "elapsed": time.monotonic() - started,
        "sides": got["sides"],
    }
    if args.json:
        dump = {"meta": meta, "values": res.values, "na": res.na, "order": res.order}
        Path(args.json).write_text(json.dumps({**dump, "failures": res.failures}, indent=1))
    show(res, meta, args.out)
    if not res.failures:  # the drivers' and workers' logs: kept when something failed
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
