"""A thread serving several queues: in the order written (strict, the default), or asking a
different queue first at every fetch (``fair``), so that a busy queue cannot starve the
others."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from tests.worker.conftest import wait_for
from ztq.core.errors import ConfigError
from ztq.worker.config import ThreadSpec, parse_queue_entry
from ztq.worker.worker import Worker


def test_the_config_says_fair_or_strict() -> None:
    [spec] = parse_queue_entry("mixed", "a, b, c fair")
    assert (spec.queues, spec.fair) == (("a", "b", "c"), True)
    [spec] = parse_queue_entry("mixed", "a, b strict")
    assert (spec.queues, spec.fair) == (("a", "b"), False)
    assert parse_queue_entry("mixed", "a, b process fair")[0].pool == "process"
    with pytest.raises(ConfigError, match="'fair' rotates between several queues"):
        parse_queue_entry("mail", "2 fair")


@pytest.mark.parametrize("fair", [False, True])
def test_the_order_a_thread_takes_its_queues_in(
    redis_url: str, start_worker: Callable[..., Worker], tmp_path: Path, fair: bool
) -> None:
    marker = tmp_path / "order"
    handles = [
        t.record.prepare((str(marker), f"{q}{n}"), queue=q).enqueue()
        for q in ("a", "b")
        for n in range(5)
    ]
    spec = ThreadSpec("mixed", ("a", "b"), fair=fair)
    start_worker(None, threads=(spec,), prefetch=1)
    wait_for(lambda: all(h.state.value == "done" for h in handles))
    order = "".join(line[0] for line in marker.read_text().split())
    if fair:
        assert order.startswith(("abab", "baba")), order  # neither waits for the other
    else:
        assert order == "aaaaabbbbb"  # b only once a is empty
    assert ztq.get_storage().queues.names() == ["a", "b"]
