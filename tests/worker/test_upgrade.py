"""Upgrades (issue 28; docs/design.md, "Layout versions"): a worker of this release beside a
worker of the previous release, on one Redis. Tasks written, leased, failed and redone by
either are run by either, each the documented number of times, and end done.

The previous release is built at test time from the repository's own history (``git
archive`` of :data:`PREVIOUS` into a temporary folder, imported ahead of this checkout:
nothing is downloaded, nothing in the repository changes). When it cannot be built (no git,
a shallow clone without that commit) the test fails, loudly: it does not skip.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import ztq.core as ztq
from tests.worker.conftest import ROOT, wait_for
from ztq.core.engine.record import decode_payload, split_record
from ztq.core.engine.storage import Storage

pytestmark = pytest.mark.slow  # real worker processes of two releases, ~10 s

# The previous release: the last commit on main before layout 2 (settled runs, fetch request
# ids: "Lost replies" in docs/design.md). ztq has no release tags yet; when it gets them, this
# becomes the latest tag before the version under test. Bump it when the layout changes again.
PREVIOUS = "b9f14ac75064768fe16c92ec07f7b327795c12b6"
Q = "up"

TASKS = '''
import os
from ztq.core import Retry, get_storage, task

def _ran(kind, n):
    with open(os.environ["UPGRADE_RUNS"], "a") as fh:
        fh.write(f"{kind} {n} {os.environ.get('UPGRADE_SIDE', '?')}\\n")

@task(queue="up")
def ok(n):
    _ran("ok", n)
    return n

@task(queue="up")
def flaky(n):
    """Fails its first run (a retry an hour later: run now by an operator), then done."""
    _ran("flaky", n)
    if sum(1 for line in open(os.environ["UPGRADE_RUNS"]) if line.split()[:2] == ["flaky", n]) == 1:
        raise Retry(3600)
    return n

@task(queue="up")
def bad(n):
    """Fails into errors until its fix is deployed (a file), then redone: done."""
    _ran("bad", n)
    if not os.path.exists(os.path.join(os.environ["UPGRADE_DIR"], "fixed-" + n)):
        raise ValueError("not fixed yet")
    return n

def produce(batch, side):
    for i in range(5):
        ok.delay(f"{batch}{side}{i}")
    for i in range(2):
        flaky.delay(f"{batch}{side}{i}")
        bad.delay(f"{batch}{side}{i}")

def handed(batch, side):
    """One task enqueued while an idle executor waits for it: the enqueue leases it straight
    to that executor (so a lease written by one release is run and acked by the other)."""
    import time
    storage = get_storage()
    deadline = time.monotonic() + 20
    while not storage.client.get(storage.keys.waiter("up")) and time.monotonic() < deadline:
        time.sleep(0.01)
    ok.delay(f"{batch}{side}h")

def redo():
    """What an operator does: redo every error, run every delayed task now."""
    storage = get_storage()
    tasks = getattr(storage, "tasks", storage)  # the previous release: a flat Storage
    tasks.requeue("up", "error", oldest=1000)
    tasks.requeue("up", "delayed", oldest=1000)
'''

OPS = """
import sys
import ztq.core as ztq
import upgrade_tasks as t
ztq.connect(sys.argv[1])
print(ztq.__file__)  # the previous release's, not this checkout's
for op in sys.argv[2:]:  # "redo", "produce:<batch>" or "handed:<batch>", in order
    name, _, batch = op.partition(":")
    t.redo() if name == "redo" else getattr(t, name)(batch, "old")
"""


@pytest.fixture(scope="module")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder whose ``ztq`` package is the previous release's core and worker."""
    root = tmp_path_factory.mktemp("previous")
    got = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--prefix=ztq/", PREVIOUS, "core", "worker"],
        capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    if got.returncode != 0:
        pytest.fail(
            f"cannot build the previous release {PREVIOUS[:12]} from git (a shallow clone?): "
            f"{got.stderr.decode(errors='replace').strip()}",
            pytrace=False,
        )
    subprocess.run(["tar", "-x", "-C", str(root)], input=got.stdout, check=True, timeout=60)
    (root / "ztq" / "__init__.py").write_text("")  # found before this checkout's ztq
    return root


