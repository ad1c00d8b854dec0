"""Tasks of a module that takes seconds to import, as a heavy app does on a loaded machine
(tests/worker/test_process_slot_start.py: a process slot's fresh child is still importing
when its first task is sent)."""

from __future__ import annotations

import os
import time

import ztq.core as ztq

time.sleep(float(os.environ.get("ZTQ_TEST_IMPORT_SECONDS", "2.5")))


@ztq.task(queue="slow")
def nap(seconds: float) -> None:
    time.sleep(seconds)
