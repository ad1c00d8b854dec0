"""Worker configuration: the ini format, app.ini sharing, flags, and clear errors."""

from __future__ import annotations

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
        ("[other]\nx = 1\n", "no [server] or [queues] section"),
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
    assert _queue_flag("crawl:0:async") == []


@pytest.mark.parametrize(
    ("flag", "said"),
    [
        ("mail:two", "'two' is not a thread count (a whole number >= 0)"),
        ("mail:-1", "'-1' is not a thread count"),
        ("mail:2:proces", "'proces' is not a pool (thread, process, async)"),
        ("mail:2:thread:x", "the form is NAME[:N[:POOL]][:shards=S]"),
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