@dataclass
class Site:
    """The test's folder (task module, run log, fix files, worker logs), Redis, and the
    environment of each release's processes."""

    dir: Path
    url: str
    previous: Path
    env: dict[str, dict[str, str]]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def runs(self) -> list[tuple[str, str, str]]:
        """(kind, argument, release) of every run, in order."""
        text = (self.dir / "runs.log").read_text()
        return [(k, n, side) for k, n, side in (line.split() for line in text.splitlines())]

    def start(self, side: str) -> subprocess.Popen[bytes]:
        """A worker process of ``side``'s release (``old`` or ``new``), two threads. Its
        lease is long: nothing here waits for one to run out, and a worker starved of CPU
        on a busy machine must not lose one (its task would run twice)."""
        log = open(self.dir / f"{side}.log", "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [sys.executable, "-m", "ztq.worker", "--redis", self.url, "--name", side,
             "--import", "upgrade_tasks", "--queue", f"{Q}:2", "--heartbeat", "0.3",
             "--lease", "20", "--grace", "5", "--log-level", "warning"],
            env=self.env[side], cwd=self.dir, stdout=log, stderr=log,
        )  # fmt: skip
        self.procs.append(proc)
        return proc

    def old_ops(self, *ops: str) -> None:
        """Run ``ops`` with the previous release's client (a process of its own)."""
        got = subprocess.run(
            [sys.executable, "old_ops.py", self.url, *ops], env=self.env["old"], cwd=self.dir,
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        if got.returncode or not got.stdout.startswith(str(self.previous)):
            pytest.fail(f"the previous release did not run: {got.stdout}{got.stderr}")

    def fix(self, batch: str) -> None:
        """Deploy the fix of the batch's bad tasks: their next run succeeds."""
        for n in range(2):
            for side in ("old", "new"):
                (self.dir / f"fixed-{batch}{side}{n}").touch()

    def settle(self, storage: Storage, batch: str, want: dict[str, int]) -> None:
        """Wait until the batch's tasks are in the states ``want`` counts."""
        try:
            wait_for(lambda: count(storage, batch) == Counter(want), timeout=30, every=0.05)
        except AssertionError:
            logs = {p.name: p.read_text()[-2000:] for p in self.dir.glob("*.log")}
            raise AssertionError(f"{batch}: {count(storage, batch)} != {want}; {logs}") from None


@pytest.fixture
def site(tmp_path: Path, previous: Path, redis_url: str) -> Iterator[Site]:
    (tmp_path / "upgrade_tasks.py").write_text(textwrap.dedent(TASKS))
    (tmp_path / "old_ops.py").write_text(OPS)
    (tmp_path / "runs.log").touch()
    base = {**os.environ, "UPGRADE_RUNS": str(tmp_path / "runs.log"), "UPGRADE_DIR": str(tmp_path)}
    base["ZTQ_IDLE_WAIT"] = "0.3"  # an idle executor stops within that on SIGTERM
    base.pop("ZTQ_REDIS_URL", None)
    env = {
        "old": {**base, "UPGRADE_SIDE": "old", "PYTHONPATH": f"{previous}{os.pathsep}{tmp_path}"},
        "new": {**base, "UPGRADE_SIDE": "new", "PYTHONPATH": str(tmp_path)},
    }
    sys.path.insert(0, str(tmp_path))
    made = Site(tmp_path, redis_url, previous, env)
    try:
        yield made
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("upgrade_tasks", None)
        for p in made.procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
            p.wait(10)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM: a graceful stop, exit code 0."""
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(20) == 0


def states(storage: Storage) -> dict[str, tuple[dict[str, Any], str]]:
    """Every task record of the queue: id -> (meta, payload)."""
    raw = storage.client.hgetall(storage.keys.tasks(Q))
    return {i: split_record(r) for i, r in raw.items() if not i.startswith("#")}


def count(storage: Storage, batch: str) -> Counter[str]:
    """States of a batch's tasks, by kind: ``ok:done``, ``flaky:delayed``, ..."""
    out: Counter[str] = Counter()
    for meta, payload in states(storage).values():
        task, (arg,) = decode_payload(payload)["task"], decode_payload(payload)["args"]
        if arg.startswith(batch):
            out[f"{task.rpartition('.')[2]}:{meta['state']}"] += 1
    return out


def test_a_worker_of_this_release_beside_one_of_the_previous(site: Site) -> None:
    """Batch A is written by producers of both releases and first run by the old worker
    (its ok tasks done, its flaky ones failed into a retry, its bad ones into errors); the
    old release's operator redoes them and the new worker runs them. Batch B the other way
    round. Every task runs the documented number of times, each run where the doc says."""
    import upgrade_tasks as t  # this release's producer

    storage = ztq.get_storage()
    full = {"ok:done": 11, "flaky:done": 4, "bad:done": 4}
    failed = {"ok:done": 11, "flaky:delayed": 4, "bad:error": 4}

    old = site.start("old")
    site.old_ops("produce:A")
    t.produce("A", "new")
    site.settle(storage, "A", {**failed, "ok:done": 10})
    t.handed("A", "new")  # most likely leased by this release to the old worker
    # and run by it before it stops: on a busy machine the SIGTERM below came before the old
    # worker's thread had read the hand, and it gave the task back for the new one to run
    site.settle(storage, "A", failed)

    new = site.start("new")
    stop(old)
    site.fix("A")
    site.old_ops("redo")  # the previous release's operator
    site.settle(storage, "A", full)
    site.old_ops("handed:B", "produce:B")  # leased by the old release to the new worker
    t.produce("B", "new")
    site.settle(storage, "B", failed)

    old = site.start("old")
    stop(new)
    site.fix("B")
    t.redo()  # this release's operator
    site.settle(storage, "B", full)
    stop(old)

    by_task: dict[tuple[str, str], list[str]] = {}
    for kind, n, side in site.runs:
        by_task.setdefault((kind, n), []).append(side)
    first, then = {"A": "old", "B": "new"}, {"A": "new", "B": "old"}
    assert len(by_task) == 38
    for (kind, n), sides in by_task.items():
        if kind == "ok":  # once, by the worker that ran its batch
            assert sides == [first[n[0]]], (kind, n, sides)
        else:  # failed by one release, run again (retry run now, or redone) by the other
            assert sides == [first[n[0]], then[n[0]]], (kind, n, sides)
    # the records say which layout wrote them last: layout 2 writes `v`, the previous none
    metas = {i: meta for i, (meta, _) in states(storage).items()}
    old_only = [i for i, m in metas.items() if m["state"] == "done" and "v" not in m]
    assert old_only, "no record was written by the previous release alone"
    assert all(metas[i].get("v") == 2 for i in metas if i not in old_only)
    assert storage.client.zcard(storage.keys.running(Q)) == 0
