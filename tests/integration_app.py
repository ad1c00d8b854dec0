"""A web project's tasks and app, for the framework integration tests."""

from __future__ import annotations

from typing import Any

from ztq.core import App

app = App("integration", prefix="shop")


def _task(fn: Any) -> Any:
    return app.task(queue="mail", name=f"integration.{fn.__name__}")(fn)


@_task
def send_receipt(order: int) -> str:
    return f"receipt {order}"
