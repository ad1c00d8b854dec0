"""docs/autoscaling.md runs as written: its worker file and flags give the queues it says,
its Python example is run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.test_doc_examples import code_blocks
from ztq.worker.cli.commands import _queue_flag, scale_flag
from ztq.worker.config import ScaleSpec, ThreadSpec, load_config

PAGE = Path(__file__).resolve().parents[2] / "docs" / "autoscaling.md"


def test_the_worker_file_and_its_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZTQ_REDIS_URL", raising=False)
    [ini] = [b for b in code_blocks("autoscaling.md") if b.startswith("[server]")]
    path = tmp_path / "worker.ini"
    path.write_text(ini, encoding="utf-8")
    cfg = load_config(path)
    assert cfg.scaled == (
        ScaleSpec("mail", 1, 8),
        ScaleSpec("reports", 0, 4),
        ScaleSpec("pdf", 0, 3, "process"),
        ScaleSpec("crawl", 10, 200, "async"),
    )
    assert cfg.threads == (
        ThreadSpec("default-0", ("default",)),
        ThreadSpec("default-1", ("default",)),
        ThreadSpec("mail-0", ("mail",)),
        ThreadSpec("crawl-0", ("crawl",), "async", 10),
    )
    assert (cfg.autoscale_threads_max, cfg.autoscale_cpu_max) == (12, 85)
    assert (cfg.autoscale_memory_max, cfg.autoscale_idle_beats) == (90, 3)
    text = " ".join(PAGE.read_text("utf-8").split())
    line = re.search(r"`ztq worker (--queue .*?)`", text)
    assert line is not None
    flags = re.findall(r"--queue (\S+)", line.group(1))
    scaled = tuple(s for f in flags if (s := scale_flag(f)) is not None)
    fixed = tuple(t for f in flags if scale_flag(f) is None for t in _queue_flag(f))
    assert scaled == cfg.scaled and fixed == cfg.threads[:2]
    assert "--autoscale-threads-max 12" in line.group(1)


def test_the_bad_range_message_is_the_real_one(tmp_path: Path) -> None:
    text = " ".join(PAGE.read_text("utf-8").split())
    shown = re.search(r"\(`(worker\.ini:12: autoscaled 'mail': 5\.\.2 .*?)`\)", text)
    assert shown is not None
    path = tmp_path / "worker.ini"
    path.write_text("[server]\n" + "\n" * 9 + "[queues]\nmail = 5..2\n")  # mail on line 12
    with pytest.raises(Exception) as caught:
        load_config(path)
    assert str(caught.value).endswith(shown.group(1))


def test_the_python_example_runs() -> None:
    [example] = [b for b in code_blocks("autoscaling.md") if "Autoscaler(" in b]
    exec(compile(example, "docs/autoscaling.md", "exec"), {})
