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


def negotiate(request: Any) -> str:
    chosen = request.cookies.get(COOKIE)
    if chosen in LANGS:
        return str(chosen)
    return str(request.accept_language.lookup(list(LANGS), default="en"))


def translator(lang: str) -> Callable[..., str]:
    catalog = CATALOGS.get(lang, {})

    def translate(msgid: str, **kw: Any) -> str:
        text = catalog.get(msgid, msgid)
        return text.format(**kw) if kw else text

    return translate


def request_translator(request: Any) -> Callable[..., str]:
    return translator(request.lang)
