"""How the ``ztq`` command talks to people and to scripts.

Tables, progress bars and colours come from rich, which turns colours off when the output
is not a terminal or ``NO_COLOR`` is set. Tables fit the terminal by leaving out their less
important columns and wrapping their text columns, never by cutting a header or wrapping
what names a row (:class:`FitTable`). Times are shown in UTC with their age, lengths of time
in one format (:func:`ztq.core.monitor.fmt.duration`). Every read command also has ``--json`` (the
same dicts as the console's ``/api``, times in epoch milliseconds), so scripts never parse
tables. Destroying commands ask first on a terminal and refuse without ``--yes`` anywhere
else.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.prompt import Confirm
from rich.table import Table
from rich.text import Text

from ztq.core.errors import ZtqError
from ztq.core.monitor.fmt import duration, ts

PIPE_WIDTH = 200  # columns of tables written to a pipe or a file (no terminal to measure)
GAP = 2  # blanks between two columns of a table
NUMBER_LIST = re.compile(r"\[\n\s*(-?\d[\d.eE+-]*(?:,\n\s*-?\d[\d.eE+-]*)*)\n\s*\]")


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


def dumps(data: Any) -> str:
    """Indented JSON whose lists of numbers take one line each (``[29925360, 4, 1]``), so
    that a queue's 60 minutes of throughput are 60 lines, not 300."""
    text = json.dumps(data, indent=2, default=str)
    # a "[" followed by a line break is never inside a string (JSON escapes line breaks)
    return NUMBER_LIST.sub(lambda m: "[" + re.sub(r",\n\s*", ", ", m[1]) + "]", text)


def print_json(data: Any) -> None:
    sys.stdout.write(dumps(data) + "\n")


def age(ms: Any) -> str:
    """A length of time in ms (``350 ms``, ``4.2 s``, ``3m 12s``, ``2h 05m``); ``–`` for none."""
    return duration(ms) if ms is not None else "–"


def when(ms: Any, now: float | None = None) -> str:
    """An epoch-ms moment as ``2026-11-24 10:55:12 UTC (4m 00s ago)`` (``(in 4m 00s)`` when
    it is to come); what is not a time is shown as it is."""
    shown = ts(ms)
    if not shown:
        return str(ms)
    delta = (time.time() if now is None else now) * 1000 - float(ms)
    relative = f"in {duration(-delta)}" if delta < 0 else f"{duration(delta) or '0 ms'} ago"
    return f"{shown} UTC ({relative})"


@dataclass(frozen=True)
class Col:
    """A column of a :class:`FitTable`.

    ``number``: right-aligned. ``wrap``: a text column that may wrap (at blanks; a word
    longer than the column folds), kept at least ``wrap`` wide while other columns can be
    left out; 0 (the default): the column never wraps, so names and ids stay whole on one
    line. ``drop``: left out when the table does not fit, the highest first; 0 (the
    default): never left out. A header is never cut.
    """

    header: str
    number: bool = False
    wrap: int = 0
    drop: int = 0


class FitTable:
    """A table that fits the width it is drawn in (a terminal's, or ``PIPE_WIDTH``).

    When all its columns do not fit, the droppable ones are left out, the highest
    ``drop`` first, until the others fit with their wrapping columns at their ``wrap``
    width; then the wrapping columns share what is left (down to their header's width if
    need be). Columns that never wrap keep their full width, even if the lines then run
    past the edge of a very narrow terminal.
    """

    def __init__(self, *columns: Col, title: str = "") -> None:
        self.columns = columns
        self.title = title
        self.rows: list[list[Text]] = []

    def add_row(self, *cells: str | Text) -> None:
        self.rows.append([c if isinstance(c, Text) else Text(c) for c in cells])

    def _sizes(self, index: int) -> tuple[int, int]:
        """The longest line and the longest word of a column, its header included."""
        texts = [self.columns[index].header, *(row[index].plain for row in self.rows)]
        line = max(cell_len(line) for text in texts for line in text.split("\n"))
        word = max((cell_len(word) for text in texts for word in text.split()), default=0)
        return line, word

    def widths(self, room: int) -> dict[int, int]:
        """Index -> width of each column shown in ``room`` cells, in the columns' order."""
        cols = self.columns
        natural, word = zip(*(self._sizes(i) for i in range(len(cols))), strict=True)
        least = [cell_len(c.header) if c.wrap else natural[i] for i, c in enumerate(cols)]
        wanted = [max(least[i], min(natural[i], c.wrap)) if c.wrap else natural[i]
                  for i, c in enumerate(cols)]  # fmt: skip
        shown = list(range(len(cols)))

        def total(widths: dict[int, int]) -> int:
            return sum(widths.values()) + GAP * (len(widths) - 1)

        while total({i: wanted[i] for i in shown}) > room:
            droppable = [i for i in shown if cols[i].drop]
            if not droppable:
                break
            shown.remove(max(droppable, key=lambda i: cols[i].drop))
        widths = {i: wanted[i] for i in shown}
        # too wide still: narrow the wrapping columns, the widest first; room to spare:
        # widen them so that no word folds, then towards their longest line, the one that
        # lacks most first
        while total(widths) > room:
            i = max(shown, key=lambda i: widths[i] - least[i])
            if widths[i] <= least[i]:
                break
            widths[i] -= 1
        for i in shown:
            if cols[i].wrap:
                lacks = min(word[i], natural[i]) - widths[i]
                widths[i] += max(0, min(lacks, room - total(widths)))
        while total(widths) < room:
            i = max(shown, key=lambda i: natural[i] - widths[i] if cols[i].wrap else 0)
            if not cols[i].wrap or widths[i] >= natural[i]:
                break
            widths[i] += 1
        return widths

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        widths = self.widths(options.max_width)
        needed = sum(widths.values()) + GAP * (len(widths) - 1)
        t = Table(title=self.title or None, title_justify="left", box=None, header_style="bold",
                  pad_edge=False, width=needed if needed > options.max_width else None)  # fmt: skip
        for i, width in widths.items():
            c = self.columns[i]
            t.add_column(c.header, justify="right" if c.number else "left", width=width,
                         no_wrap=not c.wrap, overflow="fold")  # fmt: skip
        for row in self.rows:
            t.add_row(*(row[i] for i in widths))
        yield t


def table(*columns: Col, title: str = "") -> FitTable:
    return FitTable(*columns, title=title)


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
            now = time.strftime("%H:%M:%S UTC", time.gmtime())
            console.print(f"-- {now}, every {every:g} s --", style="dim")
            sys.stdout.flush()
            time.sleep(every)
    except KeyboardInterrupt:
        return 0
