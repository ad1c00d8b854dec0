"""The testing helpers as a user's project uses them: a suite run by pytest with the
plugin's fixtures, on a private redis-server and on the in-memory fallback."""

from __future__ import annotations

import pytest

USER_TASKS = """
from pathlib import Path

from ztq.core import App

app = App("user-project")


@app.task(queue="mail", retries=2)
def flaky(path: str) -> str:
    p = Path(path)
    n = int(p.read_text()) + 1 if p.exists() else 1
    p.write_text(str(n))
    if n < 3:
        raise ConnectionError("SMTP busy")
    return "sent"


@app.task
def add(a: int, b: int) -> int:
    return a + b


@app.task
def boom() -> None:
    raise ValueError("nope")
"""

USER_TESTS = """
import pytest

import tasks
from ztq.core import TaskFailed, TaskHandle


@pytest.fixture
def ztq_app():
    return tasks.app


def test_the_backend(ztq_storage):
    assert ("fakeredis" in type(ztq_storage.client).__module__) is MEMORY


def test_drain_runs_what_is_queued(ztq_worker):
    h = tasks.add.delay(1, 2)
    assert h.state == "queued"
    assert ztq_worker.drain() == 1
    assert h.get(timeout=1) == 3


def test_eager_mode_behaves_as_a_worker(ztq_eager, tmp_path):
    mail = tasks.flaky.delay(str(tmp_path / "tries"))
    assert mail.get(timeout=1) == "sent"  # two failures retried at once
    assert (tmp_path / "tries").read_text() == "3"
    tasks.add.enqueue((1, 1), callback=tasks.add.prepare((5,), pass_result=True))
    child = TaskHandle(tasks.add.prepare((2, 5)).resolve_id(), "default", app=tasks.app)
    assert child.get(timeout=1) == 7
    with pytest.raises(TaskFailed, match="ValueError: nope"):
        tasks.boom.delay().get(timeout=1)
"""

IN_MEMORY = """
import pytest

pytest_plugins = ["ztq.worker.testing.pytest_plugin"]


@pytest.fixture(scope="session")
def ztq_redis_server():
    yield None  # this project tests without a redis-server: the in-memory one
"""


@pytest.mark.slow
@pytest.mark.parametrize("where", ["redis-server", "in-memory"])
def test_a_user_suite_with_the_plugin(pytester: pytest.Pytester, where: str) -> None:
    conftest = 'pytest_plugins = ["ztq.worker.testing.pytest_plugin"]\n'
    pytester.makeconftest(IN_MEMORY if where == "in-memory" else conftest)
    memory = f"MEMORY = {where == 'in-memory'}\n"
    pytester.makepyfile(tasks=USER_TASKS, test_user=memory + USER_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=3)
    assert result.ret == 0


@pytest.mark.slow
def test_the_testing_md_project_passes(pytester: pytest.Pytester) -> None:
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "testing.md").read_text("utf-8")
    tasks, conftest, tests, _ = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
    pytester.makeconftest(conftest)
    pytester.makepyfile(tasks=tasks, test_tasks=tests)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=2)


def test_the_testing_md_in_memory_example_prints_what_it_shows() -> None:
    """docs/testing.md, "The in-memory engine": the example, and the output shown after it."""
    import contextlib
    import io
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "testing.md").read_text("utf-8")
    section = text[text.index("## The in-memory engine") :]
    code, shown = re.findall(r"^```[a-z]*\n(.*?)^```", section, re.S | re.M)[:2]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/testing.md", "exec"), {"__name__": "docs_testing"})  # noqa: S102
    assert out.getvalue() == shown
