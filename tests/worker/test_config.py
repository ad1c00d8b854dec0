"""Worker configuration: the ini format, app.ini sharing, flags, and clear errors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import redis

from ztq.core.errors import ConfigError
from ztq.worker.cli.commands import main
from ztq.worker.config import ThreadSpec, load_config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "worker.ini"
    path.write_text(text)
    return path


def test_ztq_style_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZTQ_REDIS_URL", raising=False)
    cfg = load_config(
        write(
            tmp_path,
            """
[server]
redis = redis://10.0.0.5:6380/2
alias = pdf-box
modules = app.tasks, app.mail
active_config = false
lease = 20

[queues]
default = 2
pdf = 1 process
crawl = 200 async        ; one event loop, 200 tasks at once
fast = urgent, default   ; one thread, urgent first
""",
        )
    )
    assert cfg.redis_url == "redis://10.0.0.5:6380/2" and cfg.name == "pdf-box"
    assert cfg.imports == ("app.tasks", "app.mail") and cfg.active_config is False
    assert cfg.lease == 20.0
    assert cfg.threads == (
        ThreadSpec("default-0", ("default",)),
        ThreadSpec("default-1", ("default",)),
        ThreadSpec("pdf-0", ("pdf",), "process"),
        ThreadSpec("crawl-0", ("crawl",), "async", 200),
        ThreadSpec("fast", ("urgent", "default")),
    )
    assert cfg.queues == ["default", "pdf", "crawl", "urgent"]


def test_app_ini_shared_with_the_console(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZTQ_REDIS_URL", raising=False)
    path = write(
        tmp_path,
        """
[app:main]
use = egg:ztq
ztq.redis_url = redis://127.0.0.1:7000/0

[ztq:queues]
mail = 3
""",
    )
    cfg = load_config(path)
    assert cfg.redis_url == "redis://127.0.0.1:7000/0" and len(cfg.threads) == 3


def test_env_and_flags_override_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "[server]\nredis = redis://file:1/0\n")
    monkeypatch.setenv("ZTQ_REDIS_URL", "redis://env:2/0")
    assert load_config(path).redis_url == "redis://env:2/0"
    assert load_config(path, redis_url="redis://flag:3/0").redis_url == "redis://flag:3/0"


@pytest.mark.parametrize(
    "text, message",
    [
        ("[server]\nredis = x\n", "worker.ini:2: redis must be a URL"),
        ("[queues]\n\ndefault = mail/urgent\n", "worker.ini:3: queue name 'mail/urgent'"),
        ("[server]\nlease = soon\n", "worker.ini:2: lease must be a number"),
        ("[server]\n\nprefetch = 1.5\n", "worker.ini:3: prefetch must be a whole number"),
        ("[server]\ncolour = blue\n", "worker.ini:2: unknown option 'colour'"),
        ("[server]\nactive_config = maybe\n", "worker.ini:2: active_config"),
        ("[queues]\nbad{name} = 2\n", "worker.ini:2: queue name 'bad{name}'"),
        ("[queues]\ndefault = 999\n", "worker.ini:2: thread count"),
        ("[queues]\ncrawl = 10001 async\n", "worker.ini:2: async tasks for 'crawl' must be"),
        ("[queues]\nfetchers = a, b async\n", "worker.ini:2: an async pool serves one queue"),
        ("[server]\nlease = 1\n", "at least twice the heartbeat"),
        ("no section header\n", "worker.ini"),
        ("[other]\nx = 1\n", "worker.ini:1: unknown section [other]"),
        ("[loggers]\nkeys = root\n", "no [server] or [queues] section"),
    ],
)
def test_bad_config_names_the_line(
    tmp_path: Path, text: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ZTQ_REDIS_URL")  # the file's own values are what is checked
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    assert message in str(info.value)


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config("/nonexistent/worker.ini")


def test_cli_reports_a_bad_config_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "[server]\nlease = soon\n")
    assert main(["worker", "-c", str(path)]) == 2
    assert "worker.ini:2: lease must be a number" in capsys.readouterr().err


def test_cli_reports_a_module_that_does_not_import(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["worker", "--redis", redis_url, "--import", "no_such_module_xyz", "--burst"]) == 2
    assert "cannot import task module 'no_such_module_xyz'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("def broken(:\n    pass\n", "broken_mod.py:1: SyntaxError: "),
        ("import os\n\nVALUE = 1 / 0\n", "broken_mod.py:3: ZeroDivisionError: division by zero"),
    ],
)
def test_a_task_module_that_fails_to_import_is_one_line_with_its_file_and_line(
    source: str,
    says: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/worker.md promises one line and exit 2; a SyntaxError or an exception raised at
    import was a raw traceback with exit 1 (issue 39)."""
    (tmp_path / "broken_mod.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "broken_mod", raising=False)
    code = main(["worker", "--redis", "redis://127.0.0.1:1/0", "--import", "broken_mod", "--burst"])
    err = capsys.readouterr().err
    assert code == 2
    assert "cannot import task module 'broken_mod': " in err and says in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_queue_flags() -> None:
    cfg = load_config(None, threads=(), redis_url="redis://x:1/0")
    assert cfg.threads == (ThreadSpec("default-0", ("default",)),)
    from ztq.worker.cli.commands import _queue_flag

    assert _queue_flag("mail", "process") == [ThreadSpec("mail-0", ("mail",), "process")]
    assert _queue_flag("pdf:2:process") == [
        ThreadSpec("pdf-0", ("pdf",), "process"),
        ThreadSpec("pdf-1", ("pdf",), "process"),
    ]
    assert _queue_flag("crawl:200:async") == [ThreadSpec("crawl-0", ("crawl",), "async", 200)]
    assert _queue_flag("crawl:50", "async") == [ThreadSpec("crawl-0", ("crawl",), "async", 50)]
    with pytest.raises(ConfigError, match="0 threads serve nothing"):
        _queue_flag("crawl:0:async")  # issue 24: a static 0 is refused (docs/worker.md)


@pytest.mark.parametrize(
    ("flag", "said"),
    [
        ("mail:two", "'two' is not a thread count (a whole number >= 1)"),
        ("mail:-1", "'-1' is not a thread count"),
        ("mail:2:proces", "'proces' is not a pool (thread, process, async)"),
        ("mail:2:thread:x", "the form is NAME[:N[:POOL]][:shards=S]"),
        # issue 24: every word of every form, and a static 0 (it served 'default' instead)
        ("mail:0", "0 threads serve nothing: write mail:0..N"),
        ("crawl:0:async", "0 threads serve nothing"),
        ("mail:2:shard=3", "'shard=3' is not a known option (known: shards=N)"),
        ("mail:shards=3:x=1", "'x=1' is not a known option (known: shards=N)"),
        ("mail:1..8:proces", "'proces' is not a pool (thread, process, async)"),
        ("mail:1..8:shard=2", "'shard=2' is not a known option (known: shards=N)"),
        ("mail:1..8:thread:x", "the form is NAME[:N[:POOL]][:shards=S]"),
        ("mail:", "the form is NAME[:N[:POOL]][:shards=S]"),
        ("mail::process", "the form is NAME[:N[:POOL]][:shards=S]"),
    ],
)
def test_a_mistyped_queue_flag_stops_the_worker_before_it_serves_anything(
    redis_url: str, capsys: pytest.CaptureFixture[str], flag: str, said: str
) -> None:
    """Issue 24: ``mail:two`` served a queue named 'two' (the ini's list form) and not mail;
    now every word of the flag is checked, and nothing is registered in Redis."""

    assert main(["worker", "--redis", redis_url, "--queue", flag, "--burst"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"--queue {flag!r}" in err and said in err
    assert len(err.splitlines()) == 1  # one line, no traceback
    assert redis.Redis.from_url(redis_url).keys("*") == []  # no typo queue registered


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        (
            "pdf = 1 proces",
            "queue entry pdf = '1 proces': 'proces' is not a pool (thread, "
            "process, async) nor an option (shards=N)",
        ),
        (
            "hot = 8 shard=3",
            "queue entry hot = '8 shard=3': 'shard=3' is not a known option (known: shards=N)",
        ),
        ("hot = 8 shards=3 colour=red", "'colour=red' is not a known option (known: shards=N)"),
        ("mail = 1..8 shard=3", "'shard=3' is not a known option (known: shards=N)"),
        ("mail = 2 thread process", "'thread' is out of place"),
        ("mail = 0", "queue entry mail = '0': 0 threads serve nothing: write mail = 0..N"),
        ("crawl = 0 async", "0 threads serve nothing"),
        ("fast = urgent, 2", "'2' is out of place"),
        ("mixed = a, b fair process", "'fair' is out of place"),
        ("mixed = a, process, b", "'process' is out of place"),
    ],
)
def test_every_word_of_a_queue_entry_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str, said: str
) -> None:
    """Issue 24: a word the grammar does not know stops the worker, naming file and line,
    the entry and the form expected; before, 'pdf = 1 proces' served queues '1' and 'proces'
    and 'hot = 8 shard=3' complained of a queue name."""
    monkeypatch.delenv("ZTQ_REDIS_URL")
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, f"[server]\nname = w\n\n[queues]\n{entry}\n"))
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'worker.ini'}:5: ") and said in message
    assert "\n" not in message


