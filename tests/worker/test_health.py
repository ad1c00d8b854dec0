"""Health checks: the worker's /livez and /readyz, the console's /healthz, and the commands
of docs/deploy.md (the Kubernetes manifests of deploy/kubernetes, the systemd unit, the cron
check) run as written."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests import sample_tasks as t
from tests.console.conftest import SECRET
from tests.worker.cli_transcript import command_blocks
from ztq.core.auth.passwords import hash_password
from ztq.core.errors import ConfigError
from ztq.worker.embedded import RedisProcess
from ztq.worker.health import parse_address

pytestmark = pytest.mark.slow  # worker and console processes, systemd and Kubernetes commands

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def wait_for(url: str, status: int, proc: subprocess.Popen[bytes], timeout: float = 30) -> str:
    """Poll ``url`` until it answers ``status`` (the process must stay up meanwhile)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            got, body = get(url)
            if got == status:
                return body
        except (urllib.error.URLError, ConnectionError):
            pass
        assert proc.poll() is None, f"the process exited with {proc.returncode}"
        assert time.monotonic() < deadline, f"{url} did not answer {status}"
        time.sleep(0.1)


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, within: float = 45) -> int:
    proc.send_signal(sig)
    try:
        return proc.wait(within)
    finally:
        if proc.poll() is None:
            proc.kill()


def worker_ini(tmp_path: Path, redis_url: str) -> Path:
    path = tmp_path / "worker.ini"
    path.write_text(f"[server]\nredis = {redis_url}\nheartbeat = 0.5\nlease = 2\n"
                    "idle_wait = 0.5\n\n"
                    "[queues]\ndefault = 1\n")  # fmt: skip
    return path


def test_health_addresses() -> None:
    assert parse_address("8080") == ("127.0.0.1", 8080)  # no login: loopback unless named
    assert parse_address("0.0.0.0:8080") == ("0.0.0.0", 8080)
    assert parse_address("127.0.0.1:9000") == ("127.0.0.1", 9000)
    assert parse_address("[::1]:9000") == ("::1", 9000)
    for bad in ("", "http", "0", "70000", "host:"):
        with pytest.raises(ConfigError):
            parse_address(bad)


