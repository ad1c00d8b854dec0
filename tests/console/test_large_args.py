"""Large arguments are shown cut, with their whole size said and a way to get them whole
(issue 39, point 8): the task page shows the first ``ARGS_SHOWN`` characters and a download
link, the lists say the size after the call, the download gives every byte."""

from __future__ import annotations

import json
import re

import pytest
from webtest import TestApp

from tests import sample_tasks as t
from ztq.core.engine.storage import Storage
from ztq.core.monitor.fmt import ARGS_SHOWN

BIG = "é" * 1_500_000  # 3,000,000 bytes as UTF-8: under max_payload, over any page


@pytest.mark.slow
def test_a_task_page_cuts_large_arguments_says_their_size_and_links_them_whole(
    operator: TestApp, store: Storage
) -> None:
    big = t.send.prepare(("ann@example.org", BIG)).enqueue().id
    small = t.send.prepare(("bob@example.org", "hi")).enqueue().id
    page = operator.get(f"/tasks/{big}")
    assert len(page.text) < 100_000, len(page.text)  # not the 3 MB
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page.text))
    assert f"… 2.9 MB in all (the first {ARGS_SHOWN:,} characters shown)." in text
    link = page.html.find("a", string="Download the arguments")
    assert link is not None and link.has_attr("download")
    got = operator.get(link["href"])
    assert got.content_type == "application/json" and "attachment" in got.content_disposition
    assert json.loads(got.body.decode("utf-8"))["args"] == ["ann@example.org", BIG]
    whole = operator.get(f"/tasks/{small}")
    assert "Download the arguments" not in whole.text and "bob@example.org" in whole.text
    zh = operator.get(f"/tasks/{big}", headers={"Accept-Language": "zh"}).text
    assert "共 2.9 MB" in zh and "下载全部参数" in zh
    listing = operator.get("/queues/mail").text  # a list: the call cut, the size after it
    assert "(2.9 MB in all)" in listing and listing.count("in all") == 1
    operator.get("/tasks/0123456789abcdef0123456789abcdef/args", status=404)