def test_zero_threads_in_a_ztq_file_is_still_one_thread(tmp_path: Path) -> None:
    """ZTQ's 'default = 0' (a pause of 0 s, one thread) keeps its meaning in ZTQ's file."""
    cfg = load_config(write(tmp_path, "[server]\nhost = a\n\n[queues]\ndefault = 0\n"))
    assert cfg.threads == (ThreadSpec("default-0", ("default",)),)


def test_a_worker_given_queues_never_falls_back_to_default(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 24: '--queue mail:0' alone served queue 'default', which nobody asked for."""
    assert main(["worker", "--redis", redis_url, "--queue", "mail:0", "--burst"]) == 2
    err = capsys.readouterr().err
    assert "--queue 'mail:0': 0 threads serve nothing" in err and "ztq queue pause mail" in err
    assert redis.Redis.from_url(redis_url).keys("*") == []


def test_ztq_queues_gives_the_queues_in_the_flags_form(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ZTQ_QUEUES (a container's way): --queue's entries apart by spaces or commas; it
    replaces [queues] and --queue flags replace it; every word checked (issue 24)."""
    monkeypatch.setenv("ZTQ_QUEUES", "mail:2, pdf:1:process crawl:1..4")
    ini = write(tmp_path, "[queues]\nother = 3\n")
    cfg = load_config(ini)
    assert cfg.threads == (
        ThreadSpec("mail-0", ("mail",)),
        ThreadSpec("mail-1", ("mail",)),
        ThreadSpec("pdf-0", ("pdf",), "process"),
        ThreadSpec("crawl-0", ("crawl",)),
    )
    assert [s.queue for s in cfg.scaled] == ["crawl"]
    flags = load_config(ini, threads=(ThreadSpec("x-0", ("x",)),))
    assert flags.threads == (ThreadSpec("x-0", ("x",)),) and flags.scaled == ()
    monkeypatch.setenv("ZTQ_QUEUES", "mail:two")
    with pytest.raises(ConfigError) as caught:
        load_config(None)
    assert str(caught.value).startswith("environment variable ZTQ_QUEUES 'mail:two': 'two' is")
