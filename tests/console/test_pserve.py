"""``pserve app.ini`` serves the console (the paste entry point, the ini, the environment)."""

from __future__ import annotations

import base64
import http.client
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from http.cookiejar import CookieJar
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest

import ztq.core as ztq
from tests.console.conftest import PASSWORD, SECRET
from ztq.core.monitor import streams

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _opener(jar: CookieJar) -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))


def _sign_in(opener: urllib.request.OpenerDirector, base: str, forwarded: str) -> None:
    with opener.open(base + "/login", timeout=5) as page:
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.read().decode())
    assert csrf
    form = {"username": "ann", "password": PASSWORD, "csrf_token": csrf.group(1)}
    request = urllib.request.Request(base + "/login", data=urlencode(form).encode())
    request.add_header("X-Forwarded-For", forwarded)
    with opener.open(request, timeout=5) as r:
        assert r.status == 200 and "/login" not in r.url  # signed in: the first page


def _sign_in_to(opener: urllib.request.OpenerDirector, base: str, target: str) -> str:
    """Sign ann in with ``next`` = ``target``; the URL the sign-in led to (its page a 404:
    no such page, but still on this site)."""
    with opener.open(base + "/login", timeout=5) as page:
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.read().decode())
    assert csrf
    form = {"username": "ann", "password": PASSWORD, "csrf_token": csrf.group(1), "next": target}
    request = urllib.request.Request(base + "/login", data=urlencode(form).encode())
    try:
        with opener.open(request, timeout=5) as r:
            return str(r.url)
    except urllib.error.HTTPError as exc:
        assert exc.code == 404, (exc.code, exc.read()[:300])
        return str(exc.url)


def _status(opener: urllib.request.OpenerDirector, url: str) -> tuple[int, str]:
    with opener.open(url, timeout=5) as r:  # redirects followed: the final page
        return r.status, r.url