def test_a_bad_health_port_stops_the_worker_with_a_clear_error(tmp_path: Path) -> None:
    env = {**os.environ, "ZTQ_REDIS_URL": "redis://127.0.0.1:1/0"}
    done = subprocess.run([str(BIN / "ztq"), "worker", "--health-port", "eighty"], env=env,
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    assert done.returncode == 2 and "health must be PORT or HOST:PORT" in done.stderr


def test_the_health_port_is_on_loopback_unless_a_host_is_named(
    redis_url: str, tmp_path: Path
) -> None:
    """A bare port answers on 127.0.0.1 only (127.0.0.2 is refused, as any other address of
    the host would be); ``--health-host 0.0.0.0`` answers on every address."""
    ini = str(worker_ini(tmp_path, redis_url))
    for host_flag, reachable in (([], False), (["--health-host", "0.0.0.0"], True)):
        port = free_port()
        proc = subprocess.Popen([str(BIN / "ztq"), "worker", "-c", ini, "--health-port",
                                 str(port), *host_flag],
                                env={**os.environ, "ZTQ_REDIS_URL": redis_url},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
        try:
            wait_for(f"http://127.0.0.1:{port}/livez", 200, proc)
            if reachable:
                assert get(f"http://127.0.0.2:{port}/livez")[0] == 200
            else:
                with pytest.raises(urllib.error.URLError):
                    get(f"http://127.0.0.2:{port}/livez")
            assert stop(proc) == 0, proc.stderr.read()  # type: ignore[union-attr]
        finally:
            if proc.poll() is None:
                proc.kill()
    done = subprocess.run([str(BIN / "ztq"), "worker", "--health-host", "0.0.0.0"],
                          env={**os.environ, "ZTQ_REDIS_URL": redis_url},
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    assert done.returncode == 2 and "--health-host needs --health-port" in done.stderr


def test_readyz_follows_redis_and_livez_stays_up(tmp_path: Path) -> None:
    """Not ready while Redis is down (and ready again after), live all along."""
    redis = RedisProcess().start()
    port = free_port()
    env = {**os.environ, "ZTQ_REDIS_URL": redis.url}
    proc = subprocess.Popen([str(BIN / "ztq"), "worker", "-c", str(worker_ini(tmp_path, redis.url)),
                             "--health-port", f"127.0.0.1:{port}"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        assert wait_for(base + "/readyz", 200, proc).strip() == "ready"
        assert get(base + "/livez") == (200, "live\n")
        assert get(base + "/nothing")[0] == 404
        assert "ztq_worker_redis_data_lost_total 0" in get(base + "/metrics")[1]
        redis_port = redis.port
        redis.stop()
        reason = wait_for(base + "/readyz", 503, proc)
        assert "cannot reach Redis" in reason
        # the answer needs no login: no connection URL, no Redis address in it
        assert "redis://…" in reason and f":{redis_port}" not in reason, reason
        assert get(base + "/livez")[0] == 200  # a Redis outage is no reason to restart
        redis = RedisProcess(port=redis_port).start()
        wait_for(base + "/readyz", 200, proc)
        assert stop(proc) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        redis.stop()


def test_the_kubernetes_probes_of_docs_deploy_md(redis_url: str, tmp_path: Path) -> None:
    import yaml

    manifests = REPO / "deploy" / "kubernetes" / "ztq.yaml"  # what docs/deploy.md points to
    _, _, worker_part, console_part, _ = yaml.safe_load_all(manifests.read_text("utf-8"))

    def container(deployment: dict) -> tuple[dict, dict[str, tuple[str, int]]]:
        [c] = deployment["spec"]["template"]["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        gets = {
            k: c[k]["httpGet"] for k in ("livenessProbe", "readinessProbe") if "httpGet" in c[k]
        }
        probes = {kind: (get["path"], ports[get["port"]]) for kind, get in gets.items()}
        return c, probes

    worker_container, paths = container(worker_part)
    command = worker_container["command"]
    assert paths == {"livenessProbe": ("/livez", 8080), "readinessProbe": ("/readyz", 8080)}
    grace = worker_part["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    port = free_port()
    argv = [a.replace("/etc/ztq/worker.ini", str(worker_ini(tmp_path, redis_url)))
            .replace("0.0.0.0:8080", f"127.0.0.1:{port}") for a in command]  # fmt: skip
    argv[0] = str(BIN / argv[0])
    proc = subprocess.Popen(argv, env={**os.environ, "ZTQ_REDIS_URL": redis_url},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        for path, _ in paths.values():
            wait_for(f"http://127.0.0.1:{port}{path}", 200, proc)
        started = time.monotonic()
        assert stop(proc, signal.SIGTERM, grace) == 0  # what Kubernetes sends first
        assert time.monotonic() - started < grace
    finally:
        if proc.poll() is None:
            proc.kill()
    # the console's container and its probe
    console_container, console_probes = container(console_part)
    [pserve, ini] = console_container["command"]
    path, probe_port = console_probes["readinessProbe"]
    assert ini == "/etc/ztq/app.ini" and probe_port == 6543
    port = free_port()
    app_ini = tmp_path / "app.ini"
    app_ini.write_text(
        (REPO / "app.ini").read_text().replace("127.0.0.1:6543", f"127.0.0.1:{port}")
    )
    env = {**os.environ, "ZTQ_REDIS_URL": redis_url, "ZTQ_CONSOLE_SECRET": SECRET,
           "ZTQ_CONSOLE_USERS": f"ann operator {hash_password('pw', n=1024)}"}  # fmt: skip
    proc = subprocess.Popen([str(BIN / pserve), str(app_ini)], env=env, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        assert json.loads(wait_for(f"http://127.0.0.1:{port}{path}", 200, proc)) == {"ok": True}
    finally:
        stop(proc)


def test_the_systemd_unit_of_docs_deploy_md(redis_url: str, tmp_path: Path) -> None:
    [unit] = [b for b in command_blocks("deploy.md") if "[Service]" in b]
    service = dict(re.findall(r"^(\w+)=(.*)$", unit, re.M))
    port = free_port()
    instance = str(port - 8080)  # the instance whose health port is this free one
    line = service["ExecStart"].replace("/srv/shop/.venv/bin/", f"{BIN}/")
    line = line.replace("/etc/ztq/worker.ini", str(worker_ini(tmp_path, redis_url)))
    line = line.replace("%i", instance).replace("$$", "$")  # as systemd expands them
    name = service["Environment"].split("=", 1)[1].replace("%H", socket.gethostname())
    env = {**os.environ, "ZTQ_REDIS_URL": redis_url, "ZTQ_WORKER_NAME": name.replace("%i", "1")}
    proc = subprocess.Popen(shlex.split(line), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_for(f"http://127.0.0.1:{port}/livez", 200, proc)
        wait_for(f"http://127.0.0.1:{port}/readyz", 200, proc)
        assert service["KillSignal"] == "SIGTERM"
        assert stop(proc, signal.SIGTERM, float(service["TimeoutStopSec"])) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    [cron] = [b for b in command_blocks("deploy.md") if "||" in b]
    env = {k: v for k, v in os.environ.items() if k != "ZTQ_REDIS_URL"}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    check = cron.split("||")[0].replace("/etc/ztq/worker.ini", str(worker_ini(tmp_path, redis_url)))
    done = subprocess.run(["sh", "-c", check], capture_output=True, text=True, timeout=30,
                          env=env)  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")  # nothing for cron to mail
    t.add.delay(1, 1)  # a task and no worker: a reason on stderr, for cron's mail
    done = subprocess.run(["sh", "-c", check], capture_output=True, text=True, timeout=30,
                          env=env)  # fmt: skip
    assert done.returncode == 1 and done.stdout == "" and "no live worker" in done.stderr


def test_livez_fails_when_the_main_loop_stops_going_round(redis_url: str) -> None:
    import ztq.core as ztq
    from ztq.worker.health import Health

    health = Health(ztq.get_storage(), heartbeat=3.0, lost_after=30.0)
    assert health.live() == (True, "live")
    assert health.ready() == (False, "no heartbeat written yet")
    health.beating()
    assert health.ready() == (True, "ready")
    health.looped -= 18.0  # 3 heartbeats and 10 s allowed: 19 s
    assert health.live()[0]
    health.looped -= 2.0
    ok, why = health.live()
    assert not ok and why.startswith("the main loop has not run for 20 s")
    health.beat = (health.beat or 0) - 31.0
    assert health.ready() == (False, "the last heartbeat was written 31 s ago")
    health.stopping = True
    assert health.ready() == (False, "stopping")
