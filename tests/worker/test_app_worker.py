"""A worker serves one app: it runs that app's tasks, sends callbacks through it, and
``ztq worker --app module:attr`` takes the app's own Redis URL and prefix (real Redis)."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import redis

from tests import app_tasks
from tests.worker.conftest import FAST, stop_process, wait_for
from ztq.core import App
from ztq.worker.cli.commands import main
from ztq.worker.config import ThreadSpec, WorkerConfig
from ztq.worker.worker import Worker

ROOT = Path(__file__).resolve().parents[2]


def test_a_worker_runs_its_apps_tasks_and_sends_callbacks_through_it(
    redis_url: str, tmp_path: Path
) -> None:
    app = App("x", redis_url=redis_url, prefix="x")
    log = tmp_path / "log"

    @app.task(name="step")
    def step(n: int) -> int:
        with open(log, "a") as f:
            f.write(f"step {n}\n")
        return n

    then = step.prepare((2,))
    h = step.enqueue((1,), callback=then)
    threads = (ThreadSpec("d", ("default",)),)
    cfg = WorkerConfig(redis_url=redis_url, prefix="x", name="app-worker", threads=threads, **FAST)
    worker = Worker(cfg, app=app)
    th = threading.Thread(target=worker.run, daemon=True)
    th.start()
    try:
        wait_for(lambda: app.ping(then.resolve_id(), "default") == "done")
        assert app.ping(h) == "done" and log.read_text().splitlines() == ["step 1", "step 2"]
        assert worker.storage.keys.prefix == "x"
    finally:
        worker.request_stop()
        th.join(15)
        app.disconnect_all()
    assert not th.is_alive()


@pytest.mark.slow
def test_ztq_worker_app_serves_that_app_with_its_prefix(redis_url: str, tmp_path: Path) -> None:
    out = open(tmp_path / "worker.log", "ab")  # noqa: SIM115 - closed below
    args = [
        sys.executable,
        "-m",
        "ztq.worker",
        "--app",
        "tests.app_tasks:app",
        "--redis",
        redis_url,
        "--queue",
        "orders",
        "--heartbeat",
        "0.3",
        "--lease",
        "2",
        "--grace",
        "2",
    ]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=out, stderr=out)  # fmt: skip
    try:
        app_tasks.app.connect(redis_url)
        h = app_tasks.total.delay(2, 3)

        def done() -> bool:
            assert proc.poll() is None, (tmp_path / "worker.log").read_text()
            return app_tasks.app.ping(h) == "done"

        wait_for(done, timeout=20)
        assert h.result == 5
        client = redis.Redis.from_url(redis_url)
        try:
            assert client.keys("shop:*") and client.keys("ztq:*") == []
        finally:
            client.close()
    finally:
        stop_process(proc)
        out.close()
        app_tasks.app.disconnect_all()


def test_a_bad_app_stops_the_worker_with_a_clear_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["worker", "--app", "tests.app_tasks:total"]) == 2
    assert "tests.app_tasks:total is not a ztq.core.App" in capsys.readouterr().err


def test_a_module_with_tasks_on_another_app_is_named_at_start(
    redis_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 24: ``ztq worker --import shop_orders`` where shop_orders uses ``App("shop")``
    served the default app, and every run of its tasks failed with UnknownTask."""
    (tmp_path / "shop_orders.py").write_text(
        "from ztq.core import App\n\nshop = App('shop', prefix='shop')\n\n\n"
        "@shop.task(queue='orders')\ndef pay(n: int) -> int:\n    return n\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "shop_orders", raising=False)
    with caplog.at_level(logging.WARNING, logger="ztq.worker.worker"):
        assert main(["worker", "--redis", redis_url, "--import", "shop_orders", "--queue",
                     "orders", "--heartbeat", "0.2", "--lease", "1", "--burst"]) == 0  # fmt: skip
    [warning] = [r.getMessage() for r in caplog.records if "shop_orders" in r.getMessage()]
    assert "module shop_orders defines tasks on app 'shop' (shop_orders.pay)" in warning
    assert "the default app" in warning and "use --app shop_orders:shop" in warning


@pytest.mark.slow
def test_no_warning_when_the_app_served_has_the_modules_tasks(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="ztq.worker.worker"):
        assert main(["worker", "--redis", redis_url, "--app", "tests.app_tasks:app",
                     "--import", "tests.app_tasks", "--queue", "orders", "--heartbeat", "0.2",
                     "--lease", "1", "--burst"]) == 0  # fmt: skip
    assert not [r for r in caplog.records if "--app" in r.getMessage()]
