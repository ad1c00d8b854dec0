"""ztq.console."""
