"""What a worker checks and says once at its start, after importing its task modules and
before serving: that its name is its own, that what it serves fits the tasks it imported, and
the summary of what it serves (one log block).

Each check either refuses the start (:class:`ConfigError`: exit 2 and one line) or logs one
WARNING; none changes what the worker serves (issue 39, docs/worker.md "At the start").
"""

from __future__ import annotations

import logging
import os
import re
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from ztq.core.engine.workers import WorkerInfo
from ztq.core.errors import ConfigError
from ztq.core.settings.redis_urls import safe_url
from ztq.worker.config import ThreadSpec, WorkerConfig

log = logging.getLogger("ztq.worker")


def ztq_version() -> str:
    """The installed distribution's version (``dev`` in a tree that is not installed)."""
    try:
        return version("ztq")
    except PackageNotFoundError:
        return "dev"


def _alive_here(pid: int) -> bool:
    """Whether a process ``pid`` runs on this host (one we may not signal runs too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_name(previous: WorkerInfo | None, host: str) -> None:
    """Refuse to start under the name of a live worker: two workers of one name hide each
    other (``ztq workers`` lists one, and a command to the name reaches whichever reads its
    list first). A name is free when its last heartbeat says ``stopped``, when the heartbeat
    is older than ``lost_after``, or when it was written on this host by a process that no
    longer runs (a restart after a crash need not wait for the heartbeat to expire), or by
    this very process id (a container restarted with the same host name and pid 1)."""
    if previous is None or previous.status in ("stopped", "lost"):
        return
    other_host, other_pid = previous.get("host"), previous.get("pid")
    here = other_host == host and isinstance(other_pid, int)
    if here and (other_pid == os.getpid() or not _alive_here(other_pid)):
        return
    raise ConfigError(
        f"worker name {previous.id!r} is taken by a live worker on host {other_host} (pid "
        f"{other_pid}, last heartbeat {previous.age:.0f}s ago): give this one another --name "
        f"(or name = in [server]), or stop that one first (ztq workers stop {previous.id}); "
        f"the name is free once its heartbeat is {previous.lost_after:g}s old"
    )


def _is_list_form(spec: ThreadSpec) -> bool:
    """A thread of the ini's list form (``fast = urgent, default``), named by its entry; the
    other forms name their threads ``QUEUE-N``."""
    return len(spec.queues) > 1 or not re.fullmatch(rf"{re.escape(spec.queues[0])}-\d+", spec.name)


def check_served(cfg: WorkerConfig, tasks: dict[str, Any]) -> None:
    """The queues served, against the imported ``tasks`` (name -> task function).

    A list-form thread named after a task's queue that its list leaves out is refused
    (``mail = abc`` reads as a mistyped count, see ``ztq.worker.config.queues``); a worker
    that serves none of the imported tasks' queues logs one WARNING naming them and how to
    serve them, and serves what it was given (as dramatiq's explicit ``--queues`` does)."""
    task_queues = sorted({tf.queue for tf in tasks.values()})
    for spec in cfg.threads:
        if spec.name in task_queues and spec.name not in spec.queues and _is_list_form(spec):
            raise ConfigError(
                f"queue entry {spec.name} = {', '.join(spec.queues)}: {spec.name!r} is the queue "
                f"of imported tasks; give it a thread count ('{spec.name} = 2'); a thread "
                "serving a list of queues is named otherwise"
            )
    served = set(cfg.queues)
    if not task_queues or served & set(task_queues):
        return
    flags = " ".join(f"--queue {q}" for q in task_queues)
    log.warning(
        "this worker serves %s but none of the queues of the tasks it imported (%s): their "
        "tasks wait until a worker serves them; serve them with %s (or [queues] entries)",
        ", ".join(cfg.queues), ", ".join(task_queues), flags,
    )  # fmt: skip


def _count(n: int, pool: str) -> str:
    """``2 threads`` / ``1 process slot``."""
    what = "process slot" if pool == "process" else "thread"
    return f"{n} {what}{'' if n == 1 else 's'}"


def start_summary(cfg: WorkerConfig, worker_id: str) -> str:
    """What this worker serves, as one block (issue 24: nothing silent): version, app,
    Redis (password masked), prefix, each queue's executors, the health address."""
    lines = [f"worker {worker_id} starting: ztq {ztq_version()}",
             f"  app: {cfg.app or 'the default app'}",
             f"  redis: {safe_url(cfg.redis_url)}, prefix {cfg.prefix}"]  # fmt: skip
    scaled = {s.queue: s for s in cfg.scaled}
    groups: dict[tuple[tuple[str, ...], str, bool], list[ThreadSpec]] = {}
    for spec in cfg.threads:
        if spec.queues[0] not in scaled or len(spec.queues) > 1:
            groups.setdefault((spec.queues, spec.pool, spec.fair), []).append(spec)
    for (queues, pool, fair), specs in groups.items():
        shards = f", {specs[0].shards} shards" if specs[0].shards > 1 else ""
        if pool == "async":
            lines.append(f"  queue {queues[0]}: 1 async pool, "
                         f"{specs[0].concurrency} tasks at once{shards}")  # fmt: skip
        elif len(queues) > 1:
            order = "in turn (fair)" if fair else "in order"
            lines.append(f"  thread {specs[0].name}: queues {', '.join(queues)} {order}, "
                         f"{_count(len(specs), pool)}")  # fmt: skip
        else:
            lines.append(f"  queue {queues[0]}: {_count(len(specs), pool)}{shards}")
    for s in cfg.scaled:
        shards = f", {s.shards} shards" if s.shards > 1 else ""
        what = "async tasks at once" if s.pool == "async" else _count(2, s.pool)[2:]
        lines.append(f"  queue {s.queue}: {s.low}..{s.high} {what}, autoscaled{shards}")
    lines.append(f"  health: {cfg.health + ' (/livez, /readyz)' if cfg.health else 'none'}")
    return "\n".join(lines)
