"""Flask with Flask-SQLAlchemy on SQLite: ``enqueue_on_commit`` sends after COMMIT only,
drops on a rollback (the transaction's or the savepoint's) and on a request that never
committed (real Flask, Flask-SQLAlchemy, SQLite and Redis). The app is docs/integrations.md's
example, as written."""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"


@pytest.fixture
def shop(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, Any]]:
    blocks = re.findall(r"^```python\n(.*?)^```", DOCS.read_text("utf-8"), re.S | re.M)
    [code] = [b for b in blocks if "flask_sqlalchemy" in b]
    module = types.ModuleType("docs_flask_example")  # SQLAlchemy reads the annotations there
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace: dict[str, Any] = module.__dict__
    # as the page has it: not with this file's ``from __future__ import annotations``
    exec(compile(code, "docs/integrations.md", "exec", dont_inherit=True), namespace)  # noqa: S102
    web = namespace["create_app"](
        {"SQLALCHEMY_DATABASE_URI": f"sqlite:///{tmp_path / 'shop.db'}", "ZTQ_REDIS_URL": redis_url}
    )
    with web.app_context():
        namespace["db"].create_all()
    namespace["web"] = web
    try:
        yield namespace
    finally:
        namespace["tasks"].disconnect_all()
        with web.app_context():
            namespace["db"].engine.dispose()


def state(shop: dict[str, Any], order_id: int) -> str:
    call = shop["send_receipt"].prepare((order_id,))
    return shop["tasks"].ping(call.resolve_id(), "mail")


@pytest.mark.slow
def test_a_view_sends_after_commit_and_never_without_one(shop: dict[str, Any]) -> None:
    client = shop["web"].test_client()
    assert client.post("/orders/tea").json == {"order": 1}
    assert state(shop, 1) == "queued"
    assert client.post("/orders/nothing").status_code == 400  # flushed order 2, no commit
    assert state(shop, 2) == "none"
    assert client.post("/orders/cake").json == {"order": 2}  # order 2's id, reused
    assert state(shop, 2) == "queued"


def test_rollbacks_and_savepoints(shop: dict[str, Any]) -> None:
    from ztq.core.contrib.sqlalchemy import enqueue_on_commit

    db, receipt = shop["db"], shop["send_receipt"]
    with shop["web"].app_context():
        enqueue_on_commit(db.session, receipt, 10)  # no transaction begun: at once
        assert state(shop, 10) == "queued"
        db.session.add(shop["Order"](item="a"))
        enqueue_on_commit(db.session, receipt, 11)
        assert state(shop, 11) == "none"  # not before COMMIT
        db.session.rollback()
        db.session.commit()
        assert state(shop, 11) == "none"  # rolled back: dropped
        db.session.add(shop["Order"](item="b"))
        enqueue_on_commit(db.session, receipt.prepare((12,), priority="high"))
        with db.session.begin_nested() as savepoint:
            enqueue_on_commit(db.session, receipt, 13)
            savepoint.rollback()
        with db.session.begin_nested():
            enqueue_on_commit(db.session, receipt, 14)
        db.session.commit()
    assert [state(shop, n) for n in (12, 13, 14)] == ["queued", "none", "queued"]
