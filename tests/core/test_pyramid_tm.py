"""Pyramid with pyramid_tm, under both of its managers: the thread's ``transaction.manager``
(the default) and ``pyramid_tm.explicit_manager`` (a fresh explicit manager per request, the
setting SQLAlchemy-backed Pyramid apps use). A request's enqueue joins ``request.tm``: sent
when that request commits, dropped when it aborts or a vote fails, never left in the thread
for unrelated code to commit later (real pyramid_tm, real Redis)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import transaction
import webtest

import tests.integration_app as module
from tests.core.test_integrations import make_web as make_shop
from ztq.core import App

MANAGERS = {"thread": None, "explicit": "pyramid_tm.explicit_manager"}


@pytest.fixture
def shop(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[App]:
    monkeypatch.delenv("ZTQ_REDIS_URL")  # the URL comes from the Pyramid settings
    yield module.app
    transaction.abort()  # nothing of one test's thread transaction reaches the next
    module.app.disconnect_all()
    module.app.use_transaction_manager(False)


class FailingVote:
    """A resource (a database, say) whose vote fails: the whole transaction aborts."""

    def __init__(self, manager: Any) -> None:
        self.transaction_manager = manager

    def sortKey(self) -> str:  # noqa: N802 - interface name
        return "a-database"

    def tpc_vote(self, txn: Any) -> None:
        raise RuntimeError("the database refused to commit")

    abort = tpc_begin = commit = tpc_finish = tpc_abort = lambda self, txn: None


def make_web(redis_url: str, hook: str | None) -> webtest.TestApp:
    def on_order(request: Any) -> None:
        if request.params.get("vote") == "fail":
            request.tm.get().join(FailingVote(request.tm))

    return make_shop(redis_url, with_tm=True, hook=hook, on_order=on_order)


def state(shop: App, n: int) -> str:
    return shop.ping(module.send_receipt.prepare((n,)).resolve_id(), "mail")


@pytest.mark.parametrize("manager", sorted(MANAGERS))
def test_a_committed_request_sends_and_an_aborted_one_never_does(
    shop: App, redis_url: str, manager: str
) -> None:
    web = make_web(redis_url, MANAGERS[manager])
    with pytest.raises(RuntimeError):
        web.get("/order?n=1&fail=1")  # the view raised: the request's transaction aborts
    assert state(shop, 1) == "none"
    assert web.get("/order?n=2").text == "ok"  # a second request in the same thread
    assert state(shop, 2) == "queued"  # sent when that request committed
    transaction.commit()  # unrelated code commits the thread's transaction later
    assert state(shop, 1) == "none"  # the aborted request's task was not left behind
    assert state(shop, 2) == "queued"


@pytest.mark.parametrize("manager", sorted(MANAGERS))
def test_a_failed_vote_drops_the_requests_tasks(shop: App, redis_url: str, manager: str) -> None:
    web = make_web(redis_url, MANAGERS[manager])
    with pytest.raises(RuntimeError, match="refused to commit"):
        web.get("/order?n=3&vote=fail")
    assert state(shop, 3) == "none"
    transaction.commit()
    assert state(shop, 3) == "none"
    assert web.get("/order?n=4").text == "ok"  # the thread goes on with the next request
    assert state(shop, 4) == "queued"


def test_outside_a_request_only_a_begun_transaction_is_joined(shop: App, redis_url: str) -> None:
    make_web(redis_url, MANAGERS["explicit"])  # the app now joins transactions
    module.send_receipt.delay(5)  # no request, no transaction begun: written at once
    assert state(shop, 5) == "queued"
    with transaction.manager:  # a script's transaction: written when it commits
        module.send_receipt.delay(6)
        assert state(shop, 6) == "none"
    assert state(shop, 6) == "queued"
    with pytest.raises(RuntimeError), transaction.manager:
        module.send_receipt.delay(7)
        raise RuntimeError("rolled back")
    assert state(shop, 7) == "none"


def test_a_script_under_the_explicit_manager_joins_request_tm(shop: App, redis_url: str) -> None:
    """``pyramid.scripting.prepare`` (what ``bootstrap`` and ``pshell`` use) with
    ``with request.tm:``, as pyramid_tm documents for scripts."""
    from pyramid.scripting import prepare

    web = make_web(redis_url, MANAGERS["explicit"])
    env = prepare(registry=web.app.registry)
    try:
        request = env["request"]
        with request.tm:
            module.send_receipt.delay(8)
            assert state(shop, 8) == "none"
        assert state(shop, 8) == "queued"
        module.send_receipt.delay(9)  # request.tm has no transaction now: at once
        assert state(shop, 9) == "queued"
    finally:
        env["closer"]()
