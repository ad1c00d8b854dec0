"""Redis Sentinel: ``redis+sentinel://`` URLs (parsing, errors, masking, the clients made
from them), replicas' errors after a demotion treated as connection errors, and the whole
path (producer, asyncio producer, worker, console, CLI) on a real Sentinel setup.

The failover tests under load are in ``tests/worker/test_sentinel_failover.py``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.asyncio.sentinel import SentinelConnectionPool as AsyncSentinelPool
from redis.sentinel import SentinelConnectionPool
from webtest import TestApp

import ztq.core as ztq
from tests import sample_tasks as t
from tests.redis_sentinel import LocalSentinel
from ztq.core import settings
from ztq.core.engine.aio.transport import make_async_client
from ztq.core.engine.connection import SENTINEL_FORM, SentinelURL, make_client, parse_sentinel_url
from ztq.core.engine.storage import EnqueueEntry, Finished, Storage, safe_url
from ztq.core.errors import ConfigError, ConnectionFailed
from ztq.worker.embedded import RedisProcess

ROOT = Path(__file__).resolve().parents[2]
PW, SPW = "data p@ss/word", "sentinel:p&ss"  # both need %-encoding in a URL
URL_PW, URL_SPW = "data%20p%40ss%2Fword", "sentinel%3Ap%26ss"


# -- the URL -----------------------------------------------------------------------------------
def test_a_sentinel_url_names_the_sentinels_the_service_the_db_and_the_passwords() -> None:
    url = (
        f"redis+sentinel://:{URL_PW}@s1.example:26380,10.0.0.2:26379,[::1]:5000,s4/mymaster/3"
        f"?sentinel_password={URL_SPW}"
    )
    assert parse_sentinel_url(url) == SentinelURL(
        sentinels=(("s1.example", 26380), ("10.0.0.2", 26379), ("::1", 5000), ("s4", 26379)),
        service="mymaster",
        db=3,
        username=None,
        password=PW,
        sentinel_username=None,
        sentinel_password=SPW,
    )
    bare = parse_sentinel_url("redis+sentinel://u:p@h:1/svc?sentinel_username=su")
    assert (bare.db, bare.username, bare.password, bare.sentinel_username) == (0, "u", "p", "su")
    assert bare.sentinel_password is None


@pytest.mark.parametrize(
    "url, reason",
    [
        ("redis+sentinel://h1:26379,h2:26379", "has no service name"),
        ("redis+sentinel://h1:26379/", "has no service name"),
        ("redis+sentinel://h1:26379//0", "has no service name"),
        ("redis+sentinel://h1:port/mymaster", "has a bad port 'port' for sentinel 'h1:port'"),
        ("redis+sentinel://h1:26379,h2:0/mymaster", "has a bad port '0' for sentinel 'h2:0'"),
        ("redis+sentinel://h1:70000/mymaster", "has a bad port '70000'"),
        ("redis+sentinel://h1:/mymaster", "has a bad port ''"),
        ("redis+sentinel://h1:26379,,h2:26379/mymaster", "has a bad sentinel address ''"),
        ("redis+sentinel:///mymaster", "has a bad sentinel address ''"),
        ("redis+sentinel://h1:1:2/mymaster", "has a bad port '1:2'"),
        ("redis+sentinel://h1:26379/mymaster/zero", "has a bad database 'zero'"),
        ("redis+sentinel://h1:26379/mymaster/0/1", "has a bad database '0/1'"),
        ("redis+sentinel://h1:26379/mymaster?timeout=3", "has an unknown parameter 'timeout'"),
    ],
)
def test_a_malformed_sentinel_url_is_a_config_error_saying_what_is_wrong(
    url: str, reason: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = url.replace("redis+sentinel://", f"redis+sentinel://:{URL_PW}@")
    expected = f"{reason}"
    for call in (
        lambda: make_client(secret),
        lambda: make_async_client(secret),
        lambda: ztq.App("x", redis_url=secret).storage(),
    ):
        with pytest.raises(ConfigError) as caught:
            call()
        message = str(caught.value)
        assert expected in message and SENTINEL_FORM in message, message
        assert "p%40ss" not in message and "p@ss" not in message  # the password is masked
    # the one settings path: a flag, the environment, an ini file all say the same
    with pytest.raises(ConfigError, match="^flag redis_url: redis_url is not valid: .*" + reason):
        settings.connection(url, None)
    monkeypatch.setenv("ZTQ_REDIS_URL", secret)
    with pytest.raises(ConfigError) as caught:
        settings.connection(None, None)
    assert str(caught.value).startswith("environment variable ZTQ_REDIS_URL: redis_url")
    assert reason in str(caught.value) and "p@ss" not in str(caught.value)


def test_a_sentinel_url_in_a_worker_file_is_checked_like_any_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ztq.worker.config import load_config

    monkeypatch.delenv("ZTQ_REDIS_URL")

    path = tmp_path / "worker.ini"
    path.write_text("[server]\nredis = redis+sentinel://h1:26379,h2:x/mymaster\n")
    with pytest.raises(ConfigError, match=r"worker.ini:2: redis is not valid: .*bad port 'x'"):
        load_config(path)
    path.write_text("[server]\nredis = redis+sentinel://h1:26379,h2:26379/mymaster/2\n")
    assert load_config(path).redis_url == "redis+sentinel://h1:26379,h2:26379/mymaster/2"


@pytest.mark.parametrize(
    "url, shown",
    [
        ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://user:pw@h:6379/0", "redis://user:***@h:6379/0"),
        ("redis://user@h:6379/0", "redis://user@h:6379/0"),
        ("redis://h:6379/0?password=pw&db=1", "redis://h:6379/0?password=***&db=1"),
        ("redis+cluster://:p@ss@h:7000", "redis+cluster://:***@h:7000"),
        (
            f"redis+sentinel://:{URL_PW}@h1:26379,h2:26379,[::1]:1/mymaster/0"
            f"?sentinel_password={URL_SPW}",
            "redis+sentinel://:***@h1:26379,h2:26379,[::1]:1/mymaster/0?sentinel_password=***",
        ),
        (
            "redis+sentinel://h1:26379,h2:26379/m?sentinel_username=u&sentinel_password=x",
            "redis+sentinel://h1:26379,h2:26379/m?sentinel_username=u&sentinel_password=***",
        ),
        ("redis+sentinel://h1:26379,h2:26379/m", "redis+sentinel://h1:26379,h2:26379/m"),
    ],
)
def test_safe_url_masks_every_password_of_every_form(url: str, shown: str) -> None:
    assert safe_url(url) == shown


# -- the clients -------------------------------------------------------------------------------
def test_make_client_asks_the_sentinels_for_the_master_with_the_plain_clients_options() -> None:
    url = f"redis+sentinel://:{URL_PW}@h1:1,h2:2/mymaster/4?sentinel_password={URL_SPW}"
    plain = make_client("redis://h:1/0").connection_pool.connection_kwargs
    client = make_client(url, encoding_errors="replace")
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool) and pool.service_name == "mymaster"
    got = pool.connection_kwargs
    for option in ("decode_responses", "socket_connect_timeout", "socket_timeout",
                   "socket_keepalive", "health_check_interval", "retry_on_error"):  # fmt: skip
        assert got[option] == plain[option], option
    assert got["retry"].get_retries() == plain["retry"].get_retries() == 3
    assert (got["db"], got["password"], got["encoding_errors"]) == (4, PW, "replace")
    sentinels = pool.sentinel_manager.sentinels
    assert [(s.get_connection_kwargs()["host"], s.get_connection_kwargs()["port"])
            for s in sentinels] == [("h1", 1), ("h2", 2)]  # fmt: skip
    # a sentinel that does not answer is skipped at once, not retried
    assert all(s.get_connection_kwargs()["password"] == SPW for s in sentinels)
    assert all(s.get_retry().get_retries() == 0 for s in sentinels)
    with pytest.raises(ConfigError, match="not a Redis Cluster"):
        make_client(url, cluster=True)


def test_make_async_client_asks_the_sentinels_too() -> None:
    url = f"redis+sentinel://:{URL_PW}@h1:1,h2:2/mymaster/4?sentinel_password={URL_SPW}"
    client = make_async_client(url)
    pool = client.connection_pool
    assert isinstance(pool, AsyncSentinelPool) and pool.service_name == "mymaster"
    assert (pool.connection_kwargs["db"], pool.connection_kwargs["password"]) == (4, PW)
    assert pool.connection_kwargs["decode_responses"] is True
    sentinels = pool.sentinel_manager.sentinels
    assert [s.connection_pool.connection_kwargs["password"] for s in sentinels] == [SPW, SPW]


# -- a master demoted under a plain client -------------------------------------------------------
@pytest.fixture
def pair() -> Iterator[tuple[RedisProcess, RedisProcess]]:
    """Two redis-servers of this test: ``a`` is demoted to a replica of ``b`` and back."""
    a, b = RedisProcess(), RedisProcess()
    try:
        a.start()
        b.start()
        yield a, b
    finally:
        a.cleanup()
        b.cleanup()


def _admin(node: RedisProcess, *command: str) -> None:
    client = redis.Redis(port=node.port, decode_responses=True)
    client.execute_command(*command)
    client.close()


def _enqueue(storage: Storage, task_id: str) -> None:
    storage.call(*storage.tasks.enqueue_op("q", [EnqueueEntry(task_id, '{"task": "x"}')]))


def test_readonly_from_a_demoted_master_is_a_connection_error_and_the_pool_reconnects(
    pair: tuple[RedisProcess, RedisProcess],
) -> None:
    a, b = pair
    storage = Storage(make_client(a.url), url=a.url)
    _enqueue(storage, "id1")
    before = storage.client.client_id()
    _admin(a, "REPLICAOF", "127.0.0.1", str(b.port))
    with pytest.raises(ConnectionFailed, match=r"is a replica now \(a failover\?\).*read only"):
        _enqueue(storage, "id2")
    # the connections were dropped: the next call connects afresh (a new client id), and
    # once the server is a master again the same Storage works on
    _admin(a, "REPLICAOF", "NO", "ONE")
    assert storage.client.client_id() != before
    _enqueue(storage, "id3")
    assert storage.tasks.record("q", "id3") is not None


def test_a_blocked_wait_unblocked_by_a_demotion_is_a_connection_error(
    pair: tuple[RedisProcess, RedisProcess],
) -> None:
    a, b = pair
    storage = Storage(make_client(a.url), url=a.url)
    caught: list[BaseException] = []

    def wait() -> None:
        try:
            storage.waits.wait(["q"], 5.0)
        except BaseException as exc:  # noqa: BLE001 - checked below
            caught.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.3)  # blocked in BLPOP
    _admin(a, "REPLICAOF", "127.0.0.1", str(b.port))
    waiter.join(5)
    assert len(caught) == 1 and isinstance(caught[0], ConnectionFailed), caught
    assert "UNBLOCKED" in str(caught[0])


@pytest.mark.slow
def test_a_worker_whose_master_is_demoted_backs_off_and_carries_on(
    pair: tuple[RedisProcess, RedisProcess],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A plain URL whose server turned replica (say a virtual IP not moved yet): the worker
    logs, retries with backoff, and works again once the address serves a master."""
    from tests.worker.conftest import FAST, wait_for
    from ztq.worker.config import ThreadSpec, WorkerConfig
    from ztq.worker.worker import Worker

    a, b = pair
    ztq.connect(a.url)
    out = tmp_path / "ran"
    cfg = WorkerConfig(redis_url=a.url, name="demoted", imports=("tests.sample_tasks",),
                       threads=(ThreadSpec("default-0", ("default",)),), **FAST)  # fmt: skip
    worker = Worker(cfg, ztq.get_storage())
    thread = threading.Thread(target=worker.run, daemon=True)
    try:
        with caplog.at_level(logging.WARNING, logger="ztq"):
            thread.start()
            t.record.delay(str(out), "before")
            wait_for(lambda: out.exists() and out.read_text() == "before\n")
            _admin(a, "REPLICAOF", "127.0.0.1", str(b.port))
            # the fault, told once, by its kind: the first error a thread meets may be a
            # blocked read that the demotion unblocked (UNBLOCKED), not a refused write
            wait_for(lambda: "read-only replica" in caplog.text, timeout=10)
            time.sleep(1.0)  # a few rounds of backoff against the replica
            _admin(a, "REPLICAOF", "NO", "ONE")
            wait_for(lambda: _try_enqueue(out, "after"), timeout=10)
            wait_for(lambda: "after" in out.read_text(), timeout=10)
            wait_for(lambda: "Redis takes its calls again" in caplog.text, timeout=10)
        told = [m.split(":")[0] for m in caplog.messages if "retrying with backoff" in m]
        assert told and len(told) == len(set(told))  # once per thread in the fault, not per call
        assert "crashed" not in caplog.text  # handled as a connection error, not a bug
        assert thread.is_alive()
    finally:
        worker.request_stop()
        thread.join(15)
        ztq.disconnect_all()


