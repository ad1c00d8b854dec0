"""Tasks for the console's ZTQ-operator tests, run by a real worker process: one whose run
ends without a Python exception of its own, one that leaves a comment on its run."""

from __future__ import annotations

import os
import signal

from ztq.core import task
from ztq.worker import report_job


@task(queue="pdf")
def dies() -> None:
    """Kills the process slot's child it runs in: the run ends with no exception raised."""
    os.kill(os.getpid(), signal.SIGKILL)


@task(queue="mail")
def noted(comment: str) -> str:
    """Leaves ``comment`` on its run (ZTQ's report_job comment, shown in history)."""
    report_job(comment=comment)
    return comment
