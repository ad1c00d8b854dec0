"""Issue 40, point 12: the console's Chinese moved from a Python dict to gettext catalogs
with nothing lost. Every page (those of the HTML check, test_html_valid.py: each GET page,
a refused sign-in, a delete confirmation, a bulk action's progress) is rendered in Chinese
and its Chinese text (text and attributes holding a CJK character, numbers and ids made
neutral) compared with ``zh_pages.json``, recorded once from the dict (``ZTQ_RECORD_ZH=1``
writes it again)."""

from __future__ import annotations

import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from tests.console import test_browser_phone
from tests.console.test_html_valid import every_page
from ztq.core.engine.storage import Storage

console = test_browser_phone.console


@pytest.fixture
def settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The console's, with workers lost after 200 s instead of 30 (the scenario's lost one
    stopped 240 s before): on a loaded machine the pages of this test take longer than 30 s,
    and the live workers would turn lost before the last page, which would then list them
    (what a page says, not how it says it)."""
    return {**settings, "ztq.console.lost_after": "200"}


FIXTURE = Path(__file__).with_name("zh_pages.json")
CJK = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]")
# what a page shows or not by the timing of a background thread, left out of the comparison:
# the alerts page's "resolved" and "in N s" come and go with the alert thread's rounds
VOLATILE = {"已恢复", "#<t>后"}
# and which process evaluated the alerts last ("done by this console" or "by another
# evaluator"): either is the same text of the page, made one token
EVALUATED_BY = ("由此控制台完成", "由其他评估进程完成")
ATTRIBUTES = ("title", "aria-label", "placeholder", "alt", "value", "content", "data-confirm")


class _Texts(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: set[str] = set()
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style"):
            self._skip += 1
        for name, value in attrs:
            if value and (name in ATTRIBUTES or name.startswith("data-")):
                self._keep(value)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self._keep(data)

    def _keep(self, text: str) -> None:
        text = " ".join(text.split())
        if CJK.search(text):
            self.found.add(neutral(text))


def neutral(text: str) -> str:
    """What varies between two renderings of the same state: ids, numbers (and so times,
    ages and durations, whose units vary with them), made one token."""
    text = re.sub(r"\b[0-9a-f]{12,}\b", "<id>", text)
    text = re.sub(r"[\d.,:]*\d", "#", text)
    for alternative in EVALUATED_BY:
        text = text.replace(alternative, "<evaluated by>")
    text = re.sub(r"#(\s?(天|小时|分钟?|秒|毫秒))+", "#<t>", text)
    return re.sub(r"#<t>(\s?#<t>)+", "#<t>", text)  # 1分12秒 and 59秒 are one time


def chinese(html: str) -> list[str]:
    parser = _Texts()
    parser.feed(html)
    return sorted(parser.found)


def rendered(console: test_browser_phone.Console, store: Storage) -> dict[str, list[str]]:
    """Each page's Chinese text, keyed by its place in the list and its path."""
    html = every_page(console, store, "zh")
    return {f"{n:02} {neutral(name)}": [s for s in chinese(text) if s not in VOLATILE]
            for n, (name, text) in enumerate(html.items())}  # fmt: skip


@pytest.mark.slow
def test_every_page_says_in_chinese_what_the_dict_said(
    console: test_browser_phone.Console, store: Storage
) -> None:
    got = rendered(console, store)
    if os.environ.get("ZTQ_RECORD_ZH"):
        FIXTURE.write_text(json.dumps(got, ensure_ascii=False, indent=1) + "\n", "utf-8")
    want = json.loads(FIXTURE.read_text("utf-8"))
    assert sum(map(len, want.values())) > 1000  # the record holds the pages' text
    assert list(got) == list(want)
    for page, recorded in want.items():
        texts = {neutral(text) for text in recorded} - VOLATILE  # recorded by an older neutral()
        lost, new = sorted(texts - set(got[page])), sorted(set(got[page]) - texts)
        assert (lost, new) == ([], []), page
