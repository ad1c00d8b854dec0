"""Tasks of an explicit app (``tests.app_tasks:app``), apart from the default app's."""

from __future__ import annotations

from pathlib import Path

from ztq.core import App

app = App("shop", prefix="shop")


@app.task(queue="orders")
def total(a: int, b: int) -> int:
    return a + b


@app.task(queue="orders")
def note(path: str, text: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(text + "\n")


@app.task(queue="orders", cron="* * * * *")
def every_minute() -> None:
    """Scheduled on this app only: the default app's cron table does not have it."""


def read(path: str) -> list[str]:
    p = Path(path)
    return p.read_text(encoding="utf-8").splitlines() if p.exists() else []
