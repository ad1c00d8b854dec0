"""Arranging console tests: tasks in every state, worker heartbeats, history, cron entries.

Everything is written through ``ztq.core`` (enqueue, the storage scripts, heartbeats), as a
worker would, so the console sees real records.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ztq.core.engine.record import decode_payload, split_record
from ztq.core.engine.storage import Finished, Storage
from ztq.core.engine.workers import BAND, log_event, publish_cron_entries, write_heartbeat

TRACEBACK = """Traceback (most recent call last):
  File "/srv/ztq/worker/execute.py", line 61, in run
    result = fn(*args, **kwargs)
  File "/srv/app/tests/{module}.py", line {line}, in {function}
    raise {kind}(message)
{kind}: {message}
"""


def work(
    storage: Storage,
    queue: str = "default",
    *,
    worker: str = "w1",
    thread: str = "default-0",
    fail: Any = None,
    hold: Any = None,
    limit: int = 1000,
) -> list[str]:
    """Lease what is ready in ``queue`` and finish it: ``fail(payload)`` -> an error message
    or (type, message) (the task fails), ``hold(payload)`` -> True (stays running).
    Returns the leased ids."""
    leases = storage.leases.fetch(queue, worker, thread, 60_000, limit)
    finished = []
    for lease in leases:
        payload = decode_payload(lease.payload)
        if hold is not None and hold(payload):
            continue
        message = fail(payload) if fail is not None else None
        if message:
            kind, message = message if isinstance(message, tuple) else ("ValueError", message)
            function = payload["task"].rsplit(".", 1)[-1]
            tb = TRACEBACK.format(
                kind=kind, message=message, module="sample_tasks", function=function,
                line=40 + len(function),
            )  # fmt: skip
            error = f"{kind}: {message}"
            storage.leases.fail(queue, worker, lease.id, lease.token, payload["task"], error, tb)
        else:
            finished.append(Finished(lease.id, lease.token, payload["task"], json.dumps("ok")))
    if finished:
        storage.leases.ack(queue, worker, finished)
    return [lease.id for lease in leases]


def heartbeat(
    storage: Storage,
    worker: str = "w1",
    *,
    status: str = "running",
    threads: dict[str, int] | None = None,
    current: dict[str, Any] | None = None,
    editable: bool = True,
    **extra: Any,
) -> None:
    data = {
        "name": worker,
        "host": "app-1",
        "ip": "10.0.0.7",
        "pid": 4242,
        "cpu_percent": 12.5,
        "mem_total": 16 * 2**30,
        "mem_percent": 41.0,
        "rss": 120 * 2**20,
        "started": time.time() - 3600,
        "status": status,
        "pool": ["thread"],
        "threads": threads if threads is not None else {"default": 2},
        "config_editable": editable,
        "current": current or {},
        "done": 10,
        "failed": 2,
        **extra,
    }
    write_heartbeat(storage, worker, data)


def make_lost(storage: Storage, worker: str, seconds_ago: float = 300) -> None:
    """Pretend ``worker`` last reported ``seconds_ago`` seconds ago: in ``seen`` and in its
    ``workers:state`` score (which keeps the band of its status)."""
    at = int((time.time() - seconds_ago) * 1000)
    k = storage.keys
    storage.client.zadd(k.seen, {worker: at})
    score = storage.client.zscore(k.worker_states, worker)
    if score is not None:
        storage.client.zadd(k.worker_states, {worker: int(score) // BAND * BAND + at})


# an autoscale decision's fields (docs/autoscaling.md), as the worker log keeps them
GREW = {"queue": "mail", "before": "0", "after": "1", "why": "grow", "waiting": "3",
        "busy": "0.0", "cpu": "12", "memory": "41"}  # fmt: skip
AUTOSCALED = {
    "mail": {"min": 0, "max": 4, "pool": "thread", "pinned": False,
             "last": {"message": "mail 0 → 1 threads: 3 waiting, CPU 12%", **GREW}},
    "reports": {"min": 1, "max": 4, "pool": "thread", "pinned": True},
}  # fmt: skip


def log(storage: Storage, kind: str, worker: str, message: str = "", **fields: Any) -> None:
    log_event(storage, kind, worker, message, **fields)


def cron(storage: Storage, name: str = "tests.sample_tasks.noop", **entry: Any) -> None:
    publish_cron_entries(
        storage,
        [
            {
                "name": name,
                "spec": "*/5 * * * *",
                "task": "tests.sample_tasks.noop",
                "queue": "default",
                "args": [],
                "kwargs": {},
                "next": int((time.time() + 300) * 1000),
                **entry,
            }
        ],
    )


def backdate(storage: Storage, queue: str, task_id: str, **seconds_ago: float) -> None:
    """Move times of a task's record (``started=75``: it started 75 s ago), as if it had
    been there that long."""
    key = storage.keys.tasks(queue)
    meta, payload = split_record(storage.client.hget(key, task_id))
    for name, ago in seconds_ago.items():
        meta[name] = int((time.time() - ago) * 1000)
    storage.client.hset(key, task_id, json.dumps(meta, separators=(",", ":")) + "\n" + payload)


def populate(storage: Storage) -> dict[str, Any]:
    """A lively console for screenshots and page tests: three queues, tasks in every state,
    three workers (one busy, one paused, one lost), history, cron, log and audit entries."""
    from tests import sample_tasks as t

    ids: dict[str, Any] = {}
    for i in range(6):  # history: successes and failures over a few minutes
        t.add.delay(i, i)
    work(storage, "default")
    for to in ("ann@example.org", "bob@example.org", "<script>alert('x')</script>@evil"):
        t.send.delay(to, "hello")
    work(
        storage,
        "mail",
        worker="mailer-1",
        thread="mail-0",
        fail=lambda p: (
            ("SMTPRecipientsRefused", "550 mailbox unavailable") if "bob" in p["args"][0] else None
        ),
    )
    errors = [t.boom.delay(f"disk {n} is full") for n in range(3)]
    errors.append(t.boom.delay("<img src=x onerror=alert(1)>"))
    work(storage, fail=lambda p: p["args"][0] if p["task"].endswith("boom") else None)
    ids["errors"] = [h.id for h in errors]
    # running: leased by w1 and reporting progress
    running = t.sleepy.delay(30, "")
    [lease] = storage.leases.fetch("default", "app-1.4242", "default-0", 60_000, 1)
    storage.leases.set_run_info(
        "default", lease.id, lease.token, "app-1.4242", "progress", '{"done": 42, "total": 100}'
    )
    ids["running"] = running.id
    backdate(storage, "default", lease.id, started=75)  # as the heartbeat below says
    # pending work
    ids["queued"] = [t.add.delay(100 + i, 1).id for i in range(12)]
    t.urgent.delay(7)
    t.add.enqueue((1, 1), priority="low")
    ids["delayed"] = [t.add.enqueue((200 + i, 0), delay=600 + 60 * i).id for i in range(3)]
    t.send.enqueue(("later@example.org",), delay=3600)
    for i in range(4):
        t.noop.enqueue((f"report-{i}",), queue="reports")
    heartbeat(
        storage,
        "app-1.4242",
        threads={"default": 2, "mail": 1},
        current={
            "default-0": {
                "id": running.id,
                "queue": "default",
                "task": "tests.sample_tasks.sleepy",
                "started": time.time() - 75,
            }
        },
        autoscale=AUTOSCALED,
    )
    heartbeat(storage, "mailer-1", status="paused", threads={"mail": 2}, host="mail-1",
              ip="10.0.0.9", cpu_percent=0.4, rss=64 * 2**20)  # fmt: skip
    heartbeat(storage, "batch-7", threads={"reports": 4}, host="batch-7", ip="10.0.0.12")
    make_lost(storage, "batch-7", 240)
    log(storage, "start", "app-1.4242", "started with default:2 mail:1")
    log(storage, "start", "mailer-1", "started with mail:2")
    log(storage, "command", "mailer-1", "pause by ann")
    log(storage, "lost", "batch-7", "no heartbeat for 4 minutes; 0 tasks handed back")
    log(storage, "autoscale", "app-1.4242", "mail 0 → 1 threads: 3 waiting, CPU 12%", **GREW)
    cron(storage, "tests.sample_tasks.noop", spec="*/5 * * * *")
    cron(storage, "nightly-report", spec="0 3 * * *", task="tests.sample_tasks.noop",
         queue="reports", args=["nightly"], next=int((time.time() + 7 * 3600) * 1000))  # fmt: skip
    return ids


def throughput(storage: Storage, queue: str = "default", minutes: int = 60) -> None:
    """Per-minute done/failed counters for the last hour, so charts have a shape."""
    now_minute = int(time.time() // 60)
    pipe = storage.client.pipeline(transaction=False)
    for back in range(1, minutes):
        done = 40 + (back * 37) % 60 + (30 if 20 < back < 32 else 0)
        failed = (back * 13) % 7 if back % 5 else 12
        key = storage.keys.stats(queue, now_minute - back)
        pipe.hset(key, mapping={"done": done, "failed": failed})
        pipe.expire(key, 7200)
    pipe.execute()
