"""The console's languages: English in the code, every other one a gettext catalog.

The language comes from the ``ztq_lang`` cookie (the switch in the page header) or else the
browser's ``Accept-Language``. Messages are the English text itself, formatted with
``str.format`` keywords (``_("{n} workers", n=3)``), looked up in
``console/locale/<ll_CC>/LC_MESSAGES/ztq.mo``: a folder there is a language (``zh_CN`` is
``zh`` for the cookie and the switch, ``zh-CN`` for ``<html lang>``), with nothing to add in
code. The ``.po`` files are what translators edit; the ``.mo`` files are compiled from them
when the package is built or installed (``setup.py``, also for ``pip install -e``), never
at run time. docs/translating.md says how to extract, translate and compile.

English messages whose noun follows the count are written in the plural and declared in
:data:`PLURALS` with their form for one: gettext's ``ngettext`` picks the form (Chinese has
one). :func:`N_` marks a message that reaches ``_`` through a variable (a state, a nav
label), so that extraction finds it.
"""

from __future__ import annotations

import gettext
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

LOCALE = Path(__file__).resolve().parent / "locale"
DOMAIN = "ztq"
COOKIE = "ztq_lang"
log = logging.getLogger(__name__)


def N_(message: str) -> str:  # noqa: N802 (gettext's name for it)
    """A message for extraction only: it is translated where it is shown, through ``_``."""
    return message


def plural(one: str, many: str) -> tuple[str, str]:
    """A message's English forms for one and for many (extracted as msgid and
    msgid_plural)."""
    return one, many


# English messages whose noun follows the count: (the form for n == 1, the message as the
# code writes it). tests/console/test_i18n.py checks that each is a message the console shows.
PLURALS: dict[str, str] = {
    many: one
    for one, many in (
        plural("Ended {n} session.", "Ended {n} session(s)."),
        plural("and {n} more thread", "and {n} more threads"),
        plural("lost its worker once", "lost its worker {n} times"),
        plural("{n} more channel is not shown.", "{n} more channels are not shown."),
        plural("{n} failed task", "{n} failed tasks"),
        plural("{n} leased task", "{n} leased tasks"),
        plural("{n} queue", "{n} queues"),
        plural("{n} thread", "{n} threads"),
        plural("{n} worker", "{n} workers"),
        plural(
            "{name}: one task at a time, on all workers (serial).",
            "{name}: at most {n} tasks at once, on all workers.",
        ),
        plural(
            "{n} was in another state and left alone.",
            "{n} were in another state and left alone.",
        ),
        plural("{verb} {n} task.", "{verb} {n} tasks."),
        plural("{action}: {done} of {count} task.", "{action}: {done} of {count} tasks."),
        plural("{n} more match", "{n} more matches"),
        # issue 30
        plural("{n} task in error", "{n} tasks in error"),
        plural("{n} worker lost", "{n} workers lost"),
        plural("Redo {n} failed task?", "Redo {n} failed tasks?"),
        plural("Delete {n} failed task?", "Delete {n} failed tasks?"),
        plural("Delete {n} waiting task?", "Delete {n} waiting tasks?"),
        plural("{n} task", "{n} tasks"),
        plural("Redo {n} task", "Redo {n} tasks"),
        plural("Delete {n} task", "Delete {n} tasks"),
        plural("{n} task put back {t} ago", "{n} tasks put back {t} ago"),
        plural("{n} task of {queue}", "{n} tasks of {queue}"),
        plural(
            "Key {key} of {name} takes {n} task a turn.",
            "Key {key} of {name} takes {n} tasks a turn.",
        ),
        plural(
            "{n} more task waits in its key's turn: open a key above to list it.",
            "{n} more tasks wait in their keys' turns: open a key above to list them.",
        ),
        plural("Restored {n} task.", "Restored {n} tasks."),
        plural("Show the {n} error", "Show these {n} errors"),
        plural(
            "{n} has a task with the same id again and stays in the trash.",
            "{n} have a task with the same id again and stay in the trash.",
        ),
    )
}

# shown through _(value): states, statuses, event kinds, roles and priorities
SHOWN_AS_VALUES = (
    N_("queued"), N_("delayed"), N_("running"), N_("error"), N_("done"), N_("none"),
    N_("failed"), N_("retry"), N_("lost"), N_("paused"), N_("stopping"), N_("stopped"),
    N_("other"), N_("start"), N_("stop"), N_("reboot"), N_("config"), N_("command"),
    N_("forget"), N_("viewer"), N_("operator"), N_("high"), N_("normal"), N_("low"),
    N_("autoscale"), N_("redis"), N_("overflow"), N_("open"), N_("complete"), N_("success"),
    N_("waiting"), N_("failed again"), N_("unreadable heartbeat"), N_("?"),
)  # fmt: skip
# the name of a language in itself, for the switch in the header (its .po translates it)
LANGUAGE_NAME = N_("English")


def _catalogs() -> dict[str, gettext.NullTranslations]:
    """English, then each language of ``LOCALE`` whose compiled catalog is there."""
    found: dict[str, gettext.NullTranslations] = {"en": gettext.NullTranslations()}
    for folder in sorted(LOCALE.glob(f"*/LC_MESSAGES/{DOMAIN}.po")):
        name = folder.parent.parent.name
        mo = folder.with_suffix(".mo")
        if not mo.is_file():  # an install without its build step: said, not fatal
            log.warning("no compiled catalog %s: the console is not offered in %s", mo, name)
            continue
        with mo.open("rb") as fp:
            found[name.split("_")[0]] = gettext.GNUTranslations(fp)
    return found


CATALOGS = _catalogs()
LANGS = tuple(CATALOGS)
# <html lang>: the folder's name (zh_CN: zh-CN)
HTML_LANG = {"en": "en"} | {
    p.parent.parent.name.split("_")[0]: p.parent.parent.name.replace("_", "-")
    for p in LOCALE.glob(f"*/LC_MESSAGES/{DOMAIN}.mo")
}
# the switch in the header: each language by its own name
NAMES = {lang: catalog.gettext(LANGUAGE_NAME) for lang, catalog in CATALOGS.items()}


def negotiate(request: Any) -> str:
    chosen = request.cookies.get(COOKIE)
    if chosen in LANGS:
        return str(chosen)
    return str(request.accept_language.lookup(list(LANGS), default="en"))


def translator(lang: str) -> Callable[..., str]:
    catalog = CATALOGS.get(lang, CATALOGS["en"])

    def translate(msgid: str, **kw: Any) -> str:
        one = PLURALS.get(msgid)
        if one is not None:
            count = kw.get("n", kw.get("count"))
            text = catalog.ngettext(one, msgid, count if isinstance(count, int) else 2)
        else:
            text = catalog.gettext(msgid)
        return text.format(**kw) if kw else text

    return translate


def request_translator(request: Any) -> Callable[..., str]:
    return translator(request.lang)
