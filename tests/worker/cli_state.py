"""The small shop whose Redis the transcripts of docs/cli.md are taken on.

Three queues (``default``, ``mail``, ``reports``) with tasks in every state, six errors with
tracebacks, four workers (one busy, one idle, one lost, one stopped) and an API token, all
written through ``ztq.core`` as a worker would write them (enqueue, fetch, ack, fail,
heartbeats). Names, hosts and pids are fixed and the task ids are the MD5 ids of the calls,
so two seedings print the same tables but for times.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from tests.console import scenario
from ztq.core import App, TaskCall
from ztq.core.auth import tokens
from ztq.core.engine.record import decode_payload, split_record
from ztq.core.engine.storage import Finished, Storage

WORKER_FRAME = (
    "/srv/shop/.venv/lib/python3.12/site-packages/ztq/worker/execute.py",
    204,
    "call",
    "value = tf.fn(*args, **kwargs)",
)
Frame = tuple[str, int, str, str]
Failure = tuple[str, str, list[Frame]]  # exception type (qualified), message, frames


def traceback(kind: str, message: str, frames: list[Frame]) -> str:
    lines = ["Traceback (most recent call last):"]
    for path, line, function, code in [WORKER_FRAME, *frames]:
        lines += [f'  File "{path}", line {line}, in {function}', f"    {code}"]
    return "\n".join([*lines, f"{kind}: {message}", ""])


def refused(to: str) -> Failure:
    return ("smtplib.SMTPRecipientsRefused", f"{{'{to}': (550, b'5.1.1 mailbox unavailable')}}", [
        ("/srv/shop/shop/mail.py", 48, "send", "smtp.send_message(message)"),
        ("/usr/lib/python3.12/smtplib.py", 986, "send_message",
         "return self.sendmail(from_addr, to_addrs, flatmsg, mail_options,"),
        ("/usr/lib/python3.12/smtplib.py", 901, "sendmail",
         "raise SMTPRecipientsRefused(senderrs)"),
    ])  # fmt: skip


def unreadable(path: str) -> Failure:
    return ("PIL.UnidentifiedImageError", f"cannot identify image file '{path}'", [
        ("/srv/shop/shop/images.py", 31, "resize", "with Image.open(path) as image:"),
        ("/srv/shop/.venv/lib/python3.12/site-packages/PIL/Image.py", 3498, "open",
         "raise UnidentifiedImageError(msg)"),
    ])  # fmt: skip


GREYLISTED: Failure = ("smtplib.SMTPConnectError", "(421, b'4.7.0 try again later')", [
    ("/srv/shop/shop/mail.py", 44, "send", "smtp = smtplib.SMTP(settings.SMTP_HOST)"),
    ("/usr/lib/python3.12/smtplib.py", 341, "connect", "raise SMTPConnectError(code, msg)"),
])  # fmt: skip
NO_SKU: Failure = ("KeyError", "'sku'", [
    ("/srv/shop/shop/orders.py", 77, "confirm", 'sku = line["sku"]'),
])  # fmt: skip


def run(
    storage: Storage, queue: str, worker: str, fail: Callable[[dict[str, Any]], Failure | None]
) -> None:
    """Lease what is ready in ``queue`` and finish it: ``fail(payload)`` says how it failed
    (None: it succeeded)."""
    done = []
    for lease in storage.leases.fetch(queue, worker, f"{queue}-0", 60_000, 100):
        payload = decode_payload(lease.payload)
        failure = fail(payload)
        if failure is None:
            done.append(Finished(lease.id, lease.token, payload["task"], json.dumps("ok")))
            continue
        kind, message, frames = failure
        error = f"{kind.rsplit('.', 1)[-1]}: {message}"
        storage.leases.fail(queue, worker, lease.id, lease.token, payload["task"], error,
                     traceback(kind, message, frames))  # fmt: skip
    if done:
        storage.leases.ack(queue, worker, done)


def _shift(storage: Storage, queue: str, task_id: str, ms: int) -> None:
    """Move the times of a task's meta line ``ms`` into the past."""
    tasks = storage.keys.tasks(queue)
    times, payload = split_record(storage.client.hget(tasks, task_id))
    for name in ("enqueued", "started", "ended", "failed"):
        if name in times:
            times[name] -= ms
    storage.client.hset(tasks, task_id, json.dumps(times) + "\n" + payload)


def waiting_since(storage: Storage, queue: str, seconds: float) -> None:
    """Make the ready tasks of ``queue`` look enqueued ``seconds`` ago."""
    for key in storage.keys.ready_all(queue):
        for task_id in storage.client.lrange(key, 0, -1):
            _shift(storage, queue, task_id, int(seconds * 1000))


def failed_ago(storage: Storage, queue: str, ages: dict[str, float]) -> None:
    """Make the errors ``task id -> seconds`` look that old (distinct times also give
    ``ztq errors`` one order, newest first, where failures in one millisecond would not)."""
    errors = storage.keys.errors(queue)
    now = int(time.time() * 1000)
    for task_id, seconds in ages.items():
        at = now - int(seconds * 1000)
        _shift(storage, queue, task_id, int(storage.client.zscore(errors, task_id)) - at)
        storage.client.zadd(errors, {task_id: at})
    _newest_in_counters(storage, queue)