def _try_enqueue(out: Path, value: str) -> bool:
    try:
        t.record.delay(str(out), value)
    except ConnectionFailed:
        return False
    return True


# -- the whole path on a real Sentinel -----------------------------------------------------------
@pytest.fixture(scope="module")
def local_sentinel() -> Iterator[LocalSentinel]:
    setup = LocalSentinel(password=PW, sentinel_password=SPW).start()
    try:
        yield setup
    finally:
        setup.stop()


@pytest.fixture
def sentinel_url(local_sentinel: LocalSentinel) -> Iterator[str]:
    local_sentinel.flush()
    ztq.connect(local_sentinel.url)
    yield local_sentinel.url
    ztq.disconnect_all()


@pytest.mark.slow
def test_enqueue_fetch_ack_through_a_sentinel_url(
    sentinel_url: str, local_sentinel: LocalSentinel
) -> None:
    storage = ztq.get_storage()
    h = t.add.delay(1, 2)
    assert h.outcome == "added" and ztq.ping(h) == "queued"
    [lease] = storage.leases.fetch("default", "w", "t0", 30_000, 10)
    assert lease.id == h.id and ztq.ping(h) == "running"
    assert storage.leases.ack("default", "w", [Finished(h.id, lease.token, t.add.name, "3")]) == []
    assert ztq.ping(h) == "done" and h.result == 3
    # it all happened on the master the sentinels name, with the master's password
    master = redis.Redis(port=local_sentinel.master_port(), password=PW, decode_responses=True)
    assert master.hexists(storage.keys.tasks("default"), h.id)
    master.close()
    assert "p@ss" not in repr(storage) and "***" in repr(storage)


