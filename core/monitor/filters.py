"""Filters the console's lists, its bulk actions and the ``ztq`` command share: on task
records (name, text, state) and on stream entries (history, worker log, audit)."""

from __future__ import annotations

from collections.abc import Callable

from ztq.core.engine.record import TaskRecord, is_bare_time


def task_matcher(task: str = "", text: str = "", state: str = "") -> TaskMatch | None:
    """A filter on records: task name contains ``task``; ``text`` in id, task name,
    arguments or error; ``state`` equal. None when there is nothing to filter on."""
    if not (task or text or state):
        return None
    return TaskMatch(task.lower(), text.lower(), state)


# Characters JSON writes as themselves, in ztq's records: printable ASCII but the quote and
# the backslash (escaped by every encoder) and the slash (Lua's cjson writes it as '\/').
_VERBATIM = frozenset(chr(c) for c in range(0x21, 0x7F)) - {'"', "\\", "/"}


# What ztq.core.engine.record puts in a record it could not parse: the text is in no raw record
_SYNTHESIZED = ("payloaderror: record has no meta line", "?")


def _verbatim(needle: str) -> bool:
    """``needle`` (lowercased) is in a record's raw text wherever the record has it."""
    return (
        bool(needle)
        and all(c in _VERBATIM for c in needle)
        and not any(needle in made for made in _SYNTHESIZED)
    )


class TaskMatch:
    """The filter :func:`task_matcher` makes: a ``Match`` (called on a record), which can
    also rule a record out from its raw text, before it is parsed (:meth:`may_match`)."""

    def __init__(self, task_l: str, text_l: str, state: str) -> None:
        self.task_l, self.text_l, self.state = task_l, text_l, state
        self._task_raw = task_l if _verbatim(task_l) else ""
        self._text_raw = text_l if _verbatim(text_l) else ""

    def __call__(self, rec: TaskRecord) -> bool:
        if self.state and rec.state.value != self.state:
            return False
        if self.task_l and self.task_l not in rec.task.lower():
            return False
        if self.text_l:
            hay = " ".join(
                (
                    rec.id,
                    rec.task,
                    rec.payload_text,
                    str(rec.get("error") or ""),
                    str(rec.get("traceback") or ""),
                )
            ).lower()
            return self.text_l in hay
        return True

    def may_match(self, task_id: str, raw: str) -> bool:
        """False when the record stored as ``raw`` (``<meta JSON>\\n<payload JSON>``)
        cannot match: a text that JSON writes as itself is then in the raw text (or the
        id) wherever it is in a field. A search page reads 2,000 records, most of which do
        not match, and parsing each was most of its time. Texts with a space (they may
        span two of the fields joined above), a quote, a backslash, a slash or a
        non-ASCII character, and records with a ``\\u`` escape, are left to the match on
        the parsed record. A state other than error and none is read from the meta line
        as ztq's scripts write it (``"state":"<state>"``, once, or the bare enqueue time of
        a queued task: ztq.core.engine.record): a record whose meta line
        does not parse is in error, one without a valid state in none, so those two are
        left to the parsed record."""
        if self.state not in ("", "error", "none") and not _state_may_be(raw, self.state):
            return False
        if (self._task_raw or self._text_raw) and "\\u" not in raw:  # no escaped character
            low = raw.lower()
            if self._task_raw and self._task_raw not in low:
                return False
            if self._text_raw and self._text_raw not in low:
                return self._text_raw in task_id.lower()
        return True


def _state_may_be(raw: str, state: str) -> bool:
    """False when the meta line of ``raw`` names another state: it holds ``"state":"``
    exactly once (cjson writes no spaces; a nested ``state`` in a field such as progress
    makes it twice: then, as for any other writer, only the parsed record can tell)."""
    meta = raw.partition("\n")[0]
    if is_bare_time(meta):
        return state == "queued"
    at = meta.find('"state":"')
    if at < 0 or meta.find('"state":"', at + 9) >= 0:
        return True
    return meta[at + 9 : meta.find('"', at + 9)] == state


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
