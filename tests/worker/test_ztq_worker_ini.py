"""ZTQ's worker.ini, as ZTQ documented it, runs a ztq worker: ``host``/``port``/``db`` give
the Redis (a URL or those, not both), ``alias`` names the worker, ``active_config`` says
whether the console may change its threads, and ``[queues]`` lists one number per thread."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ztq.core.errors import ConfigError
from ztq.worker.config import ThreadSpec, load_config

# ZTQ's README ("3. 运行worker"), as written there, its comments included
ZTQ_README_INI = """\
[server]
host = localhost
port = 6379
db = 0
alias = w01
active_config = false
modules = ztq_demo.tasks                   # 所有需要import的任务模块，每个一行

[queues]
default= 0                          # default队列，起1个处理线程
mail = 0, 0                         # mail队列，起2个处理线程

[log]
handler_file = ./ztq_worker.log
level = ERROR
"""

# the worker.ini ztq_worker shipped (ztq_worker/worker.ini), trailing blank of "6379 " kept
ZTQ_WORKER_PACKAGE_INI = """\
[server]
host = localhost
port = 6379 \n\
db = 0
alias = w01
active_config = false
modules = ztq_core.demo

[queues]
default = 0
mail = 0

[log]
key = ztq_worker
handler_file = ./ztq_worker.log
level = ERROR
"""


@pytest.fixture(autouse=True)
def _the_files_own_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZTQ_REDIS_URL")  # the tests' guard: the files' values are checked


def write(tmp_path: Path, text: str, name: str = "worker.ini") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_ztqs_readme_file_loads_as_ztq_read_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="ztq.worker.config"):
        cfg = load_config(write(tmp_path, ZTQ_README_INI))
    assert cfg.redis_url == "redis://localhost:6379/0"
    assert cfg.name == "w01" and cfg.worker_id == "w01"  # alias names the worker
    assert cfg.active_config is False  # the console may not change its threads
    assert cfg.imports == ("ztq_demo.tasks",)
    assert cfg.threads == (  # "default= 0": one thread; "mail = 0, 0": two
        ThreadSpec("default-0", ("default",)),
        ThreadSpec("mail-0", ("mail",)),
        ThreadSpec("mail-1", ("mail",)),
    )
    assert "[log] is ZTQ's logging section and is not read" in caplog.text


def test_the_worker_ini_ztq_worker_shipped_loads(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, ZTQ_WORKER_PACKAGE_INI))
    assert cfg.redis_url == "redis://localhost:6379/0" and cfg.name == "w01"
    assert [t.name for t in cfg.threads] == ["default-0", "mail-0"]


def test_a_pause_after_each_task_is_logged_not_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path, "[server]\nhost = redis.local\n\n[queues]\nindex = 5, 0, 2\n")
    with caplog.at_level(logging.WARNING, logger="ztq.worker.config"):
        cfg = load_config(path)
    assert [t.name for t in cfg.threads] == ["index-0", "index-1", "index-2"]
    assert cfg.redis_url == "redis://redis.local:6379/0"  # ZTQ's defaults for port and db
    assert "worker.ini:5: index = 5, 0, 2: ZTQ's pause after each task is not kept" in caplog.text


def test_flags_and_environment_still_win(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "[server]\nhost = 10.0.0.5\nport = 6380\ndb = 3\n")
    assert load_config(path).redis_url == "redis://10.0.0.5:6380/3"
    monkeypatch.setenv("ZTQ_REDIS_URL", "redis://env:1/0")
    assert load_config(path).redis_url == "redis://env:1/0"
    assert load_config(path, redis_url="redis://flag:2/0").redis_url == "redis://flag:2/0"


def test_app_ini_and_a_ztq_worker_section_must_agree(tmp_path: Path) -> None:
    text = "[app:main]\nztq.redis_url = redis://a:1/0\n\n[ztq:worker]\nhost = b\n"
    with pytest.raises(ConfigError, match="redis_url is set twice with different values"):
        load_config(write(tmp_path, text, "app.ini"))
    same = "[app:main]\nztq.redis_url = redis://b:6379/0\n\n[ztq:worker]\nhost = b\n"
    assert load_config(write(tmp_path, same, "app.ini")).redis_url == "redis://b:6379/0"


@pytest.mark.parametrize(
    "text, message",
    [
        ("[server]\nredis = redis://a:1/0\nhost = b\nport = 2\n",
         "worker.ini:2: give redis = URL or ZTQ's host, port and db, not both (host/port at "),
        ("[server]\nhost = b\n\nport = x\n", "worker.ini:4: port must be a whole number, not 'x'"),
        ("[server]\nport = 70000\n",
         "worker.ini:2: port must be a whole number between 1 and 65535, not '70000'"),
        ("[server]\nhost = a b\n", "worker.ini:2: host must be a host name or address"),
        ("[server]\ndb = -1\n", "worker.ini:2: db must be a whole number between 0 and"),
        ("[server]\nredis = redis://a:1/0\n\n[queues]\nmail = 0, 0\n",
         "worker.ini:5: queue entry mail = '0, 0' is ZTQ's list of threads (one per number), "
         "read so only in a file that gives ZTQ's host/port/db; here write mail = 2"),
        ("[server]\nhost = a\n\n[queues]\nbad{q} = 0\n", "worker.ini:5: queue name 'bad{q}'"),
        ("[server]\ncolour = blue\n", "known: active_config, alias, app, autoscale_cpu_max,"),
    ],
)  # fmt: skip
def test_bad_ztq_values_name_the_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text))
    assert message in str(caught.value)


def test_ztq_numbers_in_a_ztq_file_are_threads_but_ztq_syntax_still_reads(tmp_path: Path) -> None:
    text = "[server]\nhost = a\n\n[queues]\npdf = 1 process\nfast = urgent, default\n"
    cfg = load_config(write(tmp_path, text))
    assert cfg.threads == (
        ThreadSpec("pdf-0", ("pdf",), "process"),
        ThreadSpec("fast", ("urgent", "default")),
    )
    # ztq's own file: 0 threads serve nothing, and a worker given queues never falls back to
    # serving `default` instead (issue 24: `mail = 0` served default, without a word)
    with pytest.raises(ConfigError, match="0 threads serve nothing"):
        load_config(write(tmp_path, "[queues]\ndefault = 0\n"))
