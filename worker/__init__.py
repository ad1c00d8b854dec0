"""ztq.worker: the worker process, and what running tasks may call.

This module is what task code imports (``from ztq.worker import report_progress``): the
run's context and the exceptions a run may meet. The process itself is ``worker.Worker``
(the top: it imports the executors, channels, scaler, scheduler and health, and none of
them imports it back); ``cli``, ``demo`` and ``testing`` sit above it.

May import: ``ztq.core``. Never the console, nor this folder's ``cli``, ``demo`` or
``testing`` packages (nothing of the worker process below them imports them).
"""

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
