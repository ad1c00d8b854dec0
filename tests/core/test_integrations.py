"""Framework integrations, each with the real package: Pyramid with pyramid_tm, Django's
transaction.on_commit (real Redis)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import webtest
from pyramid.config import Configurator
from pyramid.response import Response

from ztq.core import App


@pytest.fixture
def shop(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[App]:
    """The web project's own app (its tasks are bound to it), reset after the test."""
    import tests.integration_app as module

    monkeypatch.delenv("ZTQ_REDIS_URL")  # the URL comes from the Pyramid settings (the ini)

    yield module.app
    module.app.disconnect_all()
    module.app.use_transaction_manager(False)


def make_web(
    redis_url: str, *, with_tm: bool, hook: str | None = None, on_order: Any = None
) -> webtest.TestApp:
    """A shop whose ``/order?n=`` enqueues a receipt (``fail=1``: then raises); ``hook`` is
    pyramid_tm's ``tm.manager_hook``, ``on_order(request)`` runs after the enqueue."""
    import tests.integration_app as module

    settings = {"ztq.app": "tests.integration_app:app", "ztq.redis_url": redis_url}
    if hook:
        settings["tm.manager_hook"] = hook
    with Configurator(settings=settings) as config:
        config.include("ztq.core.contrib.pyramid")  # before pyramid_tm: the order is free
        if with_tm:
            config.include("pyramid_tm")

        def order(request):  # type: ignore[no-untyped-def]
            module.send_receipt.delay(int(request.params["n"]))
            if on_order is not None:
                on_order(request)
            if request.params.get("fail"):
                raise RuntimeError("the order could not be saved")
            return Response("ok")

        config.add_route("order", "/order")
        config.add_view(order, route_name="order")
    return webtest.TestApp(config.make_wsgi_app())


def test_pyramid_enqueues_join_the_request_transaction(shop: App, redis_url: str) -> None:
    import tests.integration_app as module

    web = make_web(redis_url, with_tm=True)
    assert web.get("/order?n=1").text == "ok"
    with pytest.raises(RuntimeError):
        web.get("/order?n=2&fail=1")  # the view failed: the transaction aborts
    storage = shop.storage()
    assert storage.keys.prefix == "shop"  # the app's own prefix, the ini's URL
    assert shop.ping(module.send_receipt.prepare((1,)).resolve_id(), "mail") == "queued"
    assert shop.ping(module.send_receipt.prepare((2,)).resolve_id(), "mail") == "none"
    assert shop.joins_transactions


def test_without_pyramid_tm_enqueues_are_written_at_once(shop: App, redis_url: str) -> None:
    import tests.integration_app as module

    web = make_web(redis_url, with_tm=False)
    with pytest.raises(RuntimeError):
        web.get("/order?n=3&fail=1")
    assert not shop.joins_transactions
    assert shop.ping(module.send_receipt.prepare((3,)).resolve_id(), "mail") == "queued"


@pytest.fixture(scope="module")
def django_db() -> None:
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
            INSTALLED_APPS=[],
        )
        django.setup()


@pytest.mark.slow
def test_django_enqueues_when_the_transaction_commits(shop: App, redis_url: str, django_db) -> None:
    from django.db import transaction

    import tests.integration_app as module
    from ztq.core.contrib.django import enqueue_on_commit

    shop.connect(redis_url)
    receipt = module.send_receipt.prepare
    with transaction.atomic():
        call = enqueue_on_commit(module.send_receipt, 10)
        assert shop.ping(call.resolve_id(), "mail") == "none"  # not before COMMIT
    assert shop.ping(receipt((10,)).resolve_id(), "mail") == "queued"
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue_on_commit(receipt((11,), priority="high"))
        raise RuntimeError("rolled back")
    assert shop.ping(receipt((11,)).resolve_id(), "mail") == "none"
    enqueue_on_commit(module.send_receipt, 12)  # outside a transaction: at once
    assert shop.ping(receipt((12,)).resolve_id(), "mail") == "queued"


def test_integrations_md_django_example_runs(shop: App, redis_url: str, django_db) -> None:
    import re
    from pathlib import Path

    import tests.integration_app as module

    text = (Path(__file__).resolve().parents[2] / "docs" / "integrations.md").read_text("utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
    [code] = [b for b in blocks if "contrib.django import enqueue_on_commit" in b]
    namespace: dict[str, object] = {"send_receipt": module.send_receipt}
    exec(compile(code, "docs/integrations.md", "exec"), namespace)  # noqa: S102 - our own doc
    shop.connect(redis_url)
    namespace["place_order"](42)  # type: ignore[operator]
    assert shop.ping(module.send_receipt.prepare((42,)).resolve_id(), "mail") == "queued"


@pytest.mark.slow
def test_integrations_md_fastapi_example(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The FastAPI example as written, with FastAPI's TestClient, a worker draining between."""
    import re
    from pathlib import Path

    from fastapi.testclient import TestClient

    from ztq.worker.testing.helpers import worker_for

    monkeypatch.setenv("ZTQ_REDIS_URL", redis_url)
    text = (Path(__file__).resolve().parents[2] / "docs" / "integrations.md").read_text("utf-8")
    [code] = [b for b in re.findall(r"^```python\n(.*?)^```", text, re.S | re.M) if "FastAPI" in b]
    namespace: dict[str, object] = {"__name__": "docs_fastapi_example"}
    exec(compile(code, "docs/integrations.md", "exec"), namespace)  # noqa: S102 - our own doc
    tasks: App = namespace["tasks"]  # type: ignore[assignment]
    try:
        with TestClient(namespace["api"]) as client:  # type: ignore[arg-type]
            started = client.post("/reports/2026-11").json()
            assert started["outcome"] == "added"
            assert client.get(f"/reports/{started['id']}").json() == {"state": "queued"}
            assert client.get(f"/reports/{'0' * 32}").status_code == 404
            worker_for(tasks, tasks.storage()).drain()
            done = client.get(f"/reports/{started['id']}?wait=5").json()
            assert done == {"state": "done", "report": {"month": "2026-11", "rows": 42}}
    finally:
        tasks.disconnect_all()
