"""English and Chinese: the language comes from the ``ztq_lang`` cookie (the switch in the
page header) or else the browser's ``Accept-Language``; messages are looked up by their
English text in :mod:`ztq.console.zh` and formatted with ``str.format`` keywords.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ztq.console.zh import MESSAGES as ZH

LANGS = ("en", "zh")
COOKIE = "ztq_lang"
CATALOGS: dict[str, dict[str, str]] = {"en": {}, "zh": ZH}
# English messages whose noun follows the count: the form for n == 1 (Chinese nouns do not
# change with the count). Messages are written in the plural; tests/console/test_i18n.py
# checks that each one here is a message the console shows.
ENGLISH_ONE: dict[str, str] = {
    "Ended {n} session(s).": "Ended {n} session.",
    "and {n} more threads": "and {n} more thread",
    "lost its worker {n} times": "lost its worker once",
    "{n} more channels are not shown.": "{n} more channel is not shown.",
    "{n} failed tasks": "{n} failed task",
    "{n} leased tasks": "{n} leased task",
    "{n} queues": "{n} queue",
    "{n} threads": "{n} thread",
    "{n} workers": "{n} worker",
    "{name}: at most {n} tasks at once, on all workers.": (
        "{name}: one task at a time, on all workers (serial)."
    ),
    "{n} were in another state and left alone.": "{n} was in another state and left alone.",
    "{verb} {n} tasks.": "{verb} {n} task.",
    "{action}: {done} of {count} tasks.": "{action}: {done} of {count} task.",
    "{n} more matches": "{n} more match",
    # issue 30
    "{n} tasks in error": "{n} task in error",
    "{n} workers lost": "{n} worker lost",
    "Redo {n} failed tasks?": "Redo {n} failed task?",
    "Delete {n} failed tasks?": "Delete {n} failed task?",
    "Delete {n} waiting tasks?": "Delete {n} waiting task?",
    "{n} tasks": "{n} task",
    "Redo {n} tasks": "Redo {n} task",
    "Delete {n} tasks": "Delete {n} task",
    "{n} tasks put back {t} ago": "{n} task put back {t} ago",
    "{n} tasks of {queue}": "{n} task of {queue}",
    "Restored {n} tasks.": "Restored {n} task.",
    "Show these {n} errors": "Show the {n} error",
    "{n} have a task with the same id again and stay in the trash.": (
        "{n} has a task with the same id again and stays in the trash."
    ),
}


def negotiate(request: Any) -> str:
    chosen = request.cookies.get(COOKIE)
    if chosen in LANGS:
        return str(chosen)
    return str(request.accept_language.lookup(list(LANGS), default="en"))


def translator(lang: str) -> Callable[..., str]:
    catalog = CATALOGS.get(lang, {})
    one = ENGLISH_ONE if lang == "en" else {}

    def translate(msgid: str, **kw: Any) -> str:
        count = kw.get("n", kw.get("count"))
        if count == 1 and msgid in one:
            return one[msgid].format(**kw)
        text = catalog.get(msgid, msgid)
        return text.format(**kw) if kw else text

    return translate


def request_translator(request: Any) -> Callable[..., str]:
    return translator(request.lang)