def _newest_in_counters(storage: Storage, queue: str) -> None:
    """Point each error group's and kind's counter at its newest error, as fail.lua would
    have had the errors failed at the times :func:`failed_ago` gave them."""
    tasks, newest = storage.keys.tasks(queue), {}
    for task_id, at in storage.client.zrange(storage.keys.errors(queue), 0, -1, withscores=True):
        meta = split_record(storage.client.hget(tasks, task_id))[0]
        for mark in ("eg", "ek"):
            field = f"#{mark}i:{meta.get(mark)}"
            if field not in newest or at >= newest[field][0]:
                newest[field] = (at, task_id, str(meta.get("error") or "")[:300])
    for field, (at, task_id, message) in newest.items():
        info = json.loads(storage.client.hget(tasks, field) or "{}")
        info.update(at=int(at), id=task_id, m=message)
        storage.client.hset(tasks, field, json.dumps(info))


def seed(app: App) -> dict[str, Any]:
    """Fill the (empty) Redis of ``app``; returns the ids the documented commands name."""
    storage = app.storage()

    def call(task: str, *args: Any, queue: str = "default", **options: Any) -> str:
        return str(TaskCall(task, args, queue=queue, app=app, **options).enqueue().id)

    ids: dict[str, Any] = {}
    # an hour of work: orders confirmed (one without a sku), mail sent (two refused, one
    # greylisted), pictures resized (two unreadable uploads)
    orders = {n: call("shop.orders.confirm", n) for n in range(1041, 1047)}
    run(storage, "default", "app-1.4242", lambda p: NO_SKU if p["args"] == [1044] else None)
    to = ("ann@example.org", "bob@example.org", "carla@example.org", "dan@example.org",
          "eve@example.org")  # fmt: skip
    sent = {name: call("shop.mail.send", name, "order-confirmed", queue="mail") for name in to}
    failures = {to[1]: refused(to[1]), to[2]: GREYLISTED, to[4]: refused(to[4])}
    run(storage, "mail", "mail-1.311", lambda p: failures.get(p["args"][0]))
    ids["refused"] = [sent[to[4]], sent[to[1]]]  # newest first
    uploads = {u: call("shop.images.resize", u) for u in ("uploads/1817.heic", "uploads/1822.heic")}
    run(storage, "default", "app-1.4242", lambda p: unreadable(p["args"][0]))
    failed_ago(storage, "default", {orders[1044]: 52 * 60, uploads["uploads/1817.heic"]: 6 * 60,
                                    uploads["uploads/1822.heic"]: 130})  # fmt: skip
    failed_ago(storage, "mail", {sent[to[1]]: 31 * 60, sent[to[2]]: 30 * 60 + 40,
                                 sent[to[4]]: 12 * 60 + 5})  # fmt: skip
    # running now: a picture on app-1, 42 of 100 sizes done
    ids["running"] = call("shop.images.resize", "uploads/1830.jpg")
    [lease] = storage.leases.fetch("default", "app-1.4242", "default-0", 60_000, 1)
    storage.leases.set_run_info("default", lease.id, lease.token, "app-1.4242", "progress",
                         '{"done": 42, "total": 100}')  # fmt: skip
    # waiting: orders (one refund first, statistics last), mail for 3 minutes, reports
    # that wait for their worker (lost) in a paused queue
    for order in range(1047, 1051):
        call("shop.orders.confirm", order)
    call("shop.orders.refund", 1039, priority="high")
    call("shop.stats.rollup", "hourly", priority="low")
    waiting_since(storage, "default", 40)
    call("shop.orders.remind", 1042, delay=3600)
    call("shop.orders.remind", 1043, delay=7200)
    for name in ("fay@example.org", "gus@example.org"):
        call("shop.mail.send", name, "order-shipped", queue="mail")
    waiting_since(storage, "mail", 200)
    call("shop.mail.send", "all@example.org", "newsletter", queue="mail", delay=900)
    for report in ("sales", "stock"):
        call("shop.reports.daily", report, queue="reports")
    waiting_since(storage, "reports", 230)  # since a little after its worker was lost
    storage.queues.pause("reports")
    # the workers
    started = time.time() - 75
    scenario.heartbeat(storage, "app-1.4242", host="app-1", ip="10.0.0.7", pid=4242,
                       threads={"default": 2, "mail": 1}, current={"default-0": {
                           "id": ids["running"], "queue": "default",
                           "task": "shop.images.resize", "started": started}})  # fmt: skip
    scenario.heartbeat(storage, "mail-1.311", host="mail-1", ip="10.0.0.9", pid=311,
                       cpu_percent=0.4, rss=64 * 2**20, threads={"mail": 2})  # fmt: skip
    scenario.heartbeat(storage, "batch-7.88", host="batch-7", ip="10.0.0.12", pid=88,
                       cpu_percent=3.0, rss=210 * 2**20, threads={"reports": 2})  # fmt: skip
    scenario.make_lost(storage, "batch-7.88", 240)
    scenario.heartbeat(storage, "app-2.5150", status="stopped", host="app-2", ip="10.0.0.8",
                       pid=5150, threads={"default": 2})  # fmt: skip
    # an API token for the console's /api (ztq token list, revoke)
    ids["token"] = tokens.create_token(storage, "grafana", "viewer", 90)[1].id
    return ids
