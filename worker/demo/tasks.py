"""Tasks for ``make run``: they succeed, fail, retry, report progress and run on a schedule."""

from __future__ import annotations

import random
import time

from ztq.core import Retry, task
from ztq.worker.context import report_job, report_progress


@task
def resize_image(name: str, width: int) -> dict[str, object]:
    time.sleep(random.uniform(0.05, 0.4))
    return {"name": name, "width": width}


@task(queue="mail", retries=2)
def send_mail(to: str, subject: str) -> str:
    time.sleep(random.uniform(0.05, 0.2))
    if "invalid" in to:
        raise ValueError(f"mailbox {to} does not exist")
    if random.random() < 0.2:
        raise ConnectionError("SMTP server busy")  # retried with backoff
    return f"sent to {to}"


@task(queue="pdf", timeout=20)
def convert_pdf(document: str, pages: int) -> str:
    report_job(comment=f"converting {document}")
    for page in range(1, pages + 1):
        time.sleep(random.uniform(0.2, 0.6))
        report_progress(page=page, pages=pages, pct=100 * page // pages)
    return f"{document}.pdf"


@task
def crawl(url: str) -> int:
    time.sleep(random.uniform(0.1, 0.3))
    if random.random() < 0.15:
        raise Retry(delay=2, message="rate limited, trying again in 2s")
    if url.endswith("/broken"):
        raise RuntimeError(f"HTTP 500 from {url}")
    return random.randint(1, 200)


@task(cron="* * * * *")
def nightly_report() -> str:
    """Every minute in the demo, so the Scheduled page shows a cron entry firing."""
    time.sleep(0.2)
    return "report ready"
