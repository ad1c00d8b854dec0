"""Which ref to compare with, and one virtualenv per tree, cached by what the tree contains.

A tree's venv holds only that tree's ztq (``pip install`` of a ``git archive`` of the ref, or
of a copy of the working tree's files); the third-party packages (redis-py, hiredis, Pyramid,
WebTest...) come from one shared venv that every side's ``site-packages`` points to with a
``.pth`` line, so both sides run the same versions (the probe prints redis-py's and hiredis's
per side) and a new ref costs one install of ztq, not thirty packages. Both come from the
package registries pip is configured with; nothing else is downloaded.

The cache key of a tree is a digest of the git blob ids of its package files (the folders of
``[tool.setuptools] package-dir``, ``pyproject.toml`` and the readme), so a commit and a clean
working tree at that commit share one venv, and a docs-only commit builds nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.common import ROOT

try:
    import tomllib
except ImportError:  # Python 3.10: the backport, where installed
    import tomli as tomllib

CACHE = ROOT / ".venv-bench-past"
BASELINE = ROOT / "bench" / "BASELINE"
KEEP = 12  # tree venvs kept in the cache (the least recently used go first)
# what the drivers need beside ztq's own dependencies, and what builds ztq without isolation
EXTRA_DEPS = ["webtest", "setuptools>=68", "wheel"]


class BuildError(Exception):
    """A ref that does not resolve, or a venv that does not build: one line for the user."""


def git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise BuildError(f"git {' '.join(args)}: {done.stderr.strip() or 'failed'}")
    return done.stdout


# -- the ref -----------------------------------------------------------------------------------
def default_ref() -> tuple[str, str]:
    """(ref, why): the last release tag reachable from HEAD, else the ref bench/BASELINE keeps."""
    with contextlib.suppress(BuildError):
        tag = git("describe", "--tags", "--abbrev=0").strip()
        if tag:
            return tag, "the last release tag"
    for line in BASELINE.read_text(encoding="utf-8").splitlines():
        ref = line.split("#", 1)[0].strip()
        if ref:
            return ref, "bench/BASELINE, the repo having no release tag"
    raise BuildError("bench/BASELINE names no ref")


@dataclass(frozen=True)
class Commit:
    sha: str
    short: str
    subject: str


def resolve(ref: str) -> Commit:
    try:
        sha = git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").strip()
    except BuildError:
        raise BuildError(f"--ref {ref!r} is not a commit of this repository") from None
    short, subject = git("log", "-1", "--format=%h%x00%s", sha).strip().split("\0", 1)
    return Commit(sha, short, subject)


def describe_tree() -> str:
    """The working tree as the report names it: HEAD, and whether the package files differ."""
    head = git("log", "-1", "--format=%h").strip()
    dirty = git("status", "--porcelain", "--", *package_paths(tree_pyproject())).strip()
    return f"working tree at {head}" + (" + uncommitted changes" if dirty else "")


# -- what a tree is made of --------------------------------------------------------------------
def package_paths(pyproject: str) -> list[str]:
    """The files and folders a build of this pyproject reads."""
    data = tomllib.loads(pyproject)
    dirs = data.get("tool", {}).get("setuptools", {}).get("package-dir", {}).values()
    readme = data.get("project", {}).get("readme", "README.md")
    readme = readme if isinstance(readme, str) else readme.get("file", "README.md")
    return sorted({"pyproject.toml", readme, *dirs})


def tree_pyproject() -> str:
    return (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def _digest(listing: list[str], deps: str) -> str:
    h = hashlib.sha256(f"{sys.version}\n{deps}\n".encode())
    for line in sorted(listing):
        h.update(line.encode() + b"\n")
    return h.hexdigest()[:16]


def commit_key(commit: Commit, deps: str) -> str:
    paths = package_paths(git("show", f"{commit.sha}:pyproject.toml"))
    out = git("ls-tree", "-r", "-z", "--full-tree", commit.sha, "--", *paths)
    # "<mode> blob <id>\t<path>": the id and the path, as tree_key lists them
    return _digest([entry.split(" ", 2)[2] for entry in out.split("\0") if entry], deps)


def tree_files() -> list[str]:
    paths = package_paths(tree_pyproject())
    out = git("ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *paths)
    return sorted(p for p in out.split("\0") if p and (ROOT / p).is_file())


def tree_key(files: list[str], deps: str) -> str:
    """The same digest ``commit_key`` gives a commit with these files (git's blob ids)."""
    listing = []
    for path in files:
        data = (ROOT / path).read_bytes()
        blob = hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()
        listing.append(f"{blob}\t{path}")
    return _digest(listing, deps)


# -- the shared dependencies -------------------------------------------------------------------
@dataclass(frozen=True)
class Deps:
    """The site-packages every side's venv reads its third-party packages from."""

    site: Path
    build_isolation: bool  # False when it has setuptools>=68 and wheel to build ztq with

    @property
    def ident(self) -> str:
        return str(self.site)


def _run(cmd: list[str], what: str) -> None:
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-5:]
        raise BuildError(f"{what} failed: " + " | ".join(tail))


