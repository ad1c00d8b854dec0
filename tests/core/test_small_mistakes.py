"""The smaller points of issue 39 that are not a refusal (the refusals are rows of
tests/bad_inputs.py): ``delay=`` takes the ``timedelta`` that ``expires=`` takes."""

from __future__ import annotations

from datetime import timedelta

import ztq.core as ztq
from tests import sample_tasks as t


def test_delay_takes_a_timedelta_as_expires_does(redis_url: str) -> None:
    handle = t.add.enqueue((3, 4), delay=timedelta(minutes=5), expires=timedelta(hours=1))
    assert ztq.ping(handle) == "delayed"
    assert t.add.prepare((3, 4), delay=timedelta(seconds=90)).delay == 90.0
