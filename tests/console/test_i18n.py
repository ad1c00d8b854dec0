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
