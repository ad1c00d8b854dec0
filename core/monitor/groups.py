"""Errors grouped by error type and top frame (the group), or by error type and what
happened across frames (the kind). Each queue keeps exact counters of both, moved by the
scripts that move tasks into and out of its error list (_lib.lua, "Exact error counters"):
:func:`counted_groups` reads them in O(groups). The keys are computed here exactly as the
scripts compute them (on the UTF-8 bytes), for a record that predates them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ztq.core.engine.keys import split_shard
from ztq.core.engine.record import TaskRecord
from ztq.core.engine.storage import Storage
from ztq.core.monitor.pages import Row, fetch_records

_FRAME = re.compile(rb'^[ \t\r\n\v\f]*File "([^"]*)", line ([0-9]+), in (.+)$')
_KIND = re.compile(rb"[A-Za-z_][A-Za-z0-9_.]{0,199}")
_SPACE = b" \t\r\n\v\f"


# the error type of a task that died without a Python exception of its own (no traceback):
# it lost its worker too often (WorkerLost), its process slot died or was killed (ChildDied,
# Killed, HardTimeout); what happened stays in the message
UNKNOWN = "unknown"


def died(error: str, traceback: str) -> bool:
    """Did a failure end the task without a Python exception? (An error and no traceback:
    every exception a task raises, and every bad payload, comes with one.)"""
    return bool(error) and not traceback


def error_type(error: str, traceback: str) -> str:
    """``ValueError`` for a task that raised one; :data:`UNKNOWN` when it died without an
    exception of its own (see :func:`died`)."""
    return UNKNOWN if died(error, traceback) else error_kind(error)


@dataclass
class ErrorGroup:
    kind: str
    frame: str
    count: int = 0
    first: int = 0
    last: int = 0
    message: str = ""
    sample: tuple[str, str] = ("", "")  # (queue, id) of the newest one
    tasks: dict[str, int] = field(default_factory=dict)
    queues: dict[str, int] = field(default_factory=dict)
    key: str = ""  # see group_key: what the console's links and actions name a group by
    again: int = 0  # of them, tasks that failed again after a redo
    trace: str = ""  # the newest one's traceback (the start of it)
    frames: dict[str, int] = field(default_factory=dict)  # a kind's top frames (exact view)
    exact: bool = False  # counted over the whole error lists (the counters), not a window


def _utf8(text: str) -> bytes:
    return (text or "").encode("utf-8", "surrogatepass")


def _hash(text: bytes) -> str:
    """12 hex digits of two polynomial hashes of ``text`` (as _lib.lua's err_hash: plain
    arithmetic, so that Redis and its in-memory twin, which has no ``sha1hex``, agree)."""
    a = b = 0
    for c in text:
        a = (a * 257 + c) % 16777213
        b = (b * 263 + c) % 16777199
    return f"{a:06x}{b:06x}"


def _cut(text: bytes, n: int) -> bytes:
    """The first ``n`` bytes, not cutting a UTF-8 character in two (as _lib.lua's err_cut)."""
    if len(text) <= n:
        return text
    while n > 0 and 0x80 <= text[n] < 0xC0:
        n -= 1
    return text[:n]


def _kind_bytes(error: bytes) -> bytes:
    head = error.split(b":", 1)[0].strip(_SPACE)
    return head if _KIND.fullmatch(head) else (_cut(head, 60) or b"?")


def _frame_bytes(traceback: bytes) -> bytes:
    for line in reversed(traceback.split(b"\n")):
        m = _FRAME.match(line)
        if m:
            path = b"/".join(m.group(1).replace(b"\\", b"/").split(b"/")[-2:])
            return path + b":" + m.group(2) + b" in " + m.group(3).strip(_SPACE)
    return b""


def error_kind(error: str) -> str:
    """``ValueError`` of ``ValueError: boom``; the first words when it is not a type name."""
    return _kind_bytes(_utf8(error)).decode("utf-8", "replace")


def top_frame(traceback: str) -> str:
    """The innermost ``File ..., line N, in fn`` of a traceback as ``dir/file.py:N in fn``."""
    return _frame_bytes(_utf8(traceback)).decode("utf-8", "replace")


TRACE_LIMIT = 4000  # characters of a group's example traceback the grouped views show
GROUP_KEY = re.compile(r"^[0-9a-f]{12}$")


def _parts(rec: TaskRecord) -> tuple[str, str, str]:
    error, traceback = str(rec.get("error") or ""), str(rec.get("traceback") or "")
    # died: the type is unknown, the groups are still per what happened (WorkerLost, ...)
    return error_type(error, traceback), top_frame(traceback) or "", error_kind(error)


def _part_bytes(rec: TaskRecord) -> tuple[bytes, bytes, bytes]:
    error, traceback = _utf8(str(rec.get("error") or "")), _utf8(str(rec.get("traceback") or ""))
    kind = _kind_bytes(error)
    return (UNKNOWN.encode() if error and not traceback else kind), _frame_bytes(traceback), kind


def group_key(rec: TaskRecord) -> str:
    """The group of a failed task as 12 hex digits (error type, top frame, what happened):
    a link or an action names one group by it, never by its task name. The key the record
    keeps (``eg``, written by the script that failed it) when it has one."""
    kept = rec.get("eg")
    if isinstance(kept, str) and GROUP_KEY.match(kept):
        return kept
    t, f, k = _part_bytes(rec)
    return _hash(b"\x00".join((t, f, k)))


def kind_key(rec: TaskRecord) -> str:
    """The kind of a failed task as 12 hex digits (error type and what happened, whatever
    the frame): the view of an incident raised from several lines as one."""
    kept = rec.get("ek")
    if isinstance(kept, str) and GROUP_KEY.match(kept):
        return kept
    t, _, k = _part_bytes(rec)
    return _hash(b"k\x00" + t + b"\x00" + k)


def failed_again(rec: TaskRecord) -> bool:
    """A failed task that an operator had redone (it failed again after the redo)."""
    redone = rec.get("redone")
    return isinstance(redone, int) and redone > 0


class GroupMatch:
    """A filter on records: in the error group ``key`` (by kind when ``by`` is "kind"; and
    the task/text filter, if any)."""

    def __init__(self, key: str, also: object = None, by: str = "group") -> None:
        self.key, self.also = key, also
        self.key_of = kind_key if by == "kind" else group_key

    def __call__(self, rec: TaskRecord) -> bool:
        if self.also is not None and not self.also(rec):  # type: ignore[operator]
            return False
        return self.key_of(rec) == self.key

    def may_match(self, task_id: str, raw: str) -> bool:
        may = getattr(self.also, "may_match", None)
        return may is None or bool(may(task_id, raw))


def group_errors(rows: list[Row]) -> list[ErrorGroup]:
    """Rows of an errors page (newest first) grouped; the biggest group first."""
    groups: dict[tuple[str, str, str], ErrorGroup] = {}
    for row in rows:
        rec = row.record
        if rec is None:
            continue
        error = str(rec.get("error") or "")
        key = _parts(rec)
        at = int(row.score or 0)
        g = groups.get(key)
        if g is None:
            g = groups[key] = ErrorGroup(*key[:2], first=at, last=at, message=error[:300])
            g.sample = (row.queue, row.id)
            g.key = group_key(rec)
            g.trace = str(rec.get("traceback") or "")[:TRACE_LIMIT]
        g.count += 1
        g.again += failed_again(rec)
        g.first, g.last = min(g.first, at), max(g.last, at)
        g.tasks[rec.task] = g.tasks.get(rec.task, 0) + 1
        g.queues[row.queue] = g.queues.get(row.queue, 0) + 1
    return sorted(groups.values(), key=lambda g: (-g.count, -g.last))


def _kind_of(info: dict[str, object]) -> str:
    """The kind key of a group's info (as kind_key: its type and what happened)."""
    t, k = _utf8(str(info.get("t") or "")), _utf8(str(info.get("k") or ""))
    return _hash(b"k\x00" + t + b"\x00" + k)


def counted_groups(storage: Storage, queues: Sequence[str], by: str = "group") -> list[ErrorGroup]:
    """The error groups (``by="kind"``: kinds, across frames) of the whole error lists of
    ``queues``, from the exact counters (O(groups), whatever the lists hold): count, per
    queue (shards folded), per top frame, the newest message and task; the biggest first.
    ``trace`` is left to the caller (one record read per group shown)."""
    out: dict[str, ErrorGroup] = {}
    for q, c in storage.errors.error_counts(queues).items():
        name = split_shard(q)[0]
        for key, got in (c.kinds if by == "kind" else c.groups).items():
            info = got.info
            g = out.get(key)
            if g is None:
                frame = "" if by == "kind" else str(info.get("f") or "")
                g = out[key] = ErrorGroup(str(info.get("t") or "?"), frame, key=key, exact=True)
            g.count += got.count
            g.again += got.again
            g.queues[name] = g.queues.get(name, 0) + got.count
            at = int(str(info.get("at") or 0))
            if at >= g.last:
                g.last, g.message, g.sample = at, str(info.get("m") or ""), (q, str(info.get("id")))
        for key, got in c.groups.items():  # the top frames: a group's own, a kind's each
            g = out.get(_kind_of(got.info) if by == "kind" else key)
            if g is not None:
                frame = str(got.info.get("f") or "")
                g.frames[frame] = g.frames.get(frame, 0) + got.count
                at = int(str(got.info.get("at") or 0))
                if by == "kind" and at >= g.last:  # a kind's newest is its newest group's
                    g.last, g.message = at, str(got.info.get("m") or "")
                    g.sample = (q, str(got.info.get("id")))
    for g in out.values():
        if len(g.frames) == 1:
            g.frame = next(iter(g.frames))
    return sorted(out.values(), key=lambda g: (-g.count, -g.last))


def add_traces(storage: Storage, groups: Sequence[ErrorGroup]) -> None:
    """Each exact group's newest traceback (the start of it), read in one round trip."""
    recs = fetch_records(storage, [g.sample for g in groups])
    for g, rec in zip(groups, recs, strict=True):
        if rec is not None:
            g.trace = str(rec.get("traceback") or "")[:TRACE_LIMIT]
