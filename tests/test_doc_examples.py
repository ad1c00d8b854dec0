"""The configuration examples in docs/ are run: the worker file of docs/worker.md loads as
described, and every error message docs/settings.md shows is the one the code gives."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ztq.core.errors import ConfigError
from ztq.worker.config import ThreadSpec, load_config

DOCS = Path(__file__).resolve().parents[1] / "docs"


def code_blocks(page: str) -> list[str]:
    return re.findall(r"^```[a-z]*\n(.*?)^```", (DOCS / page).read_text("utf-8"), re.S | re.M)


def test_worker_md_ini_example_loads_as_described(tmp_path: Path, monkeypatch) -> None:
    for var in ("ZTQ_REDIS_URL", "ZTQ_PREFIX", "ZTQ_LEASE", "ZTQ_HEARTBEAT", "ZTQ_MODULES"):
        monkeypatch.delenv(var, raising=False)
    [ini] = [b for b in code_blocks("worker.md") if b.startswith("[server]")]
    path = tmp_path / "worker.ini"
    path.write_text(ini, encoding="utf-8")
    cfg = load_config(path)
    assert cfg.name == "pdf-box-1" and cfg.imports == ("myapp.tasks", "myapp.mail")
    assert (cfg.lease, cfg.heartbeat, cfg.max_lost, cfg.prefetch) == (15, 3, 3, 32)
    assert (cfg.result_ttl, cfg.history_maxlen, cfg.grace, cfg.retry_backoff) == (
        3600,
        10000,
        30,
        1,
    )
    assert cfg.threads == (
        ThreadSpec("default-0", ("default",)),
        ThreadSpec("default-1", ("default",)),
        ThreadSpec("pdf-0", ("pdf",), "process"),
        ThreadSpec("crawl-0", ("crawl",), "async", 200),
        ThreadSpec("fast", ("urgent", "default")),
        *(ThreadSpec(f"hot-{i}", ("hot",), shards=3) for i in range(8)),
        ThreadSpec("mixed", ("mail", "reports"), fair=True),
    )
    assert cfg.shards == {"hot": 3}


def _error(call) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError) as caught:
        call()
    return str(caught.value)


def test_settings_md_error_messages_are_the_real_ones(tmp_path: Path, monkeypatch) -> None:
    [shown] = [b for b in code_blocks("settings.md") if "environment variable ZTQ_LEASE" in b]
    lines = shown.strip().splitlines()
    monkeypatch.chdir(tmp_path)
    for var in ("ZTQ_REDIS_URL", "ZTQ_PREFIX", "ZTQ_LEASE", "ZTQ_HEARTBEAT"):
        monkeypatch.delenv(var, raising=False)

    monkeypatch.setenv("ZTQ_LEASE", "abc")
    got = [_error(load_config)]
    monkeypatch.delenv("ZTQ_LEASE")

    Path("worker.ini").write_text("[server]\nname = a\nheartbeat = 3\n\nlease = soon\n")
    got.append(_error(lambda: load_config("worker.ini")))

    from ztq.console.config import load

    app = ["[app:main]", "use = egg:ztq"] + [""] * 9 + ["ztq.console.page_size = 1"]
    Path("app.ini").write_text("\n".join(app) + "\n")
    got.append(_error(lambda: load({"ztq.console.page_size": "1"}, {}, path="app.ini")))

    got.append(_error(lambda: load_config(None, lease=-1.0)))

    app = ["[app:main]", "use = egg:ztq"] + [""] * 6 + ["ztq.prefix = shop"]
    app += [""] * (39 - len(app) - 1) + ["[ztq:worker]", "prefix = other"]
    Path("app.ini").write_text("\n".join(app) + "\n")
    got.append(_error(lambda: load_config("app.ini")))

    monkeypatch.setenv("ZTQ_HEARTBEAT", "10")
    got.append(_error(lambda: load_config(None, lease=15.0)))

    assert len(got) == len(lines)
    for shown_line, real in zip(lines, got, strict=True):
        if shown_line.endswith("; ..."):
            assert real.startswith(shown_line[: -len("; ...")]), (shown_line, real)
        else:
            assert real == shown_line


def test_app_md_example_runs(redis_url: str, monkeypatch) -> None:
    """docs/app.md's example, as written, on a private Redis (ZTQ_REDIS_URL)."""
    import redis

    [code] = [b for b in code_blocks("app.md") if "App(" in b and "billing" in b]
    monkeypatch.setenv("ZTQ_REDIS_URL", redis_url)
    namespace: dict[str, object] = {"__name__": "docs_app_example"}
    exec(compile(code, "docs/app.md", "exec"), namespace)  # noqa: S102 - our own doc
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        assert len(client.hkeys("shop:{orders}:tasks")) == 2
        assert len(client.hkeys("billing:{orders}:tasks")) == 1
    finally:
        client.close()
        for app in ("shop", "billing"):
            namespace[app].disconnect_all()  # type: ignore[attr-defined]


