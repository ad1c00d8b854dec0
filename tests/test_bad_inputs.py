"""Every row of the common-mistakes table (tests/bad_inputs.py) run for real: the message,
the exit code or status, and nothing already queued lost or changed (issue 24)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from webtest import TestApp

from tests import bad_inputs
from tests import sample_tasks as t
from ztq.core.errors import ZtqError
from ztq.worker.cli.commands import main as ztq_main

PASSWORD = "correct horse battery"
LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d")
SECRET = "test-secret-0123456789-abcdefghij"
# keys that a refused request may write without changing any task: who signed in, when
EPHEMERAL = re.compile(r":(session|sessions|login|logins|audit|stats?|events|workers)\b|:w:")


def snapshot(url: str) -> dict[str, Any]:
    """Every key of the Redis with its content (a record, a list, a set ...), less the
    bookkeeping a refused request may write (sessions, login throttle, audit, stats)."""
    client = redis.Redis.from_url(url, decode_responses=True)
    out: dict[str, Any] = {}
    for key in client.scan_iter(count=1000):
        if EPHEMERAL.search(key):
            continue
        kind = client.type(key)
        if kind == "string":
            out[key] = client.get(key)
        elif kind == "list":
            out[key] = client.lrange(key, 0, -1)
        elif kind == "hash":
            out[key] = client.hgetall(key)
        elif kind == "set":
            out[key] = sorted(client.smembers(key))
        elif kind == "zset":
            out[key] = client.zrange(key, 0, -1, withscores=True)
        elif kind == "stream":
            out[key] = list(client.xrange(key) or [])
        else:
            out[key] = kind
    client.close()
    return out


@pytest.fixture
def seeded(redis_url: str) -> Iterator[str]:
    """A Redis that holds work: three mail tasks waiting, one task delayed, one urgent."""
    for to in ("a@example.org", "b@example.org", "c@example.org"):
        t.send.delay(to)
    t.add.enqueue((1, 2), delay=3600)
    t.urgent.delay(7)
    yield redis_url


def run_python(m: bad_inputs.Mistake) -> None:
    ns = bad_inputs.namespace()
    with pytest.raises(ZtqError) as info:
        exec(m.does, ns)  # noqa: S102 - the table's own statements
    assert type(info.value).__name__ == m.then, (m.does, info.value)
    assert m.says in str(info.value), (m.does, str(info.value))


def run_command(
    argv: list[str], m: bad_inputs.Mistake, capsys: pytest.CaptureFixture[str], hostport: str
) -> None:
    try:
        code = ztq_main(argv)
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    err = capsys.readouterr().err.strip()
    assert code == int(m.then), (m.does, code, err)
    assert "Traceback" not in err
    # a worker may have logged its start (timestamped log records) before it refused
    lines = [line for line in err.splitlines() if line.strip() and not LOG_RECORD.match(line)]
    assert m.says.replace("HOST:PORT", hostport) in lines[-1], (m.does, err)
    # one line; argparse's usage errors put the usage first (a line and its indented rest)
    usage = lines[:-1]
    assert not usage or (
        usage[0].startswith("usage:") and all(line[:1].isspace() for line in usage[1:])
    ), (m.does, err)


def run_cli(m: bad_inputs.Mistake, url: str, capsys, monkeypatch, tmp_path: Path) -> None:
    hostport = url.split("//", 1)[1].split("/", 1)[0]  # the doc's HOST:PORT is the test Redis
    words = shlex.split(m.does.replace("HOST:PORT", hostport))
    monkeypatch.setenv("ZTQ_REDIS_URL", url)
    while "=" in words[0]:
        name, _, value = words.pop(0).partition("=")
        monkeypatch.setenv(name, value)
    assert words.pop(0) == "ztq"
    run_command(words, m, capsys, hostport)


def run_ini(m: bad_inputs.Mistake, url: str, capsys, monkeypatch, tmp_path: Path) -> None:
    path = tmp_path / "worker.ini"
    path.write_text(m.does + "\n")
    monkeypatch.setenv("ZTQ_REDIS_URL", url)  # where it would work, had the file been right
    monkeypatch.chdir(tmp_path)
    run_command(["worker", "-c", str(path), "--burst"], m, capsys, "")


def run_console(m: bad_inputs.Mistake, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.console.conftest import csrf, login
    from ztq.console import main as console
    from ztq.core.auth.passwords import hash_password

    monkeypatch.delenv("ZTQ_REDIS_URL")  # the tests' guard; the console gets its own setting
    users = f"ann operator {hash_password(PASSWORD, n=1024)}"
    app = TestApp(console({}, **{"ztq.redis_url": url, "ztq.console.secret": SECRET,
                                 "ztq.console.users": users}))  # fmt: skip
    login(app, "ann", PASSWORD)
    method, path, *fields = shlex.split(m.does)
    form = [(k, v) for k, _, v in (f.partition("=") for f in fields)]
    if ("csrf_token", "FORGED") not in form and not any(k == "csrf_token" for k, _ in form):
        form.append(("csrf_token", csrf(app)))
    if method == "GET":
        r = app.get(path, dict(form), expect_errors=True)
    else:
        r = app.post(path, form, expect_errors=True)
    assert r.status_int == int(m.then), (m.does, r.status_int, r.text[:300])
    page = r.follow() if r.status_int in (302, 303) else r
    assert m.says in page.text, (m.does, page.text[:2000])


# the console's cases build a console and sign in: a second each, left out of make test-fast
@pytest.mark.parametrize(
    "m",
    [
        pytest.param(m, marks=pytest.mark.slow) if m.id.startswith("console:") else m
        for m in bad_inputs.MISTAKES
    ],
    ids=lambda m: m.id,
)
def test_a_mistake_is_refused_with_a_clear_message_and_loses_nothing(
    m: bad_inputs.Mistake,
    seeded: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    before = snapshot(seeded)
    if m.kind == "python":
        run_python(m)
    elif m.kind == "cli":
        run_cli(m, seeded, capsys, monkeypatch, tmp_path)
    elif m.kind == "ini":
        run_ini(m, seeded, capsys, monkeypatch, tmp_path)
    else:
        run_console(m, seeded, monkeypatch)
    assert snapshot(seeded) == before, m.does


def test_the_table_covers_every_area_with_sixty_mistakes_or_more() -> None:
    kinds = {m.kind for m in bad_inputs.MISTAKES}
    assert kinds == set(bad_inputs.AREAS)
    assert len(bad_inputs.MISTAKES) >= 60
    assert len({m.id for m in bad_inputs.MISTAKES}) == len(bad_inputs.MISTAKES)


def test_docs_common_mistakes_is_the_table() -> None:
    text = bad_inputs.DOC.read_text("utf-8")
    assert bad_inputs.current_block(text) == bad_inputs.render(), (
        "docs/common-mistakes.md is stale: run `python -m tests.bad_inputs`"
    )
