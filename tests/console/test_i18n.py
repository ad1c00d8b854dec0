"""The console's messages and their catalogs (console/locale, docs/translating.md): every
message of the templates and views is in the template (ztq.pot) and has a Chinese
translation with the same fields; the compiled catalog is the .po's; English counts of one
are singular, through gettext's plural forms."""

from __future__ import annotations

import gettext
import re
import string
from pathlib import Path

from babel.messages.pofile import read_po

from ztq.console import TEMPLATES
from ztq.console.i18n import LOCALE, PLURALS, SHOWN_AS_VALUES
from ztq.console.rendering import NAV
from ztq.console.views.tasks import ACTIONS

CONSOLE = Path(__file__).resolve().parents[2] / "console"
ZH_PO = LOCALE / "zh_CN" / "LC_MESSAGES" / "ztq.po"


def catalog_messages(po: Path) -> dict[str, str]:
    """msgid (the message as the code writes it: a plural's msgid_plural) -> translation."""
    with po.open("rb") as fp:
        catalog = read_po(fp)
    out: dict[str, str] = {}
    for m in catalog:
        if not m.id:
            continue
        if isinstance(m.id, tuple):
            out[m.id[1]] = m.string[0]
        else:
            out[m.id] = m.string
    return out


def zh_messages() -> dict[str, str]:
    return catalog_messages(ZH_PO)


# _('...') or _("...") in a template
MESSAGE = r"""_\((?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)")"""


def msgids() -> set[str]:
    """What the templates and views show: the literal messages, found by a regex (not by the
    extractor under test), and those shown through a variable."""
    found: set[str] = set()
    for path in TEMPLATES.glob("*.jinja2"):
        text = path.read_text("utf-8")
        for single, double in re.findall(MESSAGE, text):
            found.add(single or double)
    for path in CONSOLE.rglob("*.py"):
        text = path.read_text("utf-8")
        found |= set(re.findall(r'request\.t\(\s*"((?:[^"\\]|\\.)*)"', text))
    found |= {label for _, label in NAV} | set(ACTIONS.values()) | set(SHOWN_AS_VALUES)
    return found


def fields(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def test_every_message_is_extracted_and_translated() -> None:
    ids = msgids()
    assert len(ids) > 200
    pot = catalog_messages(LOCALE / "ztq.pot")
    assert sorted(ids - set(pot)) == []  # ztq.pot is current (docs/translating.md, step 1)
    zh = zh_messages()
    assert sorted(set(pot) - set(zh)) == [] and sorted(set(zh) - set(pot)) == []
    assert sorted(en for en, text in zh.items() if not text) == []


def test_translations_keep_their_placeholders() -> None:
    for en, zh in zh_messages().items():
        assert fields(en) == fields(zh), en


def test_the_compiled_catalog_is_the_po() -> None:
    """The .mo the console reads says what the .po says (compiled by the build step)."""
    with (ZH_PO.with_suffix(".mo")).open("rb") as fp:
        mo = gettext.GNUTranslations(fp)
    for en, zh in zh_messages().items():
        got = mo.ngettext(PLURALS[en], en, 2) if en in PLURALS else mo.gettext(en)
        assert got == zh, (
            f"{en!r}: the .mo is older than the .po? pybabel compile (docs/translating.md)"
        )


def test_english_counts_of_one_are_singular() -> None:
    from ztq.console.i18n import translator

    assert set(PLURALS) <= msgids()  # each is a message the console shows
    for msgid, one in PLURALS.items():
        assert fields(one) <= fields(msgid), msgid
    en, zh = translator("en"), translator("zh")
    assert en("{n} workers", n=1) == "1 worker" and en("{n} workers", n=2) == "2 workers"
    assert en("{n} workers", n=0) == "0 workers"
    assert en("{action}: {done} of {count} tasks.", action="Redo", done=1, count=1) == (
        "Redo: 1 of 1 task."
    )
    assert zh("{n} workers", n=1) == zh("{n} workers", n=2).replace("2", "1")
    assert zh("{n} workers", n=2) == "2 个工作进程"
