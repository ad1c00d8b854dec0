"""``ztq batch``: the batches (newest first), one batch with its members' states and a
progress bar, and the redo of a batch's failed members (docs/batches.md); and the batches
table ``ztq info`` shows. Reads go through ``ztq.core.monitor.batches``, as the console's
Batches page does, so both show the same."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from rich.console import Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.text import Text

from ztq.core.engine.storage import Storage
from ztq.core.errors import ZtqError
from ztq.core.monitor import batches, streams
from ztq.worker.cli import terminal
from ztq.worker.cli.terminal import Col

BATCH_COLUMNS = (Col("BATCH"), Col("DESCRIPTION", wrap=16, drop=2), Col("TOTAL", number=True),
                 Col("DONE", number=True), Col("FAILED", number=True), Col("OPEN", number=True),
                 Col("STATE"), Col("CREATED", number=True, drop=1))  # fmt: skip
MEMBER_COLUMNS = (Col("MEMBER"), Col("QUEUE", drop=1), Col("STATE"), Col("ENDED"))
STATE_STYLE = {"success": "green", "complete": "yellow", "open": "", "failed": "red",
               "error": "red", "done": "green", "running": "cyan"}  # fmt: skip


def batches_table(rows: list[dict[str, Any]]) -> RenderableType:
    if not rows:
        return Text("no batch", style="dim")
    t = terminal.table(*BATCH_COLUMNS, title="Batches")
    for r in rows:
        t.add_row(r["id"], r["description"], str(r["total"]), str(r["done"]),
                  Text(str(r["failed"]), style="red" if r["failed"] else ""), str(r["open"]),
                  Text(r["state"], style=STATE_STYLE.get(r["state"], "")),
                  terminal.when(r["created_ms"]))  # fmt: skip
    return t


RECENT = 10  # batches ``ztq info`` shows


def recent(storage: Storage) -> tuple[list[dict[str, Any]], RenderableType]:
    """The newest batches, as ``ztq info`` shows them (dicts for ``--json``, a table)."""
    rows = batches.batch_list(storage, 0, RECENT)["batches"]
    return rows, batches_table(rows)


def batch_view(data: dict[str, Any]) -> RenderableType:
    head = Text.assemble((f"batch {data['id']}", "bold"), f"  {data['description']}  ",
                         (data["state"], STATE_STYLE.get(data["state"], "")))  # fmt: skip
    counts = Text(f"{data['total']} member(s): {data['done']} done, {data['failed']} failed, "
                  f"{data['running']} running, {data['pending']} pending"
                  + (f"; child of {data['parent']}" if data["parent"] else ""))  # fmt: skip
    bar = ProgressBar(total=max(data["total"], 1), completed=data["done"] + data["failed"],
                      width=40)  # fmt: skip
    t = terminal.table(*MEMBER_COLUMNS, title="Members")
    for m in data["members"]:
        state = m["state"] or "none"
        t.add_row(("batch " if m["child"] else "") + m["id"], m["queue"],
                  Text(state, style=STATE_STYLE.get(state, "")), m["ended"] or "–")  # fmt: skip
    shown = f"members {data['offset'] + 1}-{data['offset'] + len(data['members'])}"
    return Group(head, counts, bar, Text(f"{data['percent']}% ended", style="dim"), t,
                 Text(shown, style="dim"))  # fmt: skip


def cmd_batch(args: argparse.Namespace, connect: Callable[[argparse.Namespace], Storage],
              who: str, system: str = "") -> int:  # fmt: skip
    """``ztq batch [ID] [--redo]`` (its arguments: ``ztq.worker.cli.commands``)."""
    storage = connect(args)
    if args.redo:
        if not args.id:
            raise ZtqError("name the batch: ztq batch ID --redo")

        def note(queue: str, n: int) -> None:
            streams.write_audit(storage, who, "redo batch", queue=queue, count=n,
                                detail=f"batch {args.id}", system=system)  # fmt: skip

        moved = batches.redo_failed(storage, args.id, note)
        print(f"{moved} failed member(s) of batch {args.id} back to run")
        return 0
    if args.id:
        data = batches.batch_page(storage, args.id, max(0, args.offset), max(1, args.limit))
        view: RenderableType = batch_view(data)
    else:
        data = batches.batch_list(storage, max(0, args.offset), max(1, args.limit))
        view = batches_table(data["batches"])
    if args.json:
        terminal.print_json(data)
    else:
        terminal.out().print(view)
    return 0
