"""The operator's commands of ``ztq``: what the console shows and does, from a terminal.

Reads (``info``, ``workers``, ``errors``, ``task``, ``check``) print tables, or with
``--json`` the dicts the console's ``/api`` serves (:mod:`ztq.core.monitor.overview`). On a narrow
terminal each table leaves out the columns whose ``drop`` is set, the highest first, and
keeps the queue names, worker ids and task ids whole (:class:`terminal.FitTable`). Writes
(``workers pause|resume|stop|threads|auto``, ``queue pause|resume|purge``, ``redo``,
``delete``, ``purge``) go through the same storage calls and bulk steps as the console,
are written to the console's audit log as ``cli:<login>``, and the destroying ones ask
first (``--yes`` skips the question; without a terminal it is required).
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import sys
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from ztq.core import settings
from ztq.core.engine.connection import make_client
from ztq.core.engine.keys import check_queue
from ztq.core.engine.parts.key_turns import KeyTotals
from ztq.core.engine.storage import Storage
from ztq.core.engine.workers import DEFAULT_LOST_AFTER, autoscale_of, get_worker, send_command
from ztq.core.errors import ConnectionFailed, NotFound, ZtqError
from ztq.core.monitor import bulk, overview, streams
from ztq.core.monitor import queues as monitor
from ztq.core.monitor.fmt import memory_summary, size
from ztq.core.monitor.systems import health_of_all
from ztq.core.monitor.workers import forget_queue
from ztq.worker.cli import batches as batch_cli
from ztq.worker.cli import terminal

# ``errors`` and ``task`` live in tasks.py; commands.py runs every command from here
from ztq.worker.cli.tasks import Connect, cmd_errors, cmd_task  # noqa: F401
from ztq.worker.cli.terminal import Col

STATUS_STYLE = {"running": "green", "paused": "yellow", "stopping": "yellow",
                "stopped": "dim", "lost": "bold red"}  # fmt: skip
GONE = ("stopped", "lost")  # the CPU and memory of their last report are not of now
BULK_BATCH = 500


def _who() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli:?"


# the system of ztq.systems the command works on (--system): its audit entries name it
SYSTEM: ContextVar[str] = ContextVar("ztq_cli_system", default="")


def _audit(storage: Storage, action: str, **fields: Any) -> None:
    streams.write_audit(storage, _who(), action, system=SYSTEM.get(), **fields)


_ago = terminal.age

# The columns of each table; ``drop``: left out on a narrow terminal, the highest first (the
# order docs/cli.md gives); ``wrap``: text that may wrap, kept at least that wide.
QUEUE_COLUMNS = (Col("QUEUE"), Col("READY h/n/l", number=True),
                 Col("DELAYED", number=True, drop=1), Col("RUNNING", number=True, drop=2),
                 Col("ERRORS", number=True), Col("DONE 1h", number=True, drop=3),
                 Col("FAILED 1h", number=True, drop=4), Col("OLDEST WAITING", number=True),
                 Col("THREADS", number=True), Col("STATE"))  # fmt: skip
WORKER_COLUMNS = (Col("WORKER"), Col("STATUS"), Col("HOST", drop=3),
                  Col("PID", number=True, drop=4), Col("CPU", number=True, drop=1),
                  Col("MEMORY", number=True, drop=2), Col("THREADS", wrap=16),
                  Col("CURRENT", wrap=28), Col("LAST REPORT", number=True))  # fmt: skip


# -- reads -----------------------------------------------------------------------------------
def _queues_table(queues: list[dict[str, Any]]) -> RenderableType:
    t = terminal.table(*QUEUE_COLUMNS, title="Queues")
    for q in queues:
        r = q["ready"]
        errors = Text(str(q["errors"]), style="red" if q["errors"] else "")
        state = Text("paused", style="yellow") if q["paused"] else Text("active")
        if q["rate_limit"] or q["task_rates"]:  # the rate limits, and the tasks held now
            rate = q["rate_limit"] or "task limits"
            state += Text(f" {rate}: {q['rate_held']} held", style="cyan")
        threads = Text(str(q["threads"]), style="" if q["threads"] else "bold red")
        t.add_row(q["name"], f"{r.get('high', 0)}/{r.get('normal', 0)}/{r.get('low', 0)}",
                  str(q["delayed"]), str(q["running"]), errors, str(q["done_hour"]),
                  str(q["failed_hour"]), _ago(q["head_age_ms"]), threads, state)  # fmt: skip
    if not queues:
        return Text("no queue yet: nothing was enqueued", style="dim")
    return t


def _workers_table(workers: list[dict[str, Any]]) -> RenderableType:
    t = terminal.table(*WORKER_COLUMNS, title="Workers")
    for w in workers:
        # a stopped or lost worker uses nothing now: its last report stays in --json
        live = w["status"] not in GONE
        cpu = f"{w['cpu_percent']:.0f}%" if live and w["cpu_percent"] is not None else "–"
        memory = size(w["rss"]) if live and w["rss"] else "–"
        threads = " ".join(f"{q}:{n}" for q, n in sorted(w["threads"].items()))
        current = "\n".join(
            f"{c['task']} {c['id'][:12]} {_ago(c['runtime_ms'])}" for c in w["current"]
        )
        status = Text(w["status"], style=STATUS_STYLE.get(w["status"], ""))
        reported = f"{_ago(w['report_age_ms'])} ago"
        t.add_row(w["id"], status, w["host"], str(w["pid"] or "–"), cpu, memory, threads,
                  current or Text("idle", style="dim"), reported)  # fmt: skip
    return t


def _shown_workers(storage: Storage, show_all: bool) -> tuple[list[dict[str, Any]], int]:
    """Workers to show (lost ones always: they need a look) and how many stopped are hidden."""
    everyone = overview.workers(storage, DEFAULT_LOST_AFTER)
    shown = [w for w in everyone if show_all or w["status"] != "stopped"]
    return shown, len(everyone) - len(shown)


def _busiest_keys(storage: Storage, queues: list[dict[str, Any]]) -> dict[str, KeyTotals]:
    """The 5 busiest keys of each queue that has keyed tasks waiting or running."""
    found = {
        q["name"]: storage.key_turns.key_totals(q["name"], 5) for q in queues if not q.get("shards")
    }
    return {name: t for name, t in found.items() if t.top}


def _keys_table(keys: dict[str, KeyTotals]) -> RenderableType:
    t = terminal.table(Col("QUEUE"), Col("KEY"), Col("WAITING", number=True),
                       Col("RUNNING", number=True), Col("HELD"), title="Busiest keys")  # fmt: skip
    for name, totals in keys.items():
        for k in totals.top:
            t.add_row(name, Text(k.key), str(k.waiting), str(k.running), k.held or "–")
        if totals.other_waiting or totals.other_running:
            t.add_row(name, Text("other keys", style="dim"), str(totals.other_waiting),
                      str(totals.other_running), "")  # fmt: skip
    return t


def _info(storage: Storage, show_all: bool) -> tuple[dict[str, Any], RenderableType]:
    queues = overview.queues(storage, storage.queues.names(), DEFAULT_LOST_AFTER)
    workers, hidden = _shown_workers(storage, show_all)
    recent, batches_shown = batch_cli.recent(storage)  # the newest batches (docs/batches.md)
    memory = monitor.redis_memory(storage, [q["name"] for q in queues])
    data = {"queues": queues, "workers": workers, "stopped_hidden": hidden, "batches": recent,
            "redis_memory": memory}  # fmt: skip
    shown = Text(memory_summary(memory))  # and from 80% of maxmemory, the warning
    if memory["warning"]:
        shown.append("\n" + memory["warning"], style="bold red")
    keys = _busiest_keys(storage, queues)  # docs/queue-controls.md, "Per-key limits"
    data["keys"] = {name: dataclasses.asdict(t) for name, t in keys.items()}
    parts: list[RenderableType] = [_queues_table(queues), shown, Text("")]
    if keys:
        parts += [_keys_table(keys), Text("")]
    if workers:
        parts.append(_workers_table(workers))
    else:
        parts.append(Text("no live worker", style="bold red"))
    if hidden:
        parts.append(Text(f"{hidden} stopped worker(s) not shown (--all shows them)", style="dim"))
    return data, Group(*parts, Text(""), batches_shown)


def cmd_info(args: argparse.Namespace, connect: Connect) -> int:
    storage = connect(args)
    if args.watch:
        return terminal.watch(lambda: _info(storage, args.all)[1], args.watch)
    data, shown = _info(storage, args.all)
    if args.json:
        terminal.print_json(data)
    else:
        terminal.out().print(shown)
    return 0


def cmd_workers(args: argparse.Namespace, connect: Connect) -> int:
    storage = connect(args)
    if args.action:
        return _command_workers(storage, args)
    workers, hidden = _shown_workers(storage, args.all)
    if args.json:
        terminal.print_json(workers)
    else:
        terminal.out().print(_workers_table(workers) if workers else "no live worker")
        if hidden:
            terminal.err().print(f"{hidden} stopped worker(s) not shown (--all shows them)")
    return 0


# -- writes ----------------------------------------------------------------------------------
def _command_workers(storage: Storage, args: argparse.Namespace) -> int:
    extra: dict[str, Any] = {}
    command = {"pause": "pause", "resume": "resume", "stop": "stop",
               "threads": "set_threads", "auto": "autoscale"}[args.action]  # fmt: skip
    if command == "set_threads":
        if args.queue is None or args.count is None or not 0 <= args.count <= 256:
            raise ZtqError("ztq workers threads WORKER --queue QUEUE --count N (0 to 256)")
        # a queue Redis does not know is refused: a typo was served (issue 39)
        extra = {"queue": _queue(storage, args.queue)[0], "threads": args.count}
    elif command == "autoscale":
        if args.queue is None:
            raise ZtqError("ztq workers auto WORKER --queue QUEUE")
        extra = {"queue": check_queue(args.queue)}
    failed = 0
    for worker_id in args.worker:
        info = get_worker(storage, worker_id)
        if info is None:
            terminal.err().print(f"ztq: no worker {worker_id}")
            failed += 1
            continue
        if command == "autoscale" and args.queue not in autoscale_of(info.data):
            terminal.err().print(f"ztq: {worker_id} does not autoscale {args.queue} "
                                 "(no MIN..MAX range for it)")  # fmt: skip
            failed += 1
            continue
        if command in ("set_threads", "autoscale") and not info.get("config_editable"):
            terminal.err().print(f"ztq: {worker_id} does not accept thread changes "
                                 "(active_config = false)")  # fmt: skip
            failed += 1
            continue
        send_command(storage, worker_id, command, by=_who(), **extra)
        detail = " ".join(f"{k}={v}" for k, v in extra.items())
        _audit(storage, f"worker {command}", detail=f"{worker_id} {detail}".strip())
        print(f"sent {command} to {worker_id}")
    return 1 if failed else 0


def _queue(storage: Storage, name: str) -> tuple[str, list[str]]:
    """The queue named and its shards; :class:`NotFound` (exit 1) when Redis knows neither."""
    queue, known = check_queue(name), storage.queues.names()
    shards = storage.queues.shards_of(queue, known)
    if not any(s in known for s in shards):
        raise NotFound(f"no queue {queue}")
    return queue, shards


def _missing(ids: dict[str, int], where: str) -> int:
    """Exit 1 with one line naming the ids nothing was done to (``ids``: id -> tasks moved)."""
    if missing := [i for i, n in ids.items() if not n]:
        print(f"ztq: no task {', '.join(missing)} in {where}", file=sys.stderr)
    return 1 if missing else 0


def cmd_queue(args: argparse.Namespace, connect: Connect) -> int:
    storage = connect(args)
    queue = _queue(storage, args.queue)[0]
    if args.action == "purge":
        return purge(storage, queue, args.what, args.yes)
    if args.action == "limit":
        return limit(storage, queue, args)
    if args.action == "forget":  # only a queue that holds nothing and nobody serves
        why = forget_queue(storage, queue)
        if why:
            print(f"ztq: {why}: not forgotten", file=sys.stderr)
            return 1
        _audit(storage, "forget queue", queue=queue)
        print(f"{queue} forgotten")
        return 0
    if args.action == "pause":
        storage.queues.pause(queue)
    else:
        storage.queues.resume(queue)
    _audit(storage, f"{args.action} queue", queue=queue)
    print(f"{queue} {'paused' if args.action == 'pause' else 'resumed'}")
    return 0


def limit(storage: Storage, queue: str, args: argparse.Namespace) -> int:
    """Set or lift the queue's running and pending limits (docs/queue-controls.md); without
    an option, show them."""
    changes: dict[str, Any] = {}
    for option, name, top in (("--max-running", "max_running", 10_000),
                              ("--key-concurrency", "key_concurrency", 10_000),
                              ("--max-pending", "max_pending", 100_000_000)):  # fmt: skip
        value = getattr(args, name)
        if value is None:
            continue
        if value != "none" and not (value.isdigit() and 1 <= int(value) <= top):
            raise ZtqError(f"{option} must be a number from 1 to {top}, or none, not {value!r}")
        changes[name] = None if value == "none" else int(value)
    if args.when_full is not None:
        changes["when_full"] = args.when_full
    if args.block_timeout is not None:
        changes["block_timeout"] = args.block_timeout
    if args.rate_limit is not None:  # InvalidOption names the accepted forms
        changes["rate_limit"] = None if args.rate_limit == "none" else args.rate_limit
    if changes:
        storage.queues.configure(queue, **changes)  # InvalidOption: a sharded queue, a bad timeout
        detail = " ".join(f"{k}={'none' if v is None else v}" for k, v in changes.items())
        _audit(storage, "limit queue", queue=queue, detail=detail)
    print(f"{queue}: {storage.queues.queue_limits(queue).describe()}")
    return 0


def purge(storage: Storage, queue: str, what: str, yes: bool) -> int:
    """Delete every task of one list of a queue, every shard of it (bounded: what is there
    when it starts)."""
    [stats] = monitor.folded_stats(storage, [queue], minutes=0)
    present = {"ready": stats.pending, "delayed": stats.delayed, "errors": stats.errors}[what]
    if not present:
        print(f"0 task(s) deleted from {queue} {what}: it is empty")
        return 0
    terminal.confirm(f"Delete the {present} {what} task(s) of {queue}?", yes)
    total = taken_all = 0
    with terminal.progress(f"purge {queue} {what}", present) as advance:
        for shard in stats.shards or [queue]:
            while taken_all < present:
                limit = min(1000, present - taken_all)
                deleted, taken = storage.tasks.remove(shard, purge=what, limit=limit)
                if not taken:
                    break
                total += deleted
                taken_all += taken
                advance(taken)
    _audit(storage, f"purge {what}", queue=queue, count=total)
    print(f"{total} task(s) deleted from {queue} {what}")
    return 0


def _bulk(storage: Storage, job: bulk.BulkJob, queues: Sequence[str]) -> int:
    bulk.start(storage, job, queues)
    with terminal.progress(job.describe(), job.total) as advance:
        while not job.finished:
            before = job.scanned
            bulk.step(storage, job, queues, batch=BULK_BATCH, seconds=0.5)
            advance(job.scanned - before)
    return job.done


def cmd_redo(args: argparse.Namespace, connect: Connect) -> int:
    if not (args.ids or args.all or args.task or args.grep):
        raise ZtqError("name task ids or --all: ztq redo QUEUE ID... | "
                       "ztq redo QUEUE --all [--task TEXT] [--grep TEXT]")  # fmt: skip
    storage = connect(args)
    queue, shards = _queue(storage, args.queue)
    if args.ids:
        moved = {i: sum(storage.tasks.requeue(q, "error", [i]) for q in shards) for i in args.ids}
        if total := sum(moved.values()):
            _audit(storage, "redo", queue=queue, ids=args.ids, count=total)
        print(f"{total} task(s) back in {queue}")
        return _missing(moved, f"the errors of {queue}")
    job = bulk.BulkJob("redo", "errors", queue, args.task or "", args.grep or "")
    done = _bulk(storage, job, shards)
    _audit(storage, "bulk redo", queue=queue, count=done, detail=job.describe())
    print(f"{done} of {job.total} error(s) back in {queue}")
    return 0


def cmd_delete(args: argparse.Namespace, connect: Connect) -> int:
    storage = connect(args)
    queue, shards = _queue(storage, args.queue)
    if args.ids:
        terminal.confirm(f"Delete {len(args.ids)} task(s) of {queue}?", args.yes)
        gone = {i: sum(storage.tasks.remove(q, [i])[0] for q in shards) for i in args.ids}
        if deleted := sum(gone.values()):
            _audit(storage, "delete", queue=queue, ids=args.ids, count=deleted)
        print(f"{deleted} task(s) deleted from {queue}")
        return _missing(gone, queue)
    if not (args.errors and (args.all or args.task or args.grep)):
        raise ZtqError("name task ids, or --errors with --all, --task or --grep")
    job = bulk.BulkJob("delete", "errors", queue, args.task or "", args.grep or "")
    present = monitor.folded_stats(storage, [queue], minutes=0)[0].errors
    which = "matching " if job.filtered else ""
    terminal.confirm(f"Delete the {which}errors of {queue} ({present} to look at)?", args.yes)
    done = _bulk(storage, job, shards)
    _audit(storage, "bulk delete", queue=queue, count=done, detail=job.describe())
    print(f"{done} error(s) deleted from {queue}")
    return 0


def cmd_purge(args: argparse.Namespace, connect: Connect) -> int:
    storage = connect(args)
    return purge(storage, _queue(storage, args.queue)[0], args.what, args.yes)


# -- health ----------------------------------------------------------------------------------
def problems(storage: Storage, queues: Sequence[str], max_wait: float) -> list[str]:
    """What is wrong, one reason a line: a queue whose oldest task waits longer than
    ``max_wait`` seconds, a queue with waiting tasks and no live worker serving it."""
    found = []
    for q in overview.queues(storage, queues, DEFAULT_LOST_AFTER):
        waiting = (q["head_age_ms"] or 0) / 1000
        if max_wait and q["pending"] and waiting > max_wait:
            found.append(f"queue {q['name']}: the oldest task waits {_ago(waiting * 1000)} "
                         f"(more than {_ago(max_wait * 1000)})")  # fmt: skip
        if q["threads"] == 0 and (q["pending"] or q["delayed"]) and not q["paused"]:
            found.append(f"queue {q['name']}: {q['pending'] + q['delayed']} task(s) and no "
                         "live worker serves it")  # fmt: skip
    return found


def cmd_check(args: argparse.Namespace, connect: Connect) -> int:
    """Exit 0 when all is well, 1 with a reason a line when not, 2 when Redis is down."""
    try:
        storage = connect(args)
        queues = [check_queue(q) for q in args.queue] or storage.queues.names()
        found = problems(storage, queues, args.max_wait)
    except ConnectionFailed as exc:
        found, code = [str(exc)], 2
    else:
        code = 1 if found else 0
    if args.json:
        terminal.print_json({"ok": not found, "problems": found})
    elif found:
        for line in found:
            print(f"ztq check: {line}", file=sys.stderr)
    else:
        print("ok")
    return code


# -- several systems (docs/systems.md) ---------------------------------------------------------
SYSTEM_COLUMNS = (Col("SYSTEM"), Col("REDIS", wrap=20, drop=1), Col("PREFIX", drop=2),
                  Col("STATUS"), Col("WORKERS", number=True), Col("LOST", number=True, drop=3),
                  Col("QUEUES", number=True, drop=4), Col("READY", number=True),
                  Col("RUNNING", number=True, drop=5),
                  Col("ERRORS", number=True))  # fmt: skip


def cmd_systems(args: argparse.Namespace, connect: Connect) -> int:
    """Every system of ``ztq.systems`` (the default first) with its health, each asked at
    the same time; exit 1 when one does not answer."""

    def storage_of(system: settings.System) -> Storage:
        return Storage(make_client(system.redis_url), prefix=system.prefix, url=system.redis_url)

    found = health_of_all(settings.systems(path=args.config), storage_of, DEFAULT_LOST_AFTER)
    if args.json:
        terminal.print_json([h.as_dict() for h in found])
    else:
        t = terminal.table(*SYSTEM_COLUMNS, title="Systems")
        for h in found:
            name = f"{h.name} (default)" if h.default else h.name
            if not h.reachable:
                t.add_row(name, h.redis, h.prefix, Text("unreachable", style="bold red"),
                          "–", "–", "–", "–", "–", "–")  # fmt: skip
                continue
            lost = Text(str(h.lost), style="bold red" if h.lost else "")
            errors = Text(str(h.errors), style="red" if h.errors else "")
            t.add_row(name, h.redis, h.prefix, Text("ok", style="green"), str(h.workers), lost,
                      str(h.queues), str(h.waiting), str(h.running), errors)  # fmt: skip
        terminal.out().print(t)
        for h in found:
            if not h.reachable:
                terminal.err().print(f"ztq systems: {h.name}: {h.problem}")
    return 0 if all(h.reachable for h in found) else 1