def _raw(port: int, path: str, host: str = "") -> http.client.HTTPResponse:
    """One GET with the path sent as is (urllib would quote it) and any Host header."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.putrequest("GET", path, skip_host=bool(host))
    if host:
        conn.putheader("Host", host)
    conn.endheaders()
    response = conn.getresponse()
    response.read()
    conn.close()
    return response


@pytest.mark.slow
def test_pserve_app_ini(redis_url: str, user_lines: str, tmp_path: Path) -> None:
    port = free_port()
    ini = (REPO / "app.ini").read_text().replace("127.0.0.1:6543", f"127.0.0.1:{port}")
    (tmp_path / "app.ini").write_text(ini)
    env = {
        **os.environ,
        "ZTQ_REDIS_URL": redis_url,
        "ZTQ_CONSOLE_SECRET": SECRET,
        "ZTQ_CONSOLE_USERS": user_lines.replace("\n", ";"),
        "ZTQ_CONSOLE_TRUSTED_PROXIES": "127.0.0.1",
    }
    pserve = Path(sys.executable).with_name("pserve")
    proc = subprocess.Popen([str(pserve), str(tmp_path / "app.ini")], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/login", timeout=2) as r:
                    assert r.status == 200 and b"Sign in" in r.read()
                    break
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
                assert time.monotonic() < deadline, "pserve did not answer"
                time.sleep(0.2)
        request = urllib.request.Request(f"http://127.0.0.1:{port}/api/queues")
        token = base64.b64encode(f"vic:{PASSWORD}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(request, timeout=5) as r:
            assert r.status == 200 and r.headers["Content-Type"].startswith("application/json")
        # what waitress decodes: bad UTF-8 is a 404 (path) or 400 (query), never waitress's
        # 500; every answer has the security headers; no redirect names the Host header
        for path, status in (("/%ff", 404), ("/static/%ff", 404), ("/login?next=%ff", 400)):
            got = _raw(port, path)
            assert got.status == status and got.getheader("Content-Security-Policy"), path
        got = _raw(port, "/", host="evil.example")
        assert got.status == 303 and got.getheader("Location") == "/login?next=%2F"
        assert got.getheader("X-Frame-Options") == "DENY"
        assert _raw(port, "/static/__init__.py").status == 404  # only assets (issue 36)
        # a `next` no header can carry: encoded, the sign-in kept (it was waitress's 500)
        for target in ("/／／evil.com", "/\u3000"):
            jar = CookieJar()
            got_to = _sign_in_to(_opener(jar), f"http://127.0.0.1:{port}", target)
            assert got_to == f"http://127.0.0.1:{port}" + quote(target), got_to
            assert _status(_opener(jar), f"http://127.0.0.1:{port}/workers")[0] == 200
        # through waitress, behind a trusted proxy: the forwarded client is the address
        base = f"http://127.0.0.1:{port}"
        jar, stolen = CookieJar(), CookieJar()
        browser, thief = _opener(jar), _opener(stolen)
        _sign_in(browser, base, "198.51.100.77")
        signed_in = streams.stream_page(ztq.get_storage(), "audit", limit=5).rows[0]
        assert signed_in["detail"] == "password, from 198.51.100.77"
        # a copied cookie dies with the sign-out (the report, replayed on pserve)
        for cookie in jar:
            stolen.set_cookie(cookie)
        assert _status(thief, base + "/workers") == (200, base + "/workers")
        with browser.open(base + "/sessions", timeout=5) as page:
            csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.read().decode())
        assert csrf
        out = urllib.request.Request(
            base + "/logout", data=urlencode({"csrf_token": csrf.group(1)}).encode()
        )
        assert _status(browser, out)[1].startswith(base + "/login")
        assert _status(thief, base + "/workers")[1].startswith(base + "/login")
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.slow
def test_pserve_refuses_to_start_without_a_secret(redis_url: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZTQ_CONSOLE_")}
    pserve = Path(sys.executable).with_name("pserve")
    done = subprocess.run([str(pserve), str(REPO / "app.ini")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    assert done.returncode == 2
    assert "no secret" in done.stderr + done.stdout
    one_line_no_traceback(done.stderr + done.stdout)


def one_line_no_traceback(out: str) -> None:
    """A console configuration mistake under pserve: one line, as `ztq console` says it
    (issue 39: a 40-line traceback)."""
    assert "Traceback" not in out, out
    assert len(out.strip().splitlines()) == 1, out
    assert out.startswith("ztq console: "), out


@pytest.mark.slow
def test_a_bad_user_is_reported_at_its_own_line(
    redis_url: str, user_lines: str, tmp_path: Path
) -> None:
    """The second user's bad role names that user and the ini line it is written on, not
    the line of ``ztq.console.users =`` and a count of the value's lines (issue 24)."""
    ann, vic = user_lines.splitlines()
    bob = vic.replace("vic viewer", "bob admin")
    ini = tmp_path / "app.ini"
    lines = [
        "[app:main]",
        "use = egg:ztq",
        f"ztq.redis_url = {redis_url}",
        f"ztq.console.secret = {SECRET}",
        "ztq.console.users =",
        f"    {ann}",
        "#    carl viewer scrypt$...",
        "",
        f"    {bob}",
        "",
        "[server:main]",
        "use = egg:waitress#main",
        f"listen = 127.0.0.1:{free_port()}",
    ]
    ini.write_text("\n".join(lines) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZTQ_")}
    pserve = Path(sys.executable).with_name("pserve")
    done = subprocess.run([str(pserve), str(ini)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    out = done.stderr + done.stdout
    assert done.returncode == 2
    assert f"{ini}:9: ztq.console.users, user 'bob': role 'admin' must be one of" in out, out
    one_line_no_traceback(out)
    assert "entry" not in out, out


def test_a_bad_user_from_the_environment_is_named(user_lines: str) -> None:
    from ztq.console.config import load
    from ztq.core.errors import ConfigError

    ann, vic = user_lines.splitlines()
    users = f"{ann};{vic.replace('vic viewer', 'bob admin')}"
    try:
        load({}, {"ZTQ_CONSOLE_SECRET": SECRET, "ZTQ_CONSOLE_USERS": users})
    except ConfigError as exc:
        assert str(exc).startswith(
            "environment variable ZTQ_CONSOLE_USERS: ztq.console.users entry 2, user 'bob': "
            "role 'admin' must be one of"
        ), exc
    else:
        raise AssertionError("a bad role was accepted")
