"""One settings path: flag > environment > ini > default, and errors that name the source."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ztq.console import settings as console_settings
from ztq.console.config import load
from ztq.core import settings
from ztq.core.alerts import settings as alert_settings
from ztq.core.auth.passwords import hash_password
from ztq.core.errors import ConfigError
from ztq.core.settings import IniValue, read_ini, resolve
from ztq.worker import config as worker_config
from ztq.worker.config import FIELD, WorkerConfig, load_config

# every table: core's, the alerts', the worker's and the console's
ALL = settings.by_name(
    settings.SETTINGS, alert_settings.SETTINGS, worker_config.SETTINGS, console_settings.SETTINGS
)

SECRET = "test-secret-0123456789-abcdefghij"


@pytest.fixture(scope="module")
def user_lines() -> str:
    return f"ann operator {hash_password('pw', n=1024)}"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for s in ALL.values():
        monkeypatch.delenv(s.env, raising=False)


def ini(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "name, flag, env, file, default",
    [
        ("lease", 40.0, "30", "20", 15.0),
        ("prefix", "flag", "env", "file", "ztq"),
        ("redis_url", "redis://flag:1/0", "redis://env:2/0", "redis://file:3/0", None),
        ("max_lost", 7, "6", "5", 3),
        ("console.page_size", 40, "30", "20", 50),
    ],
)
def test_flag_beats_env_beats_ini_beats_default(
    name: str, flag: object, env: str, file: str, default: object
) -> None:
    s = ALL[name]
    layer = {name: IniValue(file, "app.ini:3", s.app_key or name)}
    environ = {s.env: env}

    def got(**kw: object) -> settings.Resolved:
        return resolve(ALL, [name], **kw)[name]  # type: ignore[arg-type]

    assert got(flags={name: flag}, environ=environ, ini=layer).value == flag
    assert (
        got(flags={name: None}, environ=environ, ini=layer).source
        == f"environment variable {s.env}"
    )
    assert got(environ=environ, ini=layer).value == s.parse(env)
    assert got(environ={}, ini=layer) == settings.Resolved(s.parse(file), "app.ini:3")
    assert got(environ={}).source == "default"
    assert got(environ={}).value == (s.default if default is None else default)


def test_empty_environment_variable_and_empty_ini_value_count_as_unset(tmp_path: Path) -> None:
    path = ini(tmp_path / "app.ini", "[app:main]\nztq.lease =\nztq.prefix = filep\n")
    values = read_ini(path, ALL).values
    got = resolve(ALL, ["lease", "prefix"], environ={"ZTQ_LEASE": "", "ZTQ_PREFIX": ""}, ini=values)
    assert got["lease"].source == "default" and got["prefix"].value == "filep"


def test_worker_file_env_and_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = ini(tmp_path / "worker.ini", "[server]\nlease = 20\nheartbeat = 2\nprefix = file\n")
    assert load_config(path).lease == 20.0
    monkeypatch.setenv("ZTQ_LEASE", "30")
    monkeypatch.setenv("ZTQ_PREFIX", "env")
    monkeypatch.setenv("ZTQ_MAX_LOST", "9")
    cfg = load_config(path)
    assert (cfg.lease, cfg.prefix, cfg.max_lost, cfg.heartbeat) == (30.0, "env", 9, 2.0)
    cfg = load_config(path, lease=40.0, prefix="flag")
    assert (cfg.lease, cfg.prefix) == (40.0, "flag")


def test_app_ini_shares_every_setting_with_the_worker(tmp_path: Path) -> None:
    path = ini(
        tmp_path / "app.ini",
        "[app:main]\nuse = egg:ztq\nztq.redis_url = redis://r:1/0\nztq.prefix = shop\n"
        "ztq.lease = 25\nztq.console.page_size = 20\n\n[ztq:queues]\nmail = 1\n",
    )
    cfg = load_config(path)
    assert (cfg.redis_url, cfg.prefix, cfg.lease) == ("redis://r:1/0", "shop", 25.0)


def test_app_main_and_worker_section_must_agree(tmp_path: Path) -> None:
    path = ini(
        tmp_path / "app.ini",
        "[app:main]\nztq.prefix = shop\nztq.lease = 15\n\n"
        "[ztq:worker]\nprefix = other\nlease = 15.0\n",
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "prefix is set twice with different values" in message
    assert f"ztq.prefix = 'shop' at {path}:2" in message
    assert f"prefix = 'other' at {path}:6" in message
    # the same value spelled twice (15 and 15.0) is not a conflict
    ini(path, "[app:main]\nztq.lease = 15\n\n[ztq:worker]\nlease = 15.0\n")
    assert load_config(path).lease == 15.0


def test_the_console_refuses_a_worker_section_that_disagrees(
    tmp_path: Path, user_lines: str
) -> None:
    path = ini(tmp_path / "app.ini", "[app:main]\nztq.prefix = shop\n\n[ztq:worker]\nprefix = x\n")
    app = {"ztq.prefix": "shop", "ztq.console.secret": SECRET, "ztq.console.users": user_lines}
    with pytest.raises(ConfigError, match="prefix is set twice"):
        load(app, {}, path=path)
    ini(path, "[app:main]\nztq.prefix = shop\n\n[ztq:worker]\nredis = redis://w:1/0\n")
    cfg = load(app, {}, path=path)
    assert (cfg.redis_url, cfg.prefix) == ("redis://w:1/0", "shop")  # the worker's URL


@pytest.mark.parametrize(
    "environ, message",
    [
        ({"ZTQ_LEASE": "abc"}, "environment variable ZTQ_LEASE: lease must be a number, not 'abc'"),
        ({"ZTQ_LEASE": "-1"}, "environment variable ZTQ_LEASE: lease must be a number > 0"),
        ({"ZTQ_LEASE": "nan"}, "ZTQ_LEASE: lease must be a number > 0, not 'nan'"),
        ({"ZTQ_PREFETCH": "1.5"}, "ZTQ_PREFETCH: prefetch must be a whole number, not '1.5'"),
        ({"ZTQ_MAX_LOST": "0"}, "ZTQ_MAX_LOST: max_lost must be a whole number between 1"),
        ({"ZTQ_PREFIX": "a b"}, "environment variable ZTQ_PREFIX: prefix must be 1-32 of"),
        ({"ZTQ_REDIS_URL": "localhost"}, "ZTQ_REDIS_URL: redis_url must be a URL"),
        ({"ZTQ_ACTIVE_CONFIG": "maybe"}, "ZTQ_ACTIVE_CONFIG: active_config must be true or"),
        ({"ZTQ_WORKER_NAME": "a/b"}, "ZTQ_WORKER_NAME: name must be 1-64 of"),
    ],
)
def test_bad_environment_values_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], message: str
) -> None:
    for var, value in environ.items():
        monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError) as info:
        load_config(None)
    assert message in str(info.value)


def test_bad_values_name_the_flag_the_line_and_the_ini_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="^flag lease: lease must be a number > 0, not -1.0$"):
        load_config(None, lease=-1.0)
    path = ini(tmp_path / "app.ini", "[app:main]\nuse = egg:ztq\n\nztq.heartbeat = soon\n")
    with pytest.raises(ConfigError, match=f"^{path}:4: ztq.heartbeat must be a number"):
        load_config(path)
    ini(path, "[app:main]\nztq.leese = 3\n")
    with pytest.raises(ConfigError, match=f"^{path}:2: unknown setting 'ztq.leese'"):
        load_config(path)


def test_lease_and_heartbeat_check_names_both_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZTQ_HEARTBEAT", "10")
    with pytest.raises(ConfigError) as info:
        load_config(None, lease=15.0)
    assert "lease (15s, from flag lease)" in str(info.value)
    assert "heartbeat (10s, from environment variable ZTQ_HEARTBEAT)" in str(info.value)


def test_console_values_name_their_source(tmp_path: Path, user_lines: str) -> None:
    app = {"ztq.console.secret": SECRET, "ztq.console.users": user_lines}
    with pytest.raises(ConfigError, match="^ini: ztq.console.session_hours must be a number"):
        load({**app, "ztq.console.session_hours": "never"}, {})
    environ = {"ZTQ_CONSOLE_PAGE_SIZE": "1"}
    with pytest.raises(ConfigError, match="ZTQ_CONSOLE_PAGE_SIZE: console.page_size must be a wh"):
        load(app, environ)
    with pytest.raises(ConfigError, match="ZTQ_CONSOLE_SECURE_COOKIES: console.secure_cookies"):
        load(app, {"ZTQ_CONSOLE_SECURE_COOKIES": "perhaps"})
    with pytest.raises(ConfigError, match="^environment variable ZTQ_CONSOLE_SECRET: .*default"):
        load(app, {"ZTQ_CONSOLE_SECRET": "changeme"})
    cfg = load(app, {"ZTQ_CONSOLE_PAGE_SIZE": "20", "ZTQ_CONSOLE_SESSION_HOURS": "1"})
    assert (cfg.page_size, cfg.sessions.absolute) == (20, 3600)


def test_a_secret_is_never_echoed(user_lines: str) -> None:
    with pytest.raises(ConfigError) as info:
        load({"ztq.console.secret": SECRET, "ztq.console.users": user_lines + " extra"}, {})
    assert "scrypt" not in str(info.value) and "ztq.console.users entry 1" in str(info.value)


def test_worker_config_defaults_match_the_table() -> None:
    defaults = {f.name: f.default for f in dataclasses.fields(WorkerConfig)}
    for name in worker_config.WORKER:
        if name == "queues":  # ZTQ_QUEUES becomes the threads (below), not a field of its own
            continue
        assert defaults[FIELD.get(name, name)] == ALL[name].default, name
    assert load_config(None) == WorkerConfig(
        threads=load_config(None).threads
    )  # no file, no environment: the defaults


def test_the_table_is_consistent() -> None:
    envs = [s.env for s in ALL.values()]
    assert len(set(envs)) == len(envs) and all(e.startswith("ZTQ_") for e in envs)
    for s in ALL.values():
        if s.name not in ("name", "app", "console.secret", "console.users"):  # empty: none
            assert s.parse(s.default) == s.default, s.name
    assert ALL["console.secret"].env == "ZTQ_CONSOLE_SECRET"
    assert ALL["redis_url"].app_key == "ztq.redis_url"


def test_core_knows_the_ini_keys_of_the_other_tables() -> None:
    """A reader tells another component's key from a typo by core's list of them: it must be
    exactly the keys of the tables declared above ztq.core.settings."""
    others = [s for s in ALL.values() if s.name not in settings.BY_NAME]
    assert {s.app_key for s in others if s.app_key} == settings.table.ELSEWHERE_APP_KEYS
    assert {k for s in others for k in s.worker_keys} == settings.table.ELSEWHERE_WORKER_KEYS


def test_a_reader_leaves_the_other_components_keys_to_them(tmp_path: Path) -> None:
    path = ini(
        tmp_path / "app.ini",
        "[app:main]\nztq.prefix = shop\nztq.console.page_size = 20\nztq.lease = 25\n\n"
        "[ztq:worker]\nlease = 25\nname = w1\n",
    )
    got = read_ini(path, settings.SETTINGS)  # core's table alone: the connection
    assert set(got.values) == {"prefix"} and got.worker == {}
    assert set(read_ini(path, ALL).values) == {"prefix", "console.page_size", "lease", "name"}
    ini(path, "[app:main]\nztq.console.page_sise = 20\n")
    with pytest.raises(ConfigError, match="unknown setting 'ztq.console.page_sise'"):
        read_ini(path, settings.SETTINGS)


def test_default_section_keys_are_not_worker_options(tmp_path: Path) -> None:
    ini = tmp_path / "worker.ini"
    ini.write_text("[DEFAULT]\nlogdir = /var/log\n\n[server]\nlease = 20\n")
    assert load_config(ini).lease == 20


def test_server_and_ztq_worker_sections_together_are_refused(tmp_path: Path) -> None:
    ini = tmp_path / "app.ini"
    ini.write_text("[server]\nlease = 20\n\n[ztq:worker]\nlease = 30\n")
    with pytest.raises(ConfigError, match=r"\[server\] or \[ztq:worker\], not both"):
        load_config(ini)


def test_an_unknown_ini_key_suggests_the_nearest_known_one(tmp_path: Path) -> None:
    path = ini(tmp_path / "app.ini", "[app:main]\nztq.leese = 3\n")
    with pytest.raises(ConfigError, match=f"^{path}:2: unknown setting 'ztq.leese'; did you mean "
                       r"'ztq.lease'\? \(known: "):  # fmt: skip
        load_config(path)
    ini(path, "[ztq:worker]\nprefech = 4\n")
    with pytest.raises(ConfigError, match=r"unknown option 'prefech'; did you mean 'prefetch'\?"):
        load_config(path)
    ini(path, "[ztq:worker]\ncolour = blue\n")
    with pytest.raises(ConfigError, match=r"unknown option 'colour' \(known: active_config, "):
        load_config(path)  # nothing close: no suggestion


def test_request_window_flag_environment_default(
    monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    """How long an enqueue's answer is kept for the same call sent again (docs/settings.md):
    the connection's flag, then ZTQ_REQUEST_WINDOW, then 120 s; the enqueue sends it."""
    import ztq.core as ztq
    from ztq.core.engine.storage import EnqueueEntry

    assert ztq.connect(redis_url).request_window_ms == 120_000
    monkeypatch.setenv("ZTQ_REQUEST_WINDOW", "30")
    storage = ztq.connect(redis_url)
    assert storage.request_window_ms == 30_000
    assert storage.tasks.enqueue_op("q", [EnqueueEntry("a", "[]")])[2][-1] == 30_000
    assert ztq.connect(redis_url, request_window=5).request_window_ms == 5_000
    monkeypatch.setenv("ZTQ_REQUEST_WINDOW", "0")
    with pytest.raises(ConfigError, match="ZTQ_REQUEST_WINDOW"):
        ztq.connect(redis_url)