def _site(python: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(
        subprocess.run(
            [str(python), "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
    )


def _can_build(python: Path) -> bool:
    code = "import setuptools, wheel, sys; sys.exit(int(setuptools.__version__.split('.')[0]) < 68)"
    return subprocess.run([str(python), "-c", code], capture_output=True).returncode == 0


def deps_from(venv: Path) -> Deps:
    """An existing venv's packages as the shared dependencies (``--deps-venv``)."""
    python = venv / "bin" / "python"
    if not python.exists():
        raise BuildError(f"--deps-venv {venv}: no bin/python there")
    return Deps(_site(python), build_isolation=not _can_build(python))


def ensure_deps(cache: Path = CACHE) -> Deps:
    """``cache/deps``: the tree's runtime dependencies, what it builds with and
    ``EXTRA_DEPS``, built once (again when that list changes). Each side is installed without
    build isolation from these, so the build's own requirements belong here too (Babel, which
    setup.py compiles the console's catalogs with: without it no tree since could build)."""
    project = tomllib.loads(tree_pyproject())
    build = project.get("build-system", {}).get("requires", [])
    wanted = [*project["project"]["dependencies"], *build, *EXTRA_DEPS]
    venv = cache / "deps"
    stamp = venv / ".bench-past-deps"
    python = venv / "bin" / "python"
    with _locked(cache):
        if not (stamp.exists() and stamp.read_text() == "\n".join(wanted)):
            print(f"bench.past: installing the shared dependencies in {venv}", flush=True)
            shutil.rmtree(venv, ignore_errors=True)
            _run([sys.executable, "-m", "venv", str(venv)], "creating the dependencies' venv")
            _run([str(python), "-m", "pip", "install", "--quiet", *wanted], "pip install")
            stamp.write_text("\n".join(wanted))
    return Deps(_site(python), build_isolation=False)


# -- one tree's venv ---------------------------------------------------------------------------
@contextlib.contextmanager
def _locked(cache: Path) -> Iterator[None]:
    """One build at a time per cache (two runs at once would build the same venv twice)."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _extract_commit(commit: Commit, dest: Path) -> None:
    data = subprocess.run(
        ["git", "archive", "--format=tar", commit.sha], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")


def _copy_tree(files: list[str], dest: Path) -> None:
    for path in files:
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, target)


def _build(home: Path, what: str, deps: Deps, fill_src: Callable[[Path], None]) -> Path:
    """The python of the venv in ``home``: built from the files ``fill_src`` writes into
    ``home/src`` unless it was; used last (kept by the pruning) either way."""
    python = home / "venv" / "bin" / "python"
    with _locked(home.parent):
        if (home / ".built").exists():
            os.utime(home)
            return python
        print(f"bench.past: building a venv for {what} in {home}", flush=True)
        shutil.rmtree(home, ignore_errors=True)
        src = home / "src"
        src.mkdir(parents=True)
        fill_src(src)
        _run([sys.executable, "-m", "venv", "--without-pip", str(home / "venv")], "venv")
        (Path(_site(python)) / "_bench_past_deps.pth").write_text(f"{deps.site}\n")
        # its dependencies are found in the shared venv; only one it lacks (a ref that needs a
        # package the tree does not, or another version) goes into this venv
        cmd = [str(python), "-m", "pip", "install", "--quiet", "--no-compile"]
        if not deps.build_isolation:
            cmd.append("--no-build-isolation")
        _run([*cmd, str(src)], f"pip install of {home.name}")
        (home / ".built").write_text(time.strftime("%Y-%m-%d %H:%M:%S\n"))
        _prune(home.parent, keep=home)
    return python


def _prune(cache: Path, keep: Path) -> None:
    homes = [p for p in cache.iterdir() if p.is_dir() and p.name.startswith("ztq-")]
    homes.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for old in homes[KEEP:]:
        if old != keep:
            shutil.rmtree(old, ignore_errors=True)


def venv_for_commit(commit: Commit, deps: Deps, cache: Path = CACHE) -> Path:
    """The python of ``commit``'s venv (built from ``git archive`` on first use)."""
    home = cache / f"ztq-{commit_key(commit, deps.ident)}"
    return _build(home, commit.short, deps, lambda src: _extract_commit(commit, src))


def venv_for_tree(deps: Deps, cache: Path = CACHE) -> Path:
    """The python of the working tree's venv: its package files as they are on disk,
    uncommitted and untracked (not ignored) ones included."""
    files = tree_files()
    home = cache / f"ztq-{tree_key(files, deps.ident)}"
    return _build(home, "the working tree", deps, lambda src: _copy_tree(files, src))
