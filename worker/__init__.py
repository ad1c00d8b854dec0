"""ztq.worker."""
