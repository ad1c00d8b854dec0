"""How the ``ztq`` command talks to people and to scripts.

Tables, progress bars and colours come from rich, which turns colours off when the output
is not a terminal or ``NO_COLOR`` is set. Every read command also has ``--json`` (the
same dicts as the console's ``/api``), so scripts never parse tables. Destroying commands
ask first on a terminal and refuse without ``--yes`` anywhere else.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console, RenderableType
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.prompt import Confirm
from rich.table import Table

from ztq.core.errors import ZtqError

PIPE_WIDTH = 200  # columns of tables written to a pipe or a file (no terminal to measure)


class NotConfirmed(ZtqError):
    """A destroying command without ``--yes`` where nobody can be asked."""


def out() -> Console:
    """stdout: colours and in-place updates only on a terminal."""
    console = Console(highlight=False, soft_wrap=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=PIPE_WIDTH, soft_wrap=False)
    return console


def err() -> Console:
    return Console(stderr=True, highlight=False)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def table(*columns: str, title: str = "") -> Table:
    """A table whose columns named with a leading ``>`` are right-aligned numbers."""
    t = Table(title=title or None, title_justify="left", box=None, header_style="bold",
              pad_edge=False)  # fmt: skip
    for name in columns:
        if name.startswith(">"):
            t.add_column(name[1:], justify="right", no_wrap=True)
        else:
            t.add_column(name, overflow="fold")
    return t


def confirm(question: str, yes: bool) -> None:
    """Go on with ``--yes`` or a "y" on a terminal; raise :class:`NotConfirmed` otherwise."""
    if yes:
        return
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise NotConfirmed(f"{question} — not a terminal to ask on: add --yes to go ahead")
    if not Confirm.ask(question, default=False, console=err()):
        raise NotConfirmed("nothing was changed")


@contextmanager
def progress(label: str, total: int) -> Iterator[Callable[[int], None]]:
    """Yields ``advance(n)``: a bar on a terminal, nothing elsewhere (the caller prints
    the count at the end)."""
    console = err()
    if not console.is_terminal:
        yield lambda n: None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())  # fmt: skip
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(label, total=total or None)
        yield lambda n: bar.advance(task, n)


def watch(render: Callable[[], RenderableType], every: float) -> int:
    """Show ``render()`` again every ``every`` seconds until Ctrl-C: in place on a terminal,
    one snapshot after another elsewhere."""
    console = out()
    try:
        if console.is_terminal:
            with Live(render(), console=console, auto_refresh=False) as live:
                while True:
                    time.sleep(every)
                    live.update(render(), refresh=True)
        while True:
            console.print(render())
            console.print(f"-- {time.strftime('%H:%M:%S')}, every {every:g} s --", style="dim")
            sys.stdout.flush()
            time.sleep(every)
    except KeyboardInterrupt:
        return 0
