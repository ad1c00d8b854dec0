"""ztq.worker: the worker process, and what running tasks may call."""

from ztq.worker.context import current_run, report_job, report_progress
from ztq.worker.execute import Killed, SoftTimeout

__all__ = ["Killed", "SoftTimeout", "current_run", "report_job", "report_progress"]
