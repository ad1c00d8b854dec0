"""``ztq queue limit --rate-limit`` sets, shows and lifts a queue's rate limit (audited);
``ztq info`` shows the rate and the ready tasks waiting on it, in its table and in --json."""

from __future__ import annotations

import json

import pytest

from tests import sample_tasks as t
from tests.worker.test_ops_cli import run
from ztq.core.engine.storage import Storage

Q = "payments"


def test_the_command_sets_shows_and_lifts_it_and_info_shows_what_waits(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from ztq.core import get_storage

    store: Storage = get_storage()
    for i in range(4):
        t.add.enqueue((i, 0), queue=Q)
    code, out, _ = run(capsys, redis_url, "queue", "limit", Q, "--rate-limit", "1/m burst 2")
    assert code == 0
    assert out == "payments: no running limit; no pending limit; at most 1/m burst 2 started\n"
    assert store.queues.queue_config(Q) == {"rate_limit": "1/m burst 2"}
    assert len(store.leases.fetch(Q, "w", "t", 60_000, 10)) == 2
    [row] = json.loads(run(capsys, redis_url, "info", "--json")[1])["queues"]
    assert (row["rate_limit"], row["rate_held"], row["pending"]) == ("1/m burst 2", 2, 2)
    table = run(capsys, redis_url, "info")[1]
    assert "1/m burst 2: 2 held" in table
    code, _, err = run(capsys, redis_url, "queue", "limit", Q, "--rate-limit", "fast")
    assert code == 2 and "rate_limit must be 'N/s', 'N/m' or 'N/h'" in err
    code, out, _ = run(capsys, redis_url, "queue", "limit", Q, "--rate-limit", "none")
    assert out == "payments: no running limit; no pending limit\n"
    assert store.queues.queue_config(Q) == {}
    assert "rate_limit=none" in str(store.client.xrange(store.keys.audit, "-", "+")[-1][1])
