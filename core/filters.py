"""Filters the console's lists, its bulk actions and the ``ztq`` command share: on task
records (name, text, state) and on stream entries (history, worker log, audit)."""

from __future__ import annotations

from collections.abc import Callable

from ztq.core import monitor
from ztq.core.record import TaskRecord


def task_matcher(task: str = "", text: str = "", state: str = "") -> monitor.Match | None:
    """A filter on records: task name contains ``task``; ``text`` in id, task name,
    arguments or error; ``state`` equal. None when there is nothing to filter on."""
    task_l, text_l = task.lower(), text.lower()
    if not (task_l or text_l or state):
        return None

    def match(rec: TaskRecord) -> bool:
        if state and rec.state.value != state:
            return False
        if task_l and task_l not in rec.task.lower():
            return False
        if text_l:
            hay = " ".join(
                (
                    rec.id,
                    rec.task,
                    rec.payload_text,
                    str(rec.get("error") or ""),
                    str(rec.get("traceback") or ""),
                )
            ).lower()
            return text_l in hay
        return True

    return match


def fields_matcher(**wanted: str) -> Callable[[dict[str, str]], bool] | None:
    """A filter on stream entries: each given field contains the wanted text (``status``,
    ``kind`` and ``id`` must be equal)."""
    wanted = {k: v.lower() for k, v in wanted.items() if v}
    if not wanted:
        return None

    def match(fields: dict[str, str]) -> bool:
        for key, value in wanted.items():
            have = str(fields.get(key, "")).lower()
            if (have != value) if key in ("status", "kind", "id") else (value not in have):
                return False
        return True

    return match
