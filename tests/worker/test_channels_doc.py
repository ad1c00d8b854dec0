"""docs/channels.md runs as written: each Python block is executed (with in-process workers
where it needs them) and prints what the page shows under it."""

from __future__ import annotations

import contextlib
import io
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import ztq.core as ztq
from tests.test_doc_examples import code_blocks
from tests.worker.conftest import wait_for
from ztq.worker.worker import Worker

DOC = Path(__file__).resolve().parents[2] / "docs" / "channels.md"
BLOCKS = code_blocks("channels.md")


def block(*words: str) -> str:
    """The one Python block of the page that holds all ``words``."""
    [found] = [b for b in BLOCKS if all(w in b for w in words) and "import" in b]
    return found


def shown_after(code: str) -> str:
    """The output block the page shows right after ``code``."""
    return BLOCKS[BLOCKS.index(code) + 1].strip()


def run(code: str, namespace: dict[str, Any] | None = None, **replace: str) -> str:
    """Execute ``code`` (with ``replace`` applied) and return what it printed."""
    for old, new in replace.items():
        assert old in code, old
        code = code.replace(old, new)
    out = io.StringIO()
    space = namespace if namespace is not None else {"__name__": "docs_channels_example"}
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(DOC), "exec"), space)  # noqa: S102 - our own doc
    return out.getvalue().strip()


@pytest.fixture
def clean_app() -> Iterator[ztq.App]:
    """The default app as the page leaves it: its settings and subscriptions put back."""
    app = ztq.default_app()
    catch_up, subs = app.broadcast_catch_up, dict(app.subscriptions)
    yield app
    app.broadcast_catch_up = catch_up
    app.subscriptions.clear()
    app.subscriptions.update(subs)


def test_the_broadcast_example_runs_on_each_worker(
    start_worker: Callable[..., Worker], clean_app: ztq.App
) -> None:
    for name in ("web-1", "web-2"):
        w = start_worker({"web": 1}, name=name)
        wait_for(
            lambda w=w: (
                w.channels.readers
                and all("web" in r.positions for r in w.channels.readers.values())
            )
        )
    code = block("reload_settings.broadcast")
    assert run(code) == shown_after(code)


def test_the_catch_up_setting_is_the_apps(clean_app: ztq.App) -> None:
    run(block("broadcast_catch_up"))
    assert clean_app.broadcast_catch_up == 600


def test_the_channel_examples_print_what_the_page_says(redis_url: str) -> None:
    code = block("orders.publish")
    printed = re.search(r"prints `([^`]+)`", DOC.read_text("utf-8"))
    assert printed and run(code) == printed.group(1)
    full = block("ChannelFull")
    assert run(full) == shown_after(full)


def test_the_file_example_sends_and_rebuilds_the_file(redis_url: str, tmp_path: Path) -> None:
    source = tmp_path / "app.tar.gz"
    source.write_bytes(bytes(range(256)) * 5000)  # 1.28 MB: 3 chunks
    ztq.channel("assets").subscribe("mirror-1")  # the receiving host set it up before
    receiving = block("receive_file")
    printed: dict[str, str] = {}
    there: dict[str, Any] = {"__name__": "docs_channels_receiver"}
    here: dict[str, Any] = {"__name__": "docs_channels_sender"}
    folder = tmp_path / "srv"

    def receive() -> None:
        printed["out"] = run(receiving, there, **{"/srv/assets": str(folder)})

    receiver = threading.Thread(target=receive)
    receiver.start()
    sent = run(block("publish_file("), here, **{"dist/app.tar.gz": str(source)})
    receiver.join(30)
    assert sent == f"app.tar.gz {source.stat().st_size} 3"
    sha = here["sent"].sha256
    assert printed["out"] == f"{folder / 'app.tar.gz'} True {sha[:12]}"
    assert (folder / "app.tar.gz").read_bytes() == source.read_bytes()
    assert there["got"].sha256 == sha


def test_the_subscribed_task_runs_per_message(
    start_worker: Callable[..., Worker], clean_app: ztq.App
) -> None:
    space: dict[str, Any] = {"__name__": "docs_channels_example"}
    run(block("subscribe_task("), space)
    task_name = space["record_order"].name
    w = start_worker({"audit": 1}, name="auditor")
    orders = ztq.channel("orders")
    wait_for(lambda: [s.name for s in orders.info().subscribers] == [task_name])
    orders.publish({"order": 7})
    history = w.storage.keys.history("audit")
    wait_for(lambda: w.storage.client.xlen(history) == 1)
    [(_, entry)] = w.storage.client.xrange(history)
    assert (entry["task"], entry["status"]) == (task_name, "done")
