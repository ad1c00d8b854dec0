"""The tasks of tests/channel_tasks.py, for a worker that runs the last hour of broadcasts
sent before it started (its app's ``broadcast_catch_up``)."""

from __future__ import annotations

from tests import channel_tasks  # noqa: F401 - registers the tasks
from ztq.core import default_app

default_app().broadcast_catch_up = 3600.0
