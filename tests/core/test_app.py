"""Apps: each owns its connections, registry, cron table and transaction policy; two apps
live in one process without seeing each other's tasks (real Redis)."""

from __future__ import annotations

import pytest
import redis

import ztq.core as ztq
from tests import app_tasks
from ztq.core import App
from ztq.core.errors import ConfigError, UnknownTask


@pytest.fixture
def two_apps(redis_url: str) -> tuple[App, App]:
    a, b = App("a", redis_url=redis_url, prefix="a"), App("b", redis_url=redis_url, prefix="b")
    yield a, b
    a.disconnect_all()
    b.disconnect_all()


def test_two_apps_in_one_process_do_not_see_each_other(two_apps, redis_url: str) -> None:
    a, b = two_apps

    @a.task(name="job")
    def job_a(x: int) -> int:
        return x

    @b.task(name="job")  # the same name in another app is another task
    def job_b(x: int) -> int:
        return -x

    @b.task(name="only_b")
    def only_b() -> None: ...

    ha, hb = job_a.delay(1), job_b.delay(1)
    assert ha.id == hb.id and ha.outcome == hb.outcome == "added"  # same work, two namespaces
    assert a.ping(ha.id) == b.ping(hb.id) == "queued"
    assert a.lookup("job") is job_a and b.lookup("job") is job_b
    with pytest.raises(UnknownTask):
        a.lookup("only_b")
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        assert {k.split(":")[0] for k in client.keys("*")} == {"a", "b"}
        assert client.hkeys("a:{default}:tasks") == client.hkeys("b:{default}:tasks") == [ha.id]
    finally:
        client.close()
    assert ztq.ping(ha.id) == "none"  # the default app (prefix ztq) sees neither
    assert "job" not in ztq.registered() and "only_b" not in ztq.registered()


def test_a_transaction_spans_apps_and_each_writes_under_its_prefix(two_apps) -> None:
    a, b = two_apps
    ja = a.task(name="tx")(lambda: None)
    jb = b.task(name="tx")(lambda: None)
    with pytest.raises(RuntimeError), ztq.transaction():
        ja.delay()
        jb.delay()
        raise RuntimeError("rolled back")
    assert a.ping(ja.prepare().resolve_id(), "default") == "none"
    with ztq.transaction() as handles:
        ja.delay()
        jb.delay()
    assert [h.outcome for h in handles] == ["added", "added"]
    assert [h.app for h in handles] == [a, b]
    assert a.ping(handles[0]) == b.ping(handles[1]) == "queued"


def test_the_transaction_manager_is_joined_per_app(two_apps) -> None:
    import transaction

    a, b = two_apps
    ja = a.task(name="tm")(lambda: None)
    jb = b.task(name="tm")(lambda: None)
    a.use_transaction_manager(True)
    transaction.begin()
    try:
        buffered, sent = ja.delay(), jb.delay()
        assert (buffered.outcome, sent.outcome) == ("buffered", "added")
        assert a.ping(buffered.id, "default") == "none"  # written at commit
        transaction.commit()
    finally:
        transaction.abort()
    assert a.ping(buffered.id, "default") == "queued"
    assert not ztq.default_app().joins_transactions


def test_an_app_keeps_its_own_cron_table() -> None:
    names = [e.name for e in app_tasks.app.cron_entries()]
    assert names == ["tests.app_tasks.every_minute"]
    assert "tests.app_tasks.every_minute" not in [e.name for e in ztq.cron_entries()]


def test_an_apps_own_settings_are_flags_and_the_rest_comes_from_the_environment(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZTQ_REDIS_URL", redis_url)
    monkeypatch.setenv("ZTQ_PREFIX", "from-env")
    app = App("p", prefix="mine")
    try:
        storage = app.storage()
        assert (storage.url, storage.keys.prefix) == (redis_url, "mine")
        assert App("q").storage().keys.prefix == "from-env"
    finally:
        app.disconnect_all()


@pytest.mark.parametrize(
    "spec, message",
    [
        ("tests.app_tasks", "module:attribute"),
        ("tests.nowhere:app", "cannot import"),
        ("tests.app_tasks:total", "is not a ztq.core.App"),
    ],
)
def test_a_bad_app_spec_is_a_clear_error(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ztq.load_app(spec)
    assert ztq.load_app("tests.app_tasks:app") is app_tasks.app


def test_two_apps_on_one_redis_and_prefix_cannot_give_a_name_two_functions(redis_url: str) -> None:
    a = App("first", redis_url=redis_url, prefix="shared")
    b = App("second", redis_url=redis_url, prefix="shared")

    @a.task(name="send")
    def send_a(to: str) -> str:
        return to

    with pytest.raises(ConfigError) as caught:

        @b.task(name="send")
        def send_b(to: str) -> str:
            return to.upper()

    message = str(caught.value)
    assert "'send'" in message and "'second'" in message and "'first'" in message
    assert "send_a" in message and "send_b" in message and "prefix 'shared'" in message
    with pytest.raises(UnknownTask):
        b.lookup("send")  # refused whole: nothing half-registered
    assert a.lookup("send") is send_a
    b.task(name="send")(send_a)  # the same function under both apps is one task: allowed

    @b.task(name="other")
    def other() -> None: ...  # and other names are free


def test_a_worker_refuses_to_start_when_two_apps_came_to_share_a_namespace(
    redis_url: str,
) -> None:
    from ztq.worker.testing.helpers import worker_for

    a = App("alpha", redis_url=redis_url, prefix="alpha")
    b = App("beta", redis_url=redis_url, prefix="beta")
    a.task(name="job")(lambda: 1)
    b.task(name="job")(lambda: 2)  # different prefixes: allowed
    b.connect(redis_url, prefix="alpha")  # ... until b moves onto a's keys
    try:
        worker = worker_for(a, a.storage())
        with pytest.raises(ConfigError, match="task name 'job' of app 'alpha'"):
            worker.setup()
    finally:
        a.disconnect_all()
        b.disconnect_all()