def test_asyncio_producer_through_a_sentinel_url(sentinel_url: str) -> None:
    async def scenario() -> tuple[str, str]:
        h = await t.add.adelay(2, 2)
        return h.id, await ztq.default_app().aping(h.id)

    task_id, state = asyncio.run(scenario())
    assert state == "queued" and ztq.ping(task_id) == "queued"


@pytest.mark.slow
def test_worker_cli_and_console_through_a_sentinel_url(
    sentinel_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.console.conftest import PASSWORD, SECRET, login
    from ztq.console import main as console
    from ztq.core.auth.passwords import hash_password
    from ztq.worker.cli.commands import main as cli

    out = tmp_path / "ran"
    handles = [t.record.delay(str(out), str(i)) for i in range(20)]
    proc = subprocess.run(
        [sys.executable, "-m", "ztq.worker", "--redis", sentinel_url, "--burst",
         "--import", "tests.sample_tasks", "--queue", "default:2"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(out.read_text().split(), key=int) == [str(i) for i in range(20)]
    assert all(ztq.ping(h) == "done" for h in handles)
    assert "p@ss" not in proc.stderr and "p%40ss" not in proc.stderr

    assert cli(["info", "--redis", sentinel_url]) == 0

    monkeypatch.delenv("ZTQ_REDIS_URL")
    users = f"ann operator {hash_password(PASSWORD, n=1024)}"
    wsgi = console({}, **{"ztq.redis_url": sentinel_url, "ztq.console.secret": SECRET,
                          "ztq.console.users": users})  # fmt: skip
    assert TestApp(wsgi).get("/healthz").json == {"ok": True}
    app = login(TestApp(wsgi), "ann")
    page = app.get("/queues")
    assert "default" in page.text and "p@ss" not in page.text and "p%40ss" not in page.text


@pytest.mark.slow
@pytest.mark.parametrize("which", ["master", "sentinel"])
def test_a_wrong_password_is_a_connection_error_that_shows_no_password(
    local_sentinel: LocalSentinel, which: str
) -> None:
    url = local_sentinel.url.replace(URL_PW if which == "master" else URL_SPW, "wrong%40pw")
    storage = Storage(make_client(url), url=url)
    with pytest.raises(ConnectionFailed) as caught:
        storage.ping_server()
    message = str(caught.value)
    assert "wrong" not in message and "p@ss" not in message and "p%40ss" not in message
    assert ("No master found" in message) == (which == "sentinel"), message


# -- docs/scaling.md, section "Redis Sentinel": every example runs ---------------------------------
DOC_URL = (
    "redis+sentinel://:s3cret@10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379/mymaster/0"
    "?sentinel_password=sentinel-s3cret"
)


def sentinel_doc_blocks() -> list[tuple[str, str]]:
    """(language, code) of each block of the section."""
    text = (ROOT / "docs" / "scaling.md").read_text("utf-8")
    section = text.split("\n## Redis Sentinel\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```([a-z]*)\n(.*?)^```", section, re.S | re.M)


def doc_block(language: str, start: str = "") -> str:
    [code] = [c for lang, c in sentinel_doc_blocks() if lang == language and c.startswith(start)]
    return code


def test_the_doc_examples_are_all_checked_and_name_one_url() -> None:
    blocks = sentinel_doc_blocks()
    assert [lang for lang, _ in blocks] == ["text", "sh", "ini", "ini", "python", ""]
    for lang, code in blocks:
        if lang not in ("text", ""):
            assert DOC_URL in code, code
    assert parse_sentinel_url(DOC_URL).sentinels[2] == ("10.0.0.3", 26379)
    grammar = doc_block("text").strip()
    assert grammar.startswith(SENTINEL_FORM.replace("[:password@]", "[[user]:password@]"))
    assert safe_url(DOC_URL) in (ROOT / "docs" / "scaling.md").read_text("utf-8").replace(
        "h1:26379,h2:26379/mymaster/0", "10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379/mymaster/0"
    )


def test_the_doc_error_messages_are_the_real_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    shown = doc_block("").strip().splitlines()
    monkeypatch.delenv("ZTQ_REDIS_URL")
    got = []
    with pytest.raises(ConfigError) as caught:
        settings.connection("redis+sentinel://10.0.0.1:26379,10.0.0.2:26379", None)
    got.append(str(caught.value))
    monkeypatch.setenv(
        "ZTQ_REDIS_URL", "redis+sentinel://:s3cret@10.0.0.1:26379,10.0.0.2:x/mymaster"
    )
    with pytest.raises(ConfigError) as caught:
        settings.connection(None, None)
    got.append(str(caught.value))
    assert got == shown


def test_the_doc_producer_runs(sentinel_url: str) -> None:
    code = doc_block("python").replace(DOC_URL, sentinel_url)
    namespace: dict[str, Any] = {"__name__": "docs_sentinel_example"}
    exec(compile(code, "docs/scaling.md", "exec"), namespace)  # noqa: S102 - our own doc
    [task_id] = ztq.get_storage().client.hkeys(ztq.get_storage().keys.tasks("default"))
    assert ztq.ping(task_id) == "queued"


@pytest.mark.slow
def test_the_doc_worker_file_loads_and_its_url_reaches_the_master(
    sentinel_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ztq.worker.config import ThreadSpec, load_config

    monkeypatch.delenv("ZTQ_REDIS_URL")
    path = tmp_path / "worker.ini"
    path.write_text(doc_block("ini", "[server]"))
    cfg = load_config(path)
    assert cfg.redis_url == DOC_URL and cfg.imports == ("myapp.tasks",)
    assert cfg.threads == tuple(ThreadSpec(f"default-{i}", ("default",)) for i in range(4))
    path.write_text(doc_block("ini", "[server]").replace(DOC_URL, sentinel_url))
    assert Storage(make_client(load_config(path).redis_url)).ping_server()


@pytest.mark.slow
def test_the_doc_console_ini_serves(
    sentinel_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyramid.paster import get_app

    from tests.console.conftest import SECRET, login
    from ztq.core.auth.passwords import hash_password

    monkeypatch.delenv("ZTQ_REDIS_URL")
    monkeypatch.setenv("ZTQ_CONSOLE_SECRET", SECRET)
    monkeypatch.setenv("ZTQ_CONSOLE_USERS", f"ann operator {hash_password('pw', n=1024)}")
    path = tmp_path / "app.ini"
    # PasteDeploy reads app.ini with interpolation: the URL's %-escapes are written %%
    path.write_text(
        doc_block("ini", "[app:main]").replace(DOC_URL, sentinel_url.replace("%", "%%"))
    )
    app = TestApp(get_app(str(path)))
    assert app.get("/healthz").json == {"ok": True}
    assert "127.0.0.1" not in app.get("/login").text  # no Redis address before sign-in
    login(app, "ann", "pw")
    assert "sentinel_password=***" in app.get("/").text  # the footer shows it masked


@pytest.mark.slow
def test_the_doc_worker_command_runs(
    sentinel_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.worker.conftest import wait_for

    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "tasks.py").write_text(
        "from ztq.core import task\n\n\n@task\ndef note(path: str) -> None:\n"
        "    with open(path, 'a') as fh:\n        fh.write('done\\n')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from myapp.tasks import note  # type: ignore[import-not-found]

    out = tmp_path / "ran"
    handle = note.delay(str(out))
    script = doc_block("sh").replace(DOC_URL, sentinel_url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZTQ_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # the venv's ztq
    proc = subprocess.Popen(["bash", "-ec", script], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    try:
        # the file appears when the task opens it: wait for what it wrote and for the ack
        wait_for(lambda: (out.exists() and out.read_text() == "done\n"
                          and ztq.ping(handle) == "done") or proc.poll() is not None,
                 timeout=30)  # fmt: skip
        assert out.read_text() == "done\n" and ztq.ping(handle) == "done"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the group this test started: bash and ztq
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        sys.modules.pop("myapp.tasks", None)
        sys.modules.pop("myapp", None)
    assert b"s3cret" not in (proc.stdout.read() if proc.stdout else b"")
