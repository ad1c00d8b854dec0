"""Tasks of the broadcast and channel tests: each run appends a line to a file, so a test
sees which process ran what (worker processes import this module)."""

from __future__ import annotations

import json
import os
import threading

from ztq.core import subscribe_task, task

HELD = threading.Event()  # a test holds a broadcast run until it sets this (in-process)


@task(queue="web")
def note(path: str, text: str) -> dict[str, object]:
    """Append ``<pid> <text>`` to ``path``; returns who ran it."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{os.getpid()} {text}\n")
    return {"pid": os.getpid(), "text": text}


@task(queue="web")
def refuse(reason: str) -> None:
    raise RuntimeError(reason)


@task(queue="web")
def hold(path: str) -> None:
    """Wait (at most 10 s) until the test sets HELD, then note the run."""
    HELD.wait(10)
    note(path, "held")


@task(queue="audit")
def record(message: dict[str, object]) -> None:
    """A task subscribed to channel ``test-orders``: appends the message as a JSON line."""
    with open(str(message["out"]), "a", encoding="utf-8") as f:
        f.write(json.dumps(message, sort_keys=True) + "\n")


subscribe_task("test-orders", record)
