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


def test_no_import_cycle(modules: dict[str, Module]) -> None:
    found = architecture.describe_cycles(architecture.import_graph(modules))
    assert not found, "import cycles (imports inside functions count):\n" + "\n".join(found)


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
    assert architecture.describe_cycles(graph)[0].startswith(
        "ztq.core.a -> ztq.core.b -> ztq.core.a"
    )
