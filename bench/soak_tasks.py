"""The task of ``bench.soak``, imported by its worker processes.

Each run marks its number in a bitmap on a second Redis that is never faulted (``SOAK_COUNT``):
``seen`` when it ran at least once, ``twice`` when it ran again; ``first`` keeps the process
group of the worker that ran it first, so that the soak can tell a second run that a SIGKILL
of that worker explains from one nothing explains. Bitmaps keep a million task
numbers in 125 kB each, so the counting Redis stays small whatever the run length.
"""

from __future__ import annotations

import os

import redis

from ztq.core import task

SEEN = "soak:seen"
TWICE = "soak:twice"
FIRST = "soak:first"  # task number -> process group of the worker that ran it first
_MARK = """
if redis.call('SETBIT', KEYS[1], ARGV[1], 1) == 1 then
  redis.call('SETBIT', KEYS[2], ARGV[1], 1)
else
  redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
end
"""
_client: redis.Redis | None = None
_mark = None


def _marker():  # type: ignore[no-untyped-def]
    global _client, _mark
    if _mark is None:
        _client = redis.Redis.from_url(os.environ["SOAK_COUNT"])
        _mark = _client.register_script(_MARK)
    return _mark


@task(queue="soak")
def note(i: int) -> None:
    """Mark run ``i``: the whole work of a soak task, so that ztq's own cost dominates."""
    _marker()(keys=[SEEN, TWICE, FIRST], args=[i, os.getpgid(0)])
