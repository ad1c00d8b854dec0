"""The cron table as the console shows it: the entries workers published, and which ones
an operator disabled (``ztq.core.engine.workers`` writes both)."""

from __future__ import annotations

import json
from typing import Any

from ztq.core.engine.read_models.queue_reads import cron_entries
from ztq.core.engine.storage import Storage


def cron_table(storage: Storage) -> list[dict[str, Any]]:
    """Cron entries as workers published them (``disabled`` added), soonest next run first."""
    raw, off = cron_entries(storage)
    out = []
    for name, text in raw.items():
        try:
            entry = json.loads(text)
        except ValueError:
            continue
        if isinstance(entry, dict):
            entry.setdefault("name", name)
            entry["disabled"] = name in off
            out.append(entry)
    return sorted(out, key=lambda e: (_when(e.get("next")), str(e["name"])))


def _when(value: Any) -> float:
    """A time to sort by: what a worker wrote (ms), else 0 (the hash is readable by anyone
    who shares the Redis; one odd entry must not make the whole table unreadable)."""
    try:
        number = float(value or 0)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return number if number == number else 0.0  # NaN sorts nowhere
