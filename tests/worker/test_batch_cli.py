"""``ztq batch`` and the batches of ``ztq info`` (docs/batches.md), through the monitor's
read model the console shares."""

from __future__ import annotations

import json

import pytest

import ztq.core as ztq
from tests import sample_tasks as t
from ztq.core.client.batch import relay
from ztq.core.engine.storage import Finished, Storage
from ztq.core.monitor import batches
from ztq.worker.cli.commands import main

W = "w-cli"


def run(capsys: pytest.CaptureFixture[str], redis_url: str, *argv: str) -> tuple[int, str, str]:
    code = main([*argv, "--redis", redis_url])
    out, err = capsys.readouterr()
    return code, out, err


def finish(storage: Storage, fail: set[str]) -> None:
    for lease in storage.leases.fetch("default", W, "t", 30_000, 100):
        if lease.id in fail:
            storage.leases.fail("default", W, lease.id, lease.token, "x", "ValueError: no", "")
        else:
            storage.leases.ack("default", W, [Finished(lease.id, lease.token, "x", "")])
    relay(storage, ["default"])


@pytest.fixture
def made(redis_url: str) -> tuple[ztq.Batch, list[ztq.TaskHandle]]:
    storage = ztq.get_storage()
    with ztq.batch(description="thumbnails", on_success=t.noop.prepare(("ok",))) as b:
        hs = [t.add.delay(i, 1) for i in range(3)]
    finish(storage, {hs[1].id})
    return b, hs


@pytest.mark.slow
def test_batch_list_one_batch_and_info(
    made: tuple[ztq.Batch, list[ztq.TaskHandle]], redis_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    b, hs = made
    code, out, _ = run(capsys, redis_url, "batch")
    assert code == 0 and b.id in out and "thumbnails" in out and "complete" in out
    code, out, _ = run(capsys, redis_url, "batch", b.id, "--json")
    data = json.loads(out)
    assert (data["total"], data["done"], data["failed"], data["state"]) == (3, 2, 1, "complete")
    assert [m["id"] for m in data["members"]] == [h.id for h in hs]
    assert [m["state"] for m in data["members"]] == ["done", "error", "done"]
    assert data == batches.batch_page(ztq.get_storage(), b.id)  # the console's read model
    code, out, _ = run(capsys, redis_url, "batch", b.id)
    assert code == 0 and "2 done, 1 failed" in out and "error" in out
    code, out, _ = run(capsys, redis_url, "info", "--json")
    assert [x["id"] for x in json.loads(out)["batches"]] == [b.id]
    code, out, _ = run(capsys, redis_url, "info")
    assert "Batches" in out and b.id in out


def test_redo_the_failed_members_then_success(
    made: tuple[ztq.Batch, list[ztq.TaskHandle]], redis_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    b, _ = made
    code, out, _ = run(capsys, redis_url, "batch", b.id, "--redo")
    assert code == 0 and "1 failed member(s)" in out
    finish(ztq.get_storage(), set())
    assert b.status().state == "success"
    audit = ztq.get_storage().client.xrange(ztq.get_storage().keys.audit)
    assert any(fields["action"] == "redo batch" for _, fields in audit)


def test_unknown_batch_and_bad_use(redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, redis_url, "batch", "nope")
    assert code == 1 and "no batch 'nope'" in err
    code, _, err = run(capsys, redis_url, "batch", "../x")
    assert code == 1 and "no batch" in err
    code, _, err = run(capsys, redis_url, "batch", "--redo")
    assert code == 2 and "name the batch" in err
    code, out, _ = run(capsys, redis_url, "batch")
    assert code == 0 and "no batch" in out
