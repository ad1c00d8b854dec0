"""Every message of the templates and views has a Chinese translation with the same fields."""

from __future__ import annotations

import re
import string
from pathlib import Path

from ztq.console import TEMPLATES
from ztq.console.rendering import NAV
from ztq.console.views.tasks import ACTIONS
from ztq.console.zh import MESSAGES

CONSOLE = Path(__file__).resolve().parents[2] / "console"
DYNAMIC = [
    # states, statuses, kinds, roles and priorities shown through _(value)
    "queued", "delayed", "running", "error", "done", "none", "failed", "retry", "lost",
    "paused", "stopping", "stopped", "other", "start", "stop", "reboot", "config", "command",
    "forget",
    "viewer", "operator", "high", "normal", "low",
]  # fmt: skip


def msgids() -> set[str]:
    found: set[str] = set()
    for path in TEMPLATES.glob("*.jinja2"):
        text = path.read_text("utf-8")
        found |= set(re.findall(r"_\('((?:[^'\\]|\\.)*)'", text))
    for path in CONSOLE.rglob("*.py"):
        text = path.read_text("utf-8")
        found |= set(re.findall(r'request\.t\(\s*"((?:[^"\\]|\\.)*)"', text))
    found |= {label for _, label in NAV} | set(ACTIONS.values()) | set(DYNAMIC)
    return found


def fields(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def test_every_message_has_a_translation() -> None:
    ids = msgids()
    assert len(ids) > 200
    missing = sorted(ids - set(MESSAGES))
    assert not missing, missing


def test_translations_keep_their_placeholders() -> None:
    for en, zh in MESSAGES.items():
        assert fields(en) == fields(zh), en


def test_english_counts_of_one_are_singular() -> None:
    from ztq.console.i18n import ENGLISH_ONE, translator

    assert set(ENGLISH_ONE) <= msgids()  # each is a message the console shows
    for msgid, one in ENGLISH_ONE.items():
        assert fields(one) <= fields(msgid), msgid
    en, zh = translator("en"), translator("zh")
    assert en("{n} workers", n=1) == "1 worker" and en("{n} workers", n=2) == "2 workers"
    assert en("{n} workers", n=0) == "0 workers"
    assert en("{action}: {done} of {count} tasks.", action="Redo", done=1, count=1) == (
        "Redo: 1 of 1 task."
    )
    assert zh("{n} workers", n=1) == zh("{n} workers", n=2).replace("2", "1")
