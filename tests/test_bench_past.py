"""``python -m bench.past`` (issue 38) in its tiny mode: it builds the ref's venv from ``git
archive``, runs both sides on their own redis-servers, interleaved, prints every figure with
its ratio, and shows a figure one side cannot produce as n/a. Sizes are tiny: no figure is
checked for its value (no test asserts a speed).

The ref is HEAD, built into a venv of its own whose third-party packages are this test
venv's (``--deps-venv``); the tree side is this venv's python (``--python-tree``) behind a
wrapper whose ``sitecustomize`` removes ``TaskFunction.adelay``, as a ztq without asyncio
enqueue would be. The venv is cached in ``.venv-bench-past/`` like a real run's (the first
run builds it, about 15 s).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.common import ROOT, write_section
from bench.past import plan, venvs


def run(*args: str, timeout: float = 580) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZTQ_")}
    cmd = [sys.executable, "-m", "bench.past", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def no_adelay_python(tmp_path: Path) -> Path:
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text("import ztq.core\n\ndel ztq.core.TaskFunction.adelay\n")
    wrapper = tmp_path / "python-without-adelay"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{shim}:$PYTHONPATH" exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def tables(out: str) -> dict[str, dict[str, list[str]]]:
    """group -> row -> its cells (ref, tree, tree / ref, better), from the printed tables."""
    found: dict[str, dict[str, list[str]]] = {}
    group = ""
    for line in out.splitlines():
        if line.startswith("### "):
            group = line[4:].split(" (")[0]
            found[group] = {}
        elif line.startswith("| ") and not line.startswith("| figure "):
            name, *cells = [c.strip() for c in line.strip("|").split("|")]
            found[group][name] = cells
    return found


@pytest.mark.slow
@pytest.mark.timeout(600)  # about 50 s on a quiet machine, minutes on a loaded one
def test_tiny_run_builds_interleaves_and_prints_every_figure(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## Results\n\npeers\n\n## Producers: x\n\nthreads\n")
    raw = tmp_path / "raw.json"
    done = run(
        "--tiny",
        "--ref",
        "HEAD",
        "--deps-venv",
        sys.prefix,
        "--python-tree",
        str(no_adelay_python(tmp_path)),
        "--json",
        str(raw),
        "--out",
        str(doc),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    got = json.loads(raw.read_text())
    assert not got["failures"], got["failures"]

    # both sides ran their own ztq: the ref the one built from HEAD's archive, in the cache
    sides = got["meta"]["sides"]
    assert sides["ref"]["ztq"].startswith(str(venvs.CACHE)), sides
    built = Path(sides["ref"]["ztq"], "__init__.py").read_text()
    assert (
        built
        == subprocess.run(
            ["git", "show", "HEAD:core/__init__.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert sides["tree"]["ztq"] == str(ROOT / "core"), sides

    # interleaved: each measure on both sides in turn, the order swapped every repetition
    order = [tuple(x) for x in got["order"]]
    names = [m.name for m in plan.measures(plan.tiny())]
    first = [("ref", "tree"), ("tree", "ref")]
    expected = [(rep, m, s) for rep in range(2) for m in names for s in first[rep]]
    assert order == expected

    # every figure printed in its group's table, with a ratio, except the one the tree side
    # cannot produce
    rows = tables(out)
    for fig in plan.figures(plan.tiny()):
        shown = {fig.row, f"{fig.row} ({fig.unit})"}
        [cells] = [c for name, c in rows[fig.group].items() if name in shown]
        assert cells[3] == fig.better
        if fig.key.startswith("enqueue_async"):
            assert cells[1:3] == ["n/a", "n/a"] and cells[0] != "n/a", cells
        else:
            assert "×" in cells[2] and "n/a" not in cells, (fig, cells)
    assert sum(len(r) for r in rows.values()) == len(plan.figures(plan.tiny()))
    assert "n/a on the tree: " in out and "(no asyncio enqueue (adelay))" in out
    assert re.search(r"load average [\d. ]+ at the start, [\d. ]+ at the end", out)

    # --out put the section before "Producers" and kept the rest of the file
    text = doc.read_text()
    assert text.startswith("# Benchmarks\n\n## Results\n\npeers\n\n## Against ztq's own past\n")
    assert text.endswith("## Producers: x\n\nthreads\n")

    # --render writes the same tables again from the raw figures, measuring nothing
    again = run("--render", str(raw), timeout=60)
    section = out[out.index("## Against ztq's own past") : out.index("bench.past: wrote")]
    assert again.returncode == 0 and again.stdout.startswith(section), again.stderr


@pytest.mark.slow
def test_a_ref_that_does_not_resolve_is_one_line_and_builds_nothing(tmp_path: Path) -> None:
    done = run("--ref", "no-such-ref-at-all", "--cache", str(tmp_path / "cache"))
    assert done.returncode == 2
    assert (
        done.stderr == "bench.past: --ref 'no-such-ref-at-all' is not a commit of this repository\n"
    )
    assert not (tmp_path / "cache").exists()


def test_the_default_ref_is_the_baseline_while_there_is_no_tag() -> None:
    ref, why = venvs.default_ref()
    tags = subprocess.run(["git", "tag"], cwd=ROOT, capture_output=True, text=True).stdout
    if tags.strip():
        assert why == "the last release tag"
    else:
        assert ref == "728ce87" and "BASELINE" in why
    assert venvs.resolve(ref).sha


def test_a_section_is_replaced_in_place(tmp_path: Path) -> None:
    doc = tmp_path / "b.md"
    doc.write_text("# B\n\n## One\n\nold\n\n## Two\n\nkept\n")
    write_section(doc, "## One", "## One\n\nnew\n", before="## Two")
    write_section(doc, "## Zero", "## Zero\n\nfirst\n", before="## One")
    assert doc.read_text() == "# B\n\n## Zero\n\nfirst\n\n## One\n\nnew\n\n## Two\n\nkept\n"
