"""The task record as stored in a queue's ``tasks`` hash, decoded for Python callers.

Stored form (one hash field per task, see ``scripts/_lib.lua``)::

    {"state":"running","enqueued":1763800000000,...}\n["app.mail.send",[...],{...},{...}]
    1763800000000\n["app.mail.send",[...]]

The first line is the meta JSON that Lua scripts rewrite on every state move, or, for a task
that waits as it was enqueued (``{"state":"queued","enqueued":<ms>}`` and nothing else), the
bare enqueue time. The second is the payload written once by
:func:`ztq.core.client.calls.TaskCall.payload` and never decoded in Lua: ``[task, args]``, then
kwargs and options when a call has them. Both short forms exist for memory: a long queue is
mostly such records, and JSON keys were about half of each (docs/design.md, "The record").
Records in the longer forms (meta JSON, a payload object ``{"task":...,"args":...}``),
written by earlier versions or by another client, read the same.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from ztq.core.errors import PayloadError
from ztq.core.states import TaskState

log = logging.getLogger(__name__)

DEFAULT_MAX_PAYLOAD = 4 * 1024 * 1024  # bytes; the setting max_payload (docs/settings.md)
MIN_MAX_PAYLOAD = 256 * 1024  # its least value: the warning starts at a quarter of it
# a payload shorter than this (in characters, so at most 4x that in UTF-8 bytes) is never
# measured: the check costs the common enqueue one len()
PAYLOAD_FLOOR = MIN_MAX_PAYLOAD // 16
_warned: dict[str, float] = {}  # task -> when its big payload was last warned of (1 a minute)


def _mb(size: int) -> str:
    return f"{size / 1048576:.1f} MB"


def check_payload_size(payload: str, limit: int, task: str) -> None:
    """Refuse a payload over ``limit`` bytes (``max_payload``) with a :class:`PayloadError`
    naming its size and the setting, and log a WARNING above a quarter of it (once a minute
    per task, however many are sent): Redis keeps
    a payload with its task and with its finished record for ``result_ttl`` (issue 39: a
    60 MB argument took 5.2 s and 270 MB of Redis at its peak). Called before the write."""
    if len(payload) <= PAYLOAD_FLOOR:
        return
    size = len(payload.encode("utf-8"))
    if size > limit:
        raise PayloadError(
            f"the payload of {task} is {_mb(size)} ({size} bytes), over max_payload "
            f"({_mb(limit)}, {limit} bytes); nothing was enqueued: pass a reference to the "
            "data (a path, a URL, an object-store key) instead of the data, or raise "
            "max_payload (App(max_payload=...) or ZTQ_MAX_PAYLOAD)"
        )
    now = time.monotonic()
    if size > limit // 4 and now - _warned.get(task, -60.0) >= 60.0:
        _warned[task] = now
        log.warning(
            "the payload of %s is %s (%d bytes), over a quarter of max_payload (%s): Redis "
            "keeps it with the task and its finished record", task, _mb(size), size, _mb(limit),
        )  # fmt: skip


def is_bare_time(meta_text: str) -> bool:
    """The meta line of a task waiting as enqueued: its enqueue time alone."""
    return meta_text.isdigit() and meta_text.isascii()


def split_record(raw: str) -> tuple[dict[str, Any], str]:
    """Split a stored record into its meta dict and its payload text."""
    meta_text, sep, payload = raw.partition("\n")
    if is_bare_time(meta_text):
        return {"state": "queued", "enqueued": int(meta_text)}, payload
    try:
        meta = json.loads(meta_text)
    except ValueError:
        meta = None
    if not sep or not isinstance(meta, dict):
        return {"state": "error", "error": "PayloadError: record has no meta line"}, raw
    return meta, payload


PAYLOAD_FIELDS = ("task", "args", "kwargs", "opts")  # the order of the list form


def payload_list(
    task: str,
    args: list[Any],
    kwargs: dict[str, Any] | None = None,
    opts: dict[str, Any] | None = None,
) -> list[Any]:
    """The payload as stored, before JSON: ``[task, args, kwargs, opts]`` up to its last
    non-empty part (``{}`` for kwargs when options follow)."""
    data: list[Any] = [task, args]
    if kwargs or opts:
        data.append(kwargs or {})
    if opts:
        data.append(opts)
    return data


def stored_record(meta: dict[str, Any], payload: str) -> str:
    """A record as ``save`` in ``_lib.lua`` writes it: the bare enqueue time for a task
    waiting as enqueued, else compact meta JSON (fills of benchmarks and tests)."""
    t = meta.get("enqueued")
    if (
        meta.keys() == {"state", "enqueued"}
        and meta["state"] == "queued"
        and (type(t) is int and 0 <= t < 2**53)
    ):
        head = str(meta["enqueued"])
    else:
        head = json.dumps(meta, separators=(",", ":"), ensure_ascii=False)
    return head + "\n" + payload


def decode_payload(text: str) -> dict[str, Any]:
    """Parse a payload (list or object form) into ``{"task", "args", "kwargs"?, "opts"?}``;
    a clear :class:`PayloadError` if it is not a task payload."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise PayloadError(f"task payload is not valid JSON: {exc}") from exc
    if isinstance(data, list):
        if not 2 <= len(data) <= len(PAYLOAD_FIELDS):
            raise PayloadError("task payload list must be [task, args, kwargs?, options?]")
        data = dict(zip(PAYLOAD_FIELDS, data, strict=False))
    if not isinstance(data, dict) or not isinstance(data.get("task"), str):
        raise PayloadError("task payload must be a JSON list or object with a 'task' name")
    if not isinstance(data.get("args", []), list) or not isinstance(data.get("kwargs", {}), dict):
        raise PayloadError("task payload 'args' must be a list and 'kwargs' an object")
    return data


@dataclass
class TaskRecord:
    """One task as the console and ``ping`` see it."""

    id: str
    queue: str
    meta: dict[str, Any]
    payload_text: str
    payload: dict[str, Any] = field(default_factory=dict)
    payload_error: str = ""

    @classmethod
    def from_raw(cls, queue: str, task_id: str, raw: str) -> TaskRecord:
        meta, text = split_record(raw)
        rec = cls(task_id, queue, meta, text)
        try:
            rec.payload = decode_payload(text)
        except PayloadError as exc:
            rec.payload_error = str(exc)
        return rec

    @property
    def state(self) -> TaskState:
        """A task its own rate limit holds (in ``delayed`` until its token, ``held``) is
        still waiting in its queue: ``queued`` (docs/queue-controls.md)."""
        if self.meta.get("held") and self.meta.get("state") == "delayed":
            return TaskState.QUEUED
        try:
            return TaskState(self.meta.get("state", "none"))
        except ValueError:
            return TaskState.NONE

    @property
    def task(self) -> str:
        return str(self.payload.get("task", "?"))

    @property
    def args(self) -> list[Any]:
        return list(self.payload.get("args", []))

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.payload.get("kwargs", {}))

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.payload.get("opts", {}))

    @property
    def priority(self) -> str:
        return str(self.meta.get("prio", "normal"))

    @property
    def result(self) -> Any:
        text = self.meta.get("result")
        return json.loads(text) if text else None

    @property
    def progress(self) -> Any:
        text = self.meta.get("progress")
        return json.loads(text) if text else None

    def get(self, key: str, default: Any = None) -> Any:
        return self.meta.get(key, default)
