"""ztq.worker: the worker process, and what running tasks may call."""

from ztq.worker.context import (
    areport_job,
    areport_progress,
    current_run,
    report_job,
    report_progress,
)
from ztq.worker.execute import Killed, SoftTimeout

__all__ = [
    "Killed",
    "SoftTimeout",
    "areport_job",
    "areport_progress",
    "current_run",
    "report_job",
    "report_progress",
]
