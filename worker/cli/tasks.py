"""``ztq errors`` and ``ztq task``: the failed tasks (a list, the groups) and one task in full.

The groups are the console's: read from the exact per-group counters the scripts keep
(:func:`ztq.core.monitor.groups.counted_groups`), so that a group reads the same number here
and on every console page, at any size; a ``--task`` or ``--grep`` filter needs the records,
and then the newest ``--window`` errors are grouped as they are read (said so). A task's
arguments over :data:`ztq.core.monitor.fmt.ARGS_SHOWN` characters are cut, with their whole
size said; ``--full`` prints them whole.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

from rich.text import Text

from ztq.core.engine.keys import check_queue
from ztq.core.engine.record import TaskRecord
from ztq.core.engine.storage import Storage
from ztq.core.monitor import fmt, overview
from ztq.core.monitor import queues as monitor
from ztq.core.monitor.filters import task_matcher
from ztq.core.monitor.groups import ErrorGroup, counted_groups, group_errors
from ztq.worker.cli import terminal
from ztq.worker.cli.terminal import Col

Connect = Callable[[argparse.Namespace], Storage]
TIMES = ("enqueued", "due", "started", "ended", "failed")  # epoch ms in a task's dict
SCAN_BUDGET = 10_000  # errors a filtered list may read to fill its page
ARGS_FIELDS = ("args", "kwargs", "payload_truncated")  # what task_dict holds of the arguments

# ``drop``: left out on a narrow terminal, the highest first (docs/cli.md gives the order)
ERROR_COLUMNS = (Col("ID"), Col("QUEUE"), Col("TASK", drop=2), Col("ERROR", wrap=24),
                 Col("FAILED", number=True, drop=1),
                 Col("ATTEMPTS", number=True, drop=3))  # fmt: skip
GROUP_COLUMNS = (Col("COUNT", number=True), Col("ERROR", wrap=24), Col("WHERE", wrap=20, drop=1),
                 Col("QUEUES", wrap=12, drop=2), Col("LAST", number=True))  # fmt: skip


def _error_rows(storage: Storage, args: argparse.Namespace, limit: int) -> list[monitor.Row]:
    match = task_matcher(args.task or "", args.grep or "")
    page = monitor.score_page(storage, "errors", _queues(storage, args), None, limit,
                              match=match, budget=max(limit, SCAN_BUDGET))  # fmt: skip
    return page.rows


def _queues(storage: Storage, args: argparse.Namespace) -> list[str]:
    return (
        storage.queues.shards_of(check_queue(args.queue)) if args.queue else storage.queues.names()
    )


def error_groups(storage: Storage, args: argparse.Namespace) -> list[ErrorGroup]:
    """The groups as the console's grouped view reads them: exact (the counters) without a
    task or text filter; with one, the newest ``--window`` errors that match, grouped."""
    if args.task or args.grep:
        return group_errors(_error_rows(storage, args, args.window))
    return counted_groups(storage, _queues(storage, args))


def _show_groups(storage: Storage, args: argparse.Namespace) -> int:
    groups = error_groups(storage, args)
    if args.json:
        terminal.print_json([vars(g) for g in groups])
        return 0
    t = terminal.table(*GROUP_COLUMNS, title="Error groups")
    now = time.time() * 1000
    for g in groups:
        queues = ", ".join(f"{name} ({n})" for name, n in sorted(g.queues.items()))
        t.add_row(str(g.count), g.message[:120], g.frame or "–", queues,
                  f"{terminal.age(now - g.last)} ago")  # fmt: skip
    terminal.out().print(t if groups else "no errors")
    if groups and not groups[0].exact:
        terminal.err().print(f"the newest {args.window} errors that match, grouped (--window)")
    return 0


def cmd_errors(args: argparse.Namespace, connect: Connect) -> int:
    storage = connect(args)
    if args.id:
        return cmd_task(args, connect, storage)
    if args.groups:
        return _show_groups(storage, args)
    rows = _error_rows(storage, args, args.limit)
    if args.json:
        terminal.print_json([overview.row_dict(r, "failed_at") for r in rows])
        return 0
    t = terminal.table(*ERROR_COLUMNS, title="Errors")
    now = time.time() * 1000
    for r in rows:
        rec = r.record
        if rec is None:
            continue
        t.add_row(r.id, r.queue, rec.task, str(rec.get("error") or "")[:120],
                  f"{terminal.age(now - (r.score or now))} ago",
                  str(rec.get("attempts") or 0))  # fmt: skip
    terminal.out().print(t if rows else "no errors")
    return 0


def _show_task(rec: TaskRecord, as_json: bool, full: bool) -> None:
    data = overview.task_dict(rec, full=True)
    cut = fmt.args_cut(rec)
    if full:  # the arguments whole, whatever their size: after the table, as JSON text
        data = {k: v for k, v in data.items() if k not in ARGS_FIELDS}
        if as_json:
            data.update(args=rec.args, kwargs=rec.kwargs)
    elif cut is not None and not as_json:
        data = {k: v for k, v in data.items() if k not in ARGS_FIELDS}
        data["arguments"] = f"{cut[0]} … {cut[1]} in all (ztq task {rec.id} --full prints all)"
    if as_json:
        terminal.print_json(data)
        return
    console = terminal.out()
    t = terminal.table(Col("FIELD"), Col("VALUE", wrap=20))
    for key, value in data.items():
        if key not in ("traceback", "traceback_truncated", "options") and "result" not in key:
            t.add_row(key, terminal.when(value) if key in TIMES else str(value))
    console.print(t)
    if full:  # not through rich: megabytes of text are written, not laid out
        console.file.write(f"arguments: {fmt.args_whole(rec)}\n")
        console.file.flush()
    result = data.get("result_truncated", data.get("result_text"))
    result = json.dumps(data["result"]) if "result" in data else result  # 0, "0", null apart
    if result is not None:
        console.print(Text("result: ", style="bold") + Text(result))
    if data.get("traceback"):
        console.print(Text(str(data["traceback"]), style="red"))


def cmd_task(args: argparse.Namespace, connect: Connect, storage: Storage | None = None) -> int:
    storage = storage or connect(args)
    found = monitor.find_task(storage, args.id, check_queue(args.queue) if args.queue else None)
    if not found:
        terminal.err().print(
            f"ztq: no task {args.id}" + (f" in {args.queue}" if args.queue else "")
        )
        return 1
    for rec in found:
        _show_task(rec, args.json, bool(getattr(args, "full", False)))
    return 0
