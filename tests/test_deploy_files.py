"""What ships in deploy/ works as shipped: the Kubernetes manifests pass the Kubernetes 1.37
schemas, strictly (kubernetes-validate's bundled schemas: nothing is downloaded), and their
ini files load; the systemd unit gives every instance its own valid health port, passes
`systemd-analyze verify` and rates ≤ 5.0 in `systemd-analyze security` (when systemd is
there), and is the one docs/deploy.md shows."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = ROOT / "deploy" / "kubernetes" / "ztq.yaml"
UNIT = ROOT / "deploy" / "systemd" / "ztq-worker@.service"


@pytest.mark.slow
def test_the_kubernetes_manifests_pass_the_schemas_strictly() -> None:
    import kubernetes_validate

    docs = list(yaml.safe_load_all(MANIFESTS.read_text("utf-8")))
    kinds = [d["kind"] for d in docs]
    assert kinds == ["ConfigMap", "Secret", "Deployment", "Deployment", "Service"]
    for doc in docs:  # raises ValidationError, naming the field, on a wrong or unknown one
        kubernetes_validate.validate(doc, "1.37.0", strict=True)


def test_the_kubernetes_config_loads_and_the_pods_use_it(tmp_path: Path, monkeypatch) -> None:
    from ztq.core.settings.parsers import host_port
    from ztq.worker.config import load_config

    config, secret, worker, console, service = yaml.safe_load_all(MANIFESTS.read_text("utf-8"))
    for name, value in secret["stringData"].items():
        monkeypatch.setenv(name, value)
    (tmp_path / "worker.ini").write_text(config["data"]["worker.ini"], encoding="utf-8")
    cfg = load_config(tmp_path / "worker.ini")
    assert cfg.imports == ("shop.tasks",) and cfg.redis_url == secret["stringData"]["ZTQ_REDIS_URL"]
    assert sorted({q for t in cfg.threads for q in t.queues}) == ["default", "mail"]
    app = configparser.ConfigParser()
    app.read_string(config["data"]["app.ini"])
    assert app["server:main"]["listen"] == "0.0.0.0:6543"  # the pod's address, not loopback
    [run] = worker["spec"]["template"]["spec"]["containers"]
    assert run["command"][:4] == ["ztq", "worker", "-c", "/etc/ztq/worker.ini"]
    assert host_port(run["command"][-1]) == "0.0.0.0:8080"
    [serve] = console["spec"]["template"]["spec"]["containers"]
    assert serve["command"] == ["pserve", "/etc/ztq/app.ini"]
    assert service["spec"]["selector"] == console["spec"]["selector"]["matchLabels"]
    grace = worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > cfg.grace


def exec_start(instance: str) -> str:
    """The ExecStart line of an instance, as systemd expands it (%i; $$ is a literal $)."""
    [line] = re.findall(r"^ExecStart=(.*)$", UNIT.read_text("utf-8"), re.M)
    return line.replace("%i", instance).replace("$$", "$")


@pytest.mark.parametrize(("instance", "port"), [("1", 8081), ("10", 8090), ("99", 8179)])
def test_every_instance_gets_its_own_health_port(instance: str, port: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The command line the unit runs, with `echo` for the venv's ztq: the port is a valid
    one (`808%i` gave instance 10 port 80810)."""
    from ztq.core.settings.parsers import host_port

    line = exec_start(instance).replace("/srv/shop/.venv/bin/ztq", "echo")
    argv = re.fullmatch(r"/bin/sh -c '(.*)'", line)
    assert argv is not None, line
    out = subprocess.run(["/bin/sh", "-c", argv.group(1)], capture_output=True, text=True,
                         check=True, timeout=10).stdout.split()  # fmt: skip
    assert out == ["worker", "-c", "/etc/ztq/worker.ini", "--health-port", f"127.0.0.1:{port}"]
    assert host_port(out[-1]) == f"127.0.0.1:{port}"


def test_docs_show_the_unit_as_shipped() -> None:
    text = (ROOT / "docs" / "deploy.md").read_text("utf-8")
    blocks = re.findall(r"^```ini\n(.*?)^```", text, re.S | re.M)
    assert UNIT.read_text("utf-8") in blocks


@pytest.mark.tools
def test_systemd_verifies_the_unit_and_rates_it_ok(tmp_path: Path) -> None:
    assert shutil.which("systemd-analyze"), (
        "no systemd-analyze: apt-get install systemd (make system-deps)"
    )
    unit = tmp_path / "ztq-worker@10.service"
    unit.write_text(UNIT.read_text("utf-8"), encoding="utf-8")
    verify = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                            text=True, timeout=60, check=False)  # fmt: skip
    assert verify.returncode == 0 and not verify.stderr.strip(), verify.stderr
    security = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", "--no-pager", str(unit)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    [level] = re.findall(r"Overall exposure level for \S+: ([\d.]+)", security.stdout)
    assert float(level) <= 5.0, security.stdout
