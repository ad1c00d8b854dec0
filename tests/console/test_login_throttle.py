"""Login throttling: per user name and client address, per address and per name from any
address (a higher limit), shared through Redis by every console process, a 429 with
Retry-After while locked, audited and counted (real Redis). An outsider failing from one
address does not lock the operator out at another (issue 36)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from webtest import TestApp

from tests.console.conftest import PASSWORD
from tests.worker.conftest import wait_for
from ztq.console import main
from ztq.core.auth.logins import LoginPolicy, login_failed, login_wait
from ztq.core.engine.storage import Storage
from ztq.core.errors import ConfigError


def read_audit(store: Storage) -> list[dict[str, str]]:
    return [fields for _, fields in store.client.xrange(store.keys.audit)]


def attempt(app: TestApp, name: str, password: str, addr: str = "192.0.2.1", **headers: str) -> Any:
    env = {"REMOTE_ADDR": addr}
    form = app.get("/login", extra_environ=env).forms["login"]
    form["username"], form["password"] = name, password
    return form.submit(expect_errors=True, extra_environ=env, headers=headers)


@pytest.mark.slow
def test_a_guessing_run_is_locked_and_even_the_right_password_waits(
    anon: TestApp, store: Storage
) -> None:
    for _ in range(5):  # the free failures
        assert attempt(anon, "ann", "guess").status_int == 403
    r = attempt(anon, "ann", "guess")
    assert r.status_int == 429 and r.headers["Retry-After"] == "1"
    assert "Too many failed sign-ins: try again in 1 s." in r.text
    r = attempt(anon, "ann", PASSWORD)  # right, but locked: refused before the check
    assert r.status_int == 429 and "ztq_session=" not in r.headers.get("Set-Cookie", "")
    # the lock runs out after a second: then the right password signs in
    wait_for(lambda: attempt(anon, "ann", PASSWORD).status_int == 303, timeout=5, every=0.1)
    actions = [e["action"] for e in read_audit(store)]
    assert "login locked" in actions and "login unlocked" in actions
    locked = next(e for e in read_audit(store) if e["action"] == "login locked")
    assert locked["user"] == "ann" and "192.0.2.1" in locked["detail"]


def test_locks_double_up_to_the_longest(store: Storage) -> None:
    policy = LoginPolicy(free=2, first=0.05, longest=0.2, free_addr=3, free_user=4)
    got = [login_failed(store, policy, "bob", "198.51.100.7") for _ in range(6)]
    assert [lock.pair for lock in got] == [0, 0, 0.05, 0.1, 0.2, 0.2]
    assert [lock.addr for lock in got] == [0, 0, 0, 0.05, 0.1, 0.2]
    assert [lock.user for lock in got] == [0, 0, 0, 0, 0.05, 0.1]
    wait, _ = login_wait(store, policy, "bob", "203.0.113.9")  # another address: the name
    assert 0 < wait <= 0.2  # failed more than free_user times: locked everywhere


@pytest.mark.slow
def test_an_outsider_cannot_lock_the_operator_out_from_elsewhere(
    anon: TestApp, store: Storage
) -> None:
    """Issue 36: six wrong passwords from anywhere locked a name everywhere. Now they lock
    the name at that address (and then the address): ann signs in from her own."""
    for _ in range(5):
        assert attempt(anon, "ann", "guess", addr="203.0.113.66").status_int == 403
    for _ in range(3):  # locked there, and it stays locked for the outsider
        assert attempt(anon, "ann", "guess", addr="203.0.113.66").status_int == 429
    assert attempt(anon, "ann", PASSWORD, addr="203.0.113.66").status_int == 429
    assert attempt(anon, "ann", PASSWORD, addr="192.0.2.10").status_int == 303  # her own
    locked = next(e for e in read_audit(store) if e["action"] == "login locked")
    assert locked["detail"].startswith("address 203.0.113.66: name locked here 1s")


@pytest.mark.slow
def test_a_guess_spread_over_addresses_locks_the_name_everywhere(
    settings: dict[str, Any], store: Storage
) -> None:
    """The higher limit per name from all addresses together: each address stays under its
    own limit, the name is locked at every address, a new one too."""
    app = TestApp(main({}, **settings, **{"ztq.console.login_user_attempts": "8"}))
    for i in range(8):
        assert attempt(app, "vic", "guess", addr=f"198.51.100.{i // 4}").status_int == 403
    assert attempt(app, "vic", "guess", addr="198.51.100.9").status_int == 429
    assert attempt(app, "vic", PASSWORD, addr="192.0.2.200").status_int == 429
    assert attempt(app, "ann", PASSWORD, addr="198.51.100.0").status_int == 303  # others not
    # lock runs out (1 s): the right password signs in and clears the name's counters
    wait_for(lambda: attempt(app, "vic", PASSWORD, addr="192.0.2.200").status_int == 303,
             timeout=5, every=0.1)  # fmt: skip
    assert attempt(app, "vic", "guess", addr="198.51.100.0").status_int == 403


def test_the_wider_limits_are_never_below_the_narrow_one(settings: dict[str, Any]) -> None:
    for name in ("login_user_attempts", "login_address_attempts"):
        with pytest.raises(ConfigError, match=f"console.{name} \\(4\\) must be at least"):
            main({}, **settings, **{f"ztq.console.{name}": "4"})


def test_waiting_out_the_longest_lock_buys_no_fresh_free_failures(store: Storage) -> None:
    """Counters outlive the longest lock: a steady guesser gets one try per longest lock."""
    policy = LoginPolicy(free=2, first=0.2, longest=0.2)
    locks = [login_failed(store, policy, "bob", "198.51.100.7").pair for _ in range(3)]
    assert locks == [0, 0, 0.2]
    time.sleep(0.4)  # the quiet time under test: twice the longest lock, half the memory
    assert login_wait(store, policy, "bob", "198.51.100.7")[0] == 0
    assert login_failed(store, policy, "bob", "198.51.100.7").pair == 0.2  # locked again


@pytest.mark.slow
def test_an_address_trying_many_names_is_locked_and_a_forged_header_does_not_help(
    anon: TestApp,
) -> None:
    for i in range(20):  # login_address_attempts
        assert attempt(anon, f"user{i}", "guess").status_int == 403
    assert attempt(anon, "vic", "guess", X_Forwarded_For="203.0.113.50").status_int == 429
    assert attempt(anon, "vic", PASSWORD, addr="192.0.2.99").status_int == 303  # elsewhere


@pytest.mark.slow
def test_console_processes_share_the_counters(settings: dict[str, Any], anon: TestApp) -> None:
    other = TestApp(main({}, **settings))  # a second console process on the same Redis
    for _ in range(3):
        assert attempt(anon, "vic", "guess").status_int == 403
    for _ in range(2):
        assert attempt(other, "vic", "guess").status_int == 403
    assert attempt(other, "vic", "guess").status_int == 429
    assert attempt(anon, "vic", PASSWORD).status_int == 429


@pytest.mark.slow
def test_metrics_count_failures_and_locks(anon: TestApp, operator: TestApp) -> None:
    for _ in range(6):
        attempt(anon, "nobody", "guess")
    text = operator.get("/metrics").text
    assert "ztq_console_login_failures_total 6" in text
    assert "ztq_console_login_locks_total 1" in text  # the name at that address
    assert "# TYPE ztq_console_login_locks_total counter" in text
