"""How many passwords a guesser gets through the console's sign-in throttle, measured.

``python -m bench.login_guesses [--seconds 60]`` starts a private redis-server and the
console on a real HTTP server, then guesses one user's password from one address as fast
as the console answers, and again rotating user names from that address, then one user
from many addresses (``X-Forwarded-For`` through a trusted proxy). It prints the tries
that reached a password check (403) against those turned away locked (429), next to
what :meth:`ztq.core.auth.logins.LoginPolicy.guesses` says the counter that stops each
run allows (a name from one address, an address, a name from anywhere).
"""

from __future__ import annotations

import argparse
import http.cookiejar
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

from ztq.console import main
from ztq.core.auth.logins import LoginPolicy, login_stats
from ztq.core.auth.passwords import hash_password
from ztq.core.engine.connection import make_client
from ztq.core.engine.storage import Storage
from ztq.worker.embedded import RedisProcess


def _attempt(base: str, user: str, forwarded: str = "") -> int:
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    with opener.open(base + "/login", timeout=10) as page:
        html = page.read().decode()
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', html)
    data = urllib.parse.urlencode(
        {"username": user, "password": "guess", "csrf_token": csrf.group(1) if csrf else ""}
    ).encode()
    req = urllib.request.Request(base + "/login", data=data)
    if forwarded:
        req.add_header("X-Forwarded-For", forwarded)
    try:
        with opener.open(req, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _run(
    base: str, storage: Storage, seconds: float, pick: Callable[[int], tuple[str, str]]
) -> tuple[int, int]:
    """(passwords checked, tries refused unchecked) in ``seconds``; a try that fails and
    starts a lock is checked but answered 429, so checks are counted in Redis."""
    before = login_stats(storage)["failures"]
    tries = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        user, forwarded = pick(tries)
        assert _attempt(base, user, forwarded) in (403, 429)
        tries += 1
    checked = login_stats(storage)["failures"] - before
    return checked, tries - checked


def measure(seconds: float) -> None:
    from webtest.http import StopableWSGIServer

    policy = LoginPolicy()
    server = RedisProcess().start()
    try:
        settings = {
            "ztq.redis_url": server.url,
            "ztq.console.secret": "bench-secret-0123456789-abcdefghij",
            "ztq.console.users": f"ann operator {hash_password('right one', n=2**15)}",
            "ztq.console.trusted_proxies": "127.0.0.1",
        }
        http_server = StopableWSGIServer.create(
            main({}, **settings), host="127.0.0.1", clear_untrusted_proxy_headers=False
        )
        storage = Storage(make_client(server.url), url=server.url)
        base = http_server.application_url.rstrip("/")
        runs = {  # each with the free failures of the counter that stops it
            "one user, one address": (lambda i: ("ann", "198.51.100.1"), policy.free),
            "many users, one address": (lambda i: (f"user{i}", "198.51.100.2"), policy.free_addr),
            "one user, many addresses": (
                lambda i: ("bob", f"10.9.{i // 250}.{i % 250}"), policy.free_user),
        }  # fmt: skip
        print(f"policy: {policy.free} free failures of a name from one address, "
              f"{policy.free_addr} of an address, {policy.free_user} of a name from anywhere; "
              f"locks from {policy.first:g} s doubling to {policy.longest:g} s, then "
              f"{3600 / policy.longest:g} tries an hour")  # fmt: skip
        for name, (pick, free) in runs.items():
            checked, locked = _run(base, storage, seconds, pick)
            print(f"{name:26}: {checked:4} passwords checked (the policy allows "
                  f"{policy.guesses(seconds, free)}), {locked:5} refused (429) "
                  f"in {seconds:g} s")  # fmt: skip
        http_server.shutdown()
    finally:
        server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0)
    measure(parser.parse_args().seconds)
