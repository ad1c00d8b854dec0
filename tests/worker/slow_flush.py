"""Imported by a test's worker process: its log lines wait in memory until the process
exits (or a WARNING line), so a test sees whether an exit writes them."""

from ztq.worker import logs

logs.FLUSH_EVERY = 3600.0
