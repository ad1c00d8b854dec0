"""Jinja filters: times, durations, sizes and task calls, short and escaped by the caller.

Times in Redis are epoch milliseconds. Pages print them in UTC (``ts``) inside ``<time>``
elements that the page script may show in the browser's zone; ages are relative to now.
Nothing here marks text safe: templates autoescape whatever these return.
"""

from __future__ import annotations

import json
import math
import time
from datetime import datetime, timezone
from typing import Any

from ztq.core.monitor import groups
from ztq.core.monitor.timings import merged

ELLIPSIS = "…"
# characters of a task's stored arguments (its payload JSON: args, kwargs, options) a page
# or ``ztq task`` shows; longer ones are cut there with their whole size said, and are had
# whole from the task's download link or ``ztq task ID --full`` (issue 39, point 8)
ARGS_SHOWN = 2_000
MAX_MS = 253_402_300_799_999  # 9999-12-31 23:59:59.999 UTC, the last moment a datetime holds


def _ms(value: Any) -> float | None:
    """A positive number of ms a date can show; None for anything else (text, NaN, inf, a
    time past the year 9999): Redis holds what any writer put there."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if 0 < number <= MAX_MS else None


def ts(value: Any, style: str = "short") -> str:
    """``2025-11-22 09:40:12`` (UTC); ``style='iso'`` gives ISO 8601 for ``datetime=``."""
    ms = _ms(value)
    if ms is None:
        return ""
    try:
        when = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return ""
    if style == "iso":
        return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return when.strftime("%Y-%m-%d %H:%M:%S")


# a duration's units in each language of the console: Chinese pages write 1分12秒, not 1m 12s
UNITS = {
    "en": ("{n:.0f} ms", "{n:.1f} s", "{a}m {b:02d}s", "{a}h {b:02d}m", "{a}d {b}h"),
    "zh": ("{n:.0f}毫秒", "{n:.1f}秒", "{a}分{b:02d}秒", "{a}小时{b:02d}分", "{a}天{b}小时"),
}


def duration(value: Any, lang: str = "en") -> str:
    """A length of time given in ms: ``350 ms``, ``4.2 s``, ``3m 12s``, ``2h 5m``, ``3d 4h``
    (``lang="zh"``: ``350毫秒``, ``4.2秒``, ``3分12秒``, ``2小时05分``, ``3天4小时``)."""
    units = UNITS.get(lang, UNITS["en"])
    ms = _ms(value)
    if ms is None:
        return units[0].format(n=0) if value in (0, "0", 0.0) else ""
    if ms < 1000:
        return units[0].format(n=ms)
    s = ms / 1000
    if s < 60:
        return units[1].format(n=s)
    m, s = divmod(int(s), 60)
    if m < 60:
        return units[2].format(a=m, b=s)
    h, m = divmod(m, 60)
    if h < 48:
        return units[3].format(a=h, b=m)
    d, h = divmod(h, 24)
    return units[4].format(a=d, b=h)


def ago(value: Any, now: float | None = None, lang: str = "en") -> str:
    """Time between an epoch-ms moment and now, past or future, as a duration (templates
    add "ago" / "in" in the page's language)."""
    ms = _ms(value)
    if ms is None:
        return ""
    delta = abs((time.time() if now is None else now) * 1000 - ms)
    return duration(delta, lang) or duration(0, lang)


def size(value: Any) -> str:
    try:
        n = float(value)
    except (TypeError, ValueError):
        return ""
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def number(value: Any) -> str:
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return str(value or "")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 1)] + ELLIPSIS


def brief(value: Any, limit: int = 160) -> str:
    """Compact JSON (or the text itself), cut to ``limit`` characters."""
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    return _cut(value.replace("\n", " "), limit)


