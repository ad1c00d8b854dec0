"""``make run``: Redis (embedded unless ``ZTQ_REDIS_URL``), a worker, the console, demo tasks.

Ctrl-C stops everything it started, by PID.
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import ztq.core as ztq
from ztq.core.passwords import hash_password
from ztq.worker import demo_tasks as demo
from ztq.worker.embedded import RedisProcess

ROOT = Path(__file__).resolve().parent.parent
CONSOLE_URL = "http://127.0.0.1:6543"


def produce_some() -> None:
    """A handful of demo tasks: most succeed, some fail, retry or report progress."""
    n = random.randint(0, 10_000)
    demo.resize_image.delay(f"photo-{n}.jpg", random.choice([320, 640, 1280]))
    to = random.choice(["ann@example.org", "bob@example.org", "invalid@example.org"])
    demo.send_mail.delay(to, f"Your order {n}")
    if random.random() < 0.3:
        demo.convert_pdf.enqueue((f"report-{n}", random.randint(3, 8)))
    site = random.choice(["https://example.org/a", "https://example.org/broken"])
    demo.crawl.enqueue((f"{site}?{n}",), delay=random.choice([0, 0, 5, 30]))
    if random.random() < 0.1:
        demo.resize_image.enqueue((f"urgent-{n}.jpg", 64), priority="high")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    url = os.environ.get("ZTQ_REDIS_URL")
    redis_proc = None
    if not url:
        redis_proc = RedisProcess().start()
        url = redis_proc.url
    password = secrets.token_urlsafe(9)
    env = {
        **os.environ,
        "ZTQ_REDIS_URL": url,
        "ZTQ_CONSOLE_SECRET": secrets.token_hex(32),
        "ZTQ_CONSOLE_USERS": f"admin operator {hash_password(password)}",
    }
    worker_args = [sys.executable, "-m", "ztq.worker", "--redis", url, "--name", "demo-worker",
                   "--import", "ztq.worker.demo_tasks", "--queue", "default:2",
                   "--queue", "mail:1", "--queue", "pdf:1:process"]  # fmt: skip
    pserve = str(Path(sys.executable).parent / "pserve")
    children = [
        # own sessions: Ctrl-C reaches only this process, which stops the children in order
        subprocess.Popen(worker_args, env=env, cwd=ROOT, start_new_session=True),
        subprocess.Popen(
            [pserve, str(ROOT / "app.ini")], env=env, cwd=ROOT, start_new_session=True
        ),
    ]
    ztq.connect(url)
    signal.signal(signal.SIGTERM, _interrupt)  # stop cleanly on SIGTERM as on Ctrl-C
    print(f"\n  ztq demo: console {CONSOLE_URL}  login admin / {password}")
    print(f"  Redis {url}   (Ctrl-C stops everything)\n", flush=True)
    try:
        while all(child.poll() is None for child in children):
            produce_some()
            time.sleep(random.uniform(0.5, 2.0))
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut cleanup short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("\n  stopping the worker, the console and Redis ...", flush=True)
        for child in children:
            if child.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGTERM)
        for child in children:
            try:
                child.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(child.pid, signal.SIGKILL)
                child.wait(5)
        if redis_proc is not None:
            redis_proc.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
