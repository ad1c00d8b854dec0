"""Redis memory per queued task and per failed task, measured, and projected.

``python -m bench.capacity [--n 1000000]`` starts a private redis-server, enqueues ``n``
tasks of a typical shape (a mail task with a short address and subject) and reads
``used_memory``; then leases and fails them all (a one-line error and a 6-line traceback,
as a worker writes them) and reads it again. It prints bytes per queued task and per
error, and the memory that 10M and 100M of each would take; docs/scaling.md quotes it.
"""

from __future__ import annotations

import argparse
import time

from ztq.core import App, transaction
from ztq.worker.embedded import RedisProcess

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/srv/app/worker/execute.py", line 61, in run\n'
    "    result = fn(*args, **kwargs)\n"
    '  File "/srv/app/shop/mail.py", line 42, in send_receipt\n'
    "    smtp.sendmail(sender, [to], body)\n"
    "smtplib.SMTPRecipientsRefused: 550 mailbox unavailable\n"
)


def _memory(client: object) -> int:
    return int(client.info("memory")["used_memory"])  # type: ignore[attr-defined]


def measure(n: int) -> tuple[float, float]:
    server = RedisProcess().start()
    try:
        app = App("capacity", redis_url=server.url)

        @app.task(queue="mail", name="shop.mail.send_receipt")
        def send_receipt(to: str, order: int, subject: str) -> None: ...

        storage = app.connections.get()
        client = storage.client
        send_receipt.delay("warmup@example.org", 0, "warm-up")  # scripts and the queue set
        storage.tasks.remove("mail", purge="ready", limit=10)
        client.execute_command("MEMORY", "PURGE")
        base = _memory(client)
        started = time.monotonic()
        for start in range(0, n, 10_000):
            with transaction():
                for i in range(start, min(n, start + 10_000)):
                    send_receipt.delay(f"customer{i}@example.org", 100_000 + i,
                                       f"Your receipt for order {100_000 + i}")  # fmt: skip
        queued = _memory(client)
        print(f"enqueued {n:,} in {time.monotonic() - started:.0f} s")
        started = time.monotonic()
        while True:
            leases = storage.leases.fetch("mail", "capacity", "mail-0", 600_000, 500)
            if not leases:
                break
            ops = [storage.leases.fail_op("mail", "capacity", lease.id, lease.token,
                                   "shop.mail.send_receipt",
                                   "SMTPRecipientsRefused: 550 mailbox unavailable", TRACEBACK,
                                   history_maxlen=10_000) for lease in leases]  # fmt: skip
            storage.execute(ops)
        failed = _memory(client)
        print(f"failed {n:,} in {time.monotonic() - started:.0f} s")
        app.connections.close_all()
        return (queued - base) / n, (failed - base) / n
    finally:
        server.stop()


def _size(b: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if b < 1024 or unit == "TB":
            return f"{b:.1f} {unit}" if unit != "B" else f"{b:.0f} B"
        b /= 1024
    return ""


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1_000_000)
    args = parser.parse_args()
    per_task, per_error = measure(args.n)
    print(f"\nper queued task: {per_task:.0f} B; per error (with its traceback): {per_error:.0f} B")
    print("| tasks | queued | as errors |")
    print("|---|---|---|")
    for count in (1_000_000, 10_000_000, 100_000_000):
        print(f"| {count:,} | {_size(per_task * count)} | {_size(per_error * count)} |")