def _literal(value: Any, out: list[str], budget: int, depth: int = 0) -> int:
    """Append ``value`` as a Python literal to ``out`` (strings as JSON writes them, which
    Python reads too; True, False and None; lists and dicts), stopping once ``budget``
    characters are written or 50 levels deep: a 100 kB or 5,000-deep argument costs what
    the cut shows. Returns the budget left."""
    if budget <= 0:
        return budget
    if depth > 50:
        out.append(ELLIPSIS)
        return budget - 1
    if isinstance(value, (list, tuple)):
        opened, closed, items = "[", "]", [(None, v) for v in value]
    elif isinstance(value, dict):
        opened, closed, items = "{", "}", list(value.items())
    else:
        if value is None or isinstance(value, bool):
            text = repr(value)
        else:
            text = json.dumps(value, ensure_ascii=False, default=str)
        out.append(text)
        return budget - len(text)
    out.append(opened)
    budget -= 1
    for n, (key, item) in enumerate(items):
        if budget <= 0:
            return budget
        if n:
            out.append(", ")
            budget -= 2
        if key is not None:
            text = json.dumps(str(key), ensure_ascii=False) + ": "
            out.append(text)
            budget -= len(text)
        budget = _literal(item, out, budget, depth + 1)
    out.append(closed)
    return budget - 1


def call(record: Any, limit: int = 160) -> str:
    """A task record's call as Python writes it, the task's short name first:
    ``add(1, 2, to="ann")``, ``boom("b.bad")``, cut to ``limit``. (Without the name a lone
    argument read ``("b.bad")``, neither a tuple nor plainly a call.)"""
    if record is None:
        return ""
    if getattr(record, "payload_error", ""):
        return _cut(record.payload_text.replace("\n", " "), limit) + _in_all(record)
    out = [str(record.task).rsplit(".", 1)[-1], "("]
    budget = limit + 1 - len(out[0])
    for n, value in enumerate(record.args):
        if budget <= 0:
            break
        out.append(", " if n else "")
        budget = _literal(value, out, budget - (2 if n else 0))
    for n, (key, value) in enumerate(record.kwargs.items()):
        if budget <= 0:
            break
        out.append(f"{', ' if n or record.args else ''}{key}=")
        budget = _literal(value, out, budget - len(out[-1]))
    out.append(")")
    return _cut("".join(out).replace("\n", " "), limit) + _in_all(record)


def _in_all(record: Any) -> str:
    """`` (5.2 MB in all)`` after a list's call of a task whose arguments are cut on its page."""
    cut = args_cut(record)
    return f" ({cut[1]} in all)" if cut else ""


def args_cut(record: Any, limit: int = ARGS_SHOWN) -> tuple[str, str] | None:
    """(the start of a task's stored arguments, their whole size: ``5.2 MB``) when they are
    longer than ``limit`` characters; None when they are shown whole."""
    text = str(getattr(record, "payload_text", "") or "")
    if len(text) <= limit:
        return None
    return text[:limit], size(len(text.encode("utf-8", "surrogatepass")))


def args_whole(record: Any) -> str:
    """A task's arguments whole as one JSON object (``task``, ``args``, ``kwargs``,
    ``options``); a payload that does not read as a task's, as it is stored."""
    if getattr(record, "payload_error", ""):
        return str(record.payload_text)
    whole = {"task": record.task, "args": record.args, "kwargs": record.kwargs,
             "options": record.options}  # fmt: skip
    return json.dumps(whole, ensure_ascii=False, default=str)


def error_type(record: Any) -> str:
    """The error type of a failed task's record: its exception's type, or ``unknown`` when
    it died without a Python exception (see :func:`ztq.core.monitor.groups.died`)."""
    if record is None:
        return ""
    return groups.error_type(str(record.get("error") or ""), str(record.get("traceback") or ""))


def pretty(value: Any, limit: int = 65536) -> str:
    """Indented JSON for detail pages, cut at ``limit`` characters with a note."""
    text = json.dumps(value, ensure_ascii=False, indent=2, default=str)
    if len(text) > limit:
        return text[:limit] + f"\n{ELLIPSIS} ({len(text) - limit:,} more characters)"
    return text