def test_middleware_md_example_runs_and_orders_the_middleware() -> None:
    from ztq.core.middleware.policies import Retries

    [code] = [b for b in code_blocks("middleware.md") if "class Timing" in b]
    namespace: dict[str, object] = {"__name__": "docs_middleware_example"}
    exec(compile(code, "docs/middleware.md", "exec"), namespace)  # noqa: S102 - our own doc
    names = [type(m).__name__ for m in namespace["app"].middleware.middleware]  # type: ignore[attr-defined]
    assert names == ["LogRuns", "TimeLimit", "RetryNetworkErrors", "Retries", "Callbacks",
                     "Results", "BatchCommit", "Timing"]  # fmt: skip
    assert isinstance(namespace["app"].middleware.middleware[3], Retries)  # type: ignore[attr-defined]


def test_middleware_md_lists_every_hook() -> None:
    from ztq.core.middleware.base import HOOKS

    text = (DOCS / "middleware.md").read_text("utf-8")
    documented = re.findall(r"^\| `([a-z_]+)\(", text, re.M)
    assert sorted(documented) == sorted(HOOKS)


def test_settings_md_lists_every_setting_with_its_environment_variable() -> None:
    from ztq.console import settings as console_settings
    from ztq.core import settings
    from ztq.core.alerts import settings as alert_settings
    from ztq.worker import config as worker_config

    tables = (settings.SETTINGS, alert_settings.SETTINGS, worker_config.SETTINGS,
              console_settings.SETTINGS)  # fmt: skip
    text = (DOCS / "settings.md").read_text("utf-8")
    rows = {
        m.group(1): m.group(2)
        for m in re.finditer(r"^\| `([a-z_.]+)` \|.*?`(ZTQ_[A-Z_]+)`", text, re.M)
    }
    assert rows == {s.name: s.env for s in settings.by_name(*tables).values()}


def test_results_md_example_runs_against_a_worker(redis_url: str, monkeypatch) -> None:
    """The first block defines an app's tasks, a worker serves it, the second block uses it."""
    import threading

    from tests.worker.conftest import FAST
    from ztq.worker.config import ThreadSpec, WorkerConfig
    from ztq.worker.worker import Worker

    monkeypatch.setenv("ZTQ_REDIS_URL", redis_url)
    tasks, client = [b for b in code_blocks("results.md") if b.startswith("from ztq.core")]
    namespace: dict[str, object] = {"__name__": "docs_results_example"}
    exec(compile(tasks, "docs/results.md", "exec"), namespace)  # noqa: S102 - our own doc
    app = namespace["app"]
    cfg = WorkerConfig(redis_url=redis_url, name="docs-results",
                       threads=(ThreadSpec("d", ("default",)),), **FAST)  # fmt: skip
    worker = Worker(cfg, app=app)  # type: ignore[arg-type]
    th = threading.Thread(target=worker.run, daemon=True)
    th.start()
    try:
        exec(compile(client, "docs/results.md", "exec"), namespace)  # noqa: S102
    finally:
        worker.request_stop()
        th.join(15)
        app.disconnect_all()  # type: ignore[attr-defined]


def test_middleware_md_tracing_example_runs() -> None:
    from ztq.core.contrib.otel import OpenTelemetry

    [code] = [b for b in code_blocks("middleware.md") if "OpenTelemetry()" in b]
    namespace: dict[str, object] = {"__name__": "docs_otel_example"}
    exec(compile(code, "docs/middleware.md", "exec"), namespace)  # noqa: S102 - our own doc
    assert isinstance(namespace["app"].middleware.middleware[-1], OpenTelemetry)  # type: ignore[attr-defined]


def test_batches_md_example_runs_against_a_worker(redis_url: str, monkeypatch) -> None:
    """docs/batches.md: the first block defines the tasks, a worker serves them, the second
    makes batches and checks their callbacks' results."""
    import threading

    from tests.worker.conftest import FAST
    from ztq.worker.config import ThreadSpec, WorkerConfig
    from ztq.worker.worker import Worker

    monkeypatch.setenv("ZTQ_REDIS_URL", redis_url)
    tasks, client = [b for b in code_blocks("batches.md") if b.startswith(("from", "import"))]
    namespace: dict[str, object] = {"__name__": "docs_batches_example"}
    exec(compile(tasks, "docs/batches.md", "exec"), namespace)  # noqa: S102 - our own doc
    app = namespace["app"]
    cfg = WorkerConfig(redis_url=redis_url, name="docs-batches",
                       threads=(ThreadSpec("d", ("default",)),), **FAST)  # fmt: skip
    worker = Worker(cfg, app=app)  # type: ignore[arg-type]
    th = threading.Thread(target=worker.run, daemon=True)
    th.start()
    try:
        exec(compile(client, "docs/batches.md", "exec"), namespace)  # noqa: S102
    finally:
        worker.request_stop()
        th.join(15)
        app.disconnect_all()  # type: ignore[attr-defined]