def chart(points: list[tuple[int, int, int]], width: int = 240, height: int = 40) -> dict[str, Any]:
    """Bars for an inline SVG: per minute a done bar with a failed bar stacked on top."""
    peak = max((d + f for _, d, f in points), default=0) or 1
    step = width / max(1, len(points))
    bars = []
    for n, (minute, done, failed) in enumerate(points):
        hd = round(done / peak * (height - 2), 1)
        hf = round(failed / peak * (height - 2), 1)
        bars.append(
            {
                "x": round(n * step, 1),
                "w": round(max(step - 1, 1), 1),
                "done": done,
                "failed": failed,
                "yd": round(height - hd, 1),
                "hd": hd,
                "yf": round(height - hd - hf, 1),
                "hf": hf,
                "minute": ts(minute * 60_000)[11:16],
            }
        )
    total_done = sum(d for _, d, _ in points)
    total_failed = sum(f for _, _, f in points)
    return {
        "width": width,
        "height": height,
        "bars": bars,
        "peak": peak,
        "done": total_done,
        "failed": total_failed,
    }


def timechart(slots: list[Any], which: str, width: int = 420, height: int = 90) -> dict[str, Any]:
    """p50 / p95 / p99 lines of ``which`` (``wait`` or ``run``) over time slots
    (:class:`ztq.core.monitor.timings.Slot`), on a log scale so 5 ms and 5 s both show; slots
    without runs leave gaps."""
    series: dict[str, list[tuple[int, float]]] = {"p50": [], "p95": [], "p99": []}
    for n, slot in enumerate(slots):
        for name, value in getattr(slot, which).percentiles().items():
            if value is not None:
                series[name].append((n, max(1.0, value)))
    top = max((v for pts in series.values() for _, v in pts), default=1.0)
    decades = max(1, math.ceil(math.log10(top)))
    step = width / max(1, len(slots) - 1)

    def y(ms: float) -> float:
        return round(height - 2 - math.log10(ms) / decades * (height - 4), 1)

    lines = []
    for name, pts in series.items():
        runs: list[list[str]] = []
        last = -2
        for n, value in pts:
            if n != last + 1:
                runs.append([])
            runs[-1].append(f"{round(n * step, 1)},{y(value)}")
            last = n
        lines.append({"name": name, "runs": [" ".join(r) for r in runs]})
    ticks = [{"y": y(10**d), "label": duration(10**d)} for d in range(decades + 1)]
    p = merged_percentiles(slots, which)
    return {"width": width, "height": height, "lines": lines, "ticks": ticks, "summary": p}


def merged_percentiles(slots: list[Any], which: str) -> dict[str, float | None]:
    return getattr(merged(slots), which).percentiles()  # type: ignore[no-any-return]


def progress(value: Any) -> dict[str, Any]:
    """What a task reported with ``report_progress(**data)`` (or a task record), for a bar
    and a label.

    ``{"done": 3, "total": 10}`` (or ``current``/``total``) and ``{"percent": 30}`` give a
    bar; anything else is shown as short text.
    """
    if hasattr(value, "meta"):  # a task record: its stored progress, if it can be read
        try:
            value = value.progress
        except ValueError:
            value = value.meta.get("progress")
    percent: float | None = None
    if isinstance(value, dict):
        total = value.get("total")
        done = value.get("done", value.get("current"))
        if isinstance(total, (int, float)) and isinstance(done, (int, float)) and total > 0:
            percent = done * 100 / total
        elif isinstance(value.get("percent"), (int, float)):
            percent = float(value["percent"])
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        percent = float(value) * (100 if 0 <= value <= 1 else 1)
    if percent is not None:
        percent = max(0.0, min(100.0, percent))
    text = "" if value is None else brief(value, 80)
    return {"percent": None if percent is None else round(percent), "text": text}


def memory_summary(m: dict[str, Any]) -> str:
    """Redis memory against maxmemory, the share finished records hold and what yielded
    under maxmemory, from ``queues.redis_memory`` (docs/deploy.md, "Sizing Redis")."""
    used, limit = m["used"], m["maxmemory"]
    line = f"Redis memory: {size(used)}"
    line += f" of {size(limit)} maxmemory ({used / limit:.0%})" if limit else " (no maxmemory)"
    line += f", finished records ~{size(m['finished'])}"
    if used:
        line += f" ({m['finished'] / used:.0%})"
    if m["oom_compact"] or m["oom_dropped"]:
        line += (f"; under maxmemory {m['oom_compact']} ends kept compact, "
                 f"{m['oom_dropped']} finished records dropped early")  # fmt: skip
    return line
