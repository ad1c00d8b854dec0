"""The import graph of ztq, read from the source (pure AST: nothing is imported, no Redis).

tests/test_architecture.py checks the house rules of docs/architecture.md against it (no
import cycle, module and folder sizes, package docstrings), and this module draws the
package-level picture in docs/architecture.md. ``python -m tests.architecture`` rewrites
that picture; the test compares it with what :func:`render_graph` draws today.

What counts as an import: every ``import`` and ``from ... import`` statement of a ztq
module, inside functions too, except under ``if TYPE_CHECKING:``. ``from P import X``
imports the module ``P.X`` when there is one, else the package ``P`` (a name its
``__init__`` defines).
Relative imports are resolved. Importing ``a.b.c`` does not count as importing ``a`` and
``a.b``, although Python runs their ``__init__`` first (as import-linter does).
"""

from __future__ import annotations

import ast
import re
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the folders that make up the ztq namespace ([tool.setuptools] package-dir)
FOLDERS = {"core": "ztq.core", "worker": "ztq.worker", "console": "ztq.console"}
MAX_LINES = 500
MAX_MODULES_PER_FOLDER = 15
DOC = ROOT / "docs" / "architecture.md"
START = "<!-- import-graph:start -->"
END = "<!-- import-graph:end -->"
# every package may import these two; the picture leaves out the arrows into them
UNDRAWN_TARGETS = {"ztq.core.errors", "ztq.core.states"}
# an alias shim: the documented old path that hands out the new module object
_ALIAS = re.compile(r"^sys\.modules\[__name__\]\s*=", re.MULTILINE)


@dataclass(frozen=True)
class Module:
    name: str  # ztq.core.engine.storage; a package by its own name (ztq.core.engine)
    path: Path
    is_package: bool
    lines: int
    source: str

    @property
    def package(self) -> str:
        """The package this module's code lives in (a package's ``__init__``: itself)."""
        return self.name if self.is_package else self.name.rpartition(".")[0]

    @property
    def is_alias(self) -> bool:
        return bool(_ALIAS.search(self.source))


def discover(root: Path = ROOT) -> dict[str, Module]:
    """Every ztq module under the three folders, by dotted name."""
    modules: dict[str, Module] = {}
    for folder, prefix in FOLDERS.items():
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root / folder)
            if any(part.startswith((".", "__pycache__")) for part in rel.parts):
                continue
            parts = list(rel.with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            name = ".".join([prefix, *parts])
            if name in modules and modules[name].is_package:
                continue  # a package and a module of one name: Python imports the package
            source = path.read_text(encoding="utf-8")
            modules[name] = Module(name, path, is_package, len(source.splitlines()), source)
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(
    node: ast.AST, type_checking: bool = False
) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement in ``node``, skipping the body of ``if TYPE_CHECKING:``
    unless ``type_checking``."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    elif isinstance(node, ast.If) and _is_type_checking(node.test) and not type_checking:
        for statement in node.orelse:
            yield from _import_nodes(statement)
    else:
        for child in ast.iter_child_nodes(node):
            yield from _import_nodes(child, type_checking)


def imports_of(module: Module, known: Iterable[str], type_checking: bool = False) -> set[str]:
    """The ztq modules ``module`` imports (see the module docstring for what counts);
    ``type_checking``: the imports under ``if TYPE_CHECKING:`` count too (the type-level
    graph, where a cycle is a knot in the design even when Python never runs it)."""
    names = set(known)
    found: set[str] = set()
    tree = ast.parse(module.source, filename=str(module.path))
    for node in _import_nodes(tree, type_checking):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in names:
                    found.add(alias.name)
            continue
        if node.level:
            base = module.package.split(".")
            if node.level > 1:
                base = base[: -(node.level - 1)]
            parent = ".".join([*base, *([node.module] if node.module else [])])
        else:
            parent = node.module or ""
        submodules = {f"{parent}.{a.name}" for a in node.names} & names
        found |= submodules
        # a name that is not a submodule comes from the package's __init__; importing only
        # submodules (``from ztq.core import settings``) runs the __init__ as every import of
        # a submodule does, which is no dependency on what the __init__ holds
        if parent in names and len(submodules) < len(node.names):
            found.add(parent)
    found.discard(module.name)
    return found


def import_graph(
    modules: dict[str, Module] | None = None, type_checking: bool = False
) -> dict[str, set[str]]:
    """Module name -> the ztq modules it imports (``type_checking``: see :func:`imports_of`)."""
    modules = discover() if modules is None else modules
    return {name: imports_of(module, modules, type_checking) for name, module in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: each strongly connected component of more than one module (its
    modules sorted), sorted so that the report reads the same every run."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(node: str) -> None:  # Tarjan; ~150 modules, recursion is fine
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))
    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(components)


def shortest_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One shortest import path from the component's first module back to itself."""
    start, members = component[0], set(component)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for target in sorted(graph[node] & members):
            if target == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if target not in came_from:
                came_from[target] = node
                queue.append(target)
    return [start]


def describe_cycles(graph: dict[str, set[str]]) -> list[str]:
    """One line per cycle: a shortest loop, then every module of the cycle."""
    return [
        f"{' -> '.join(shortest_cycle(graph, component))}"
        f"  (all {len(component)} modules: {', '.join(component)})"
        for component in cycles(graph)
    ]


# -- the Redis boundary ------------------------------------------------------------------------
ENGINE = "ztq.core.engine"


def redis_leaks(modules: dict[str, Module]) -> list[tuple[str, str]]:
    """(module, what) for each place outside :data:`ENGINE` that imports redis-py (any
    import, under ``if TYPE_CHECKING:`` and inside functions too) or reads an attribute
    named ``client`` (a Storage's redis-py client: ``storage.client``, ``self.client``)."""
    found: list[tuple[str, str]] = []
    for name in sorted(modules):
        if name == ENGINE or name.startswith(ENGINE + "."):
            continue
        tree = ast.parse(modules[name].source, filename=str(modules[name].path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                targets = [node.module or ""]
            else:
                targets = []
            for target in targets:
                if target == "redis" or target.startswith("redis."):
                    found.append((name, f"imports {target} (line {node.lineno})"))
            if isinstance(node, ast.Attribute) and node.attr == "client":
                found.append((name, f"reaches .client (line {node.lineno})"))
    return found


# -- the package-level picture ---------------------------------------------------------------


def node_of(module: Module) -> str:
    """The box a module is drawn in: its package; but ztq.core's own modules (errors, states,
    settings, the public ``__init__``) are layers of their own, and the alias shims and
    ``__main__`` at the top of a folder share one box, so that the process's box shows what
    the process imports."""
    roots = set(FOLDERS.values())
    if module.package in roots and not module.is_package:
        if module.is_alias or module.name.endswith(".__main__"):
            return f"{module.package} (aliases)"
        if module.package == "ztq.core":
            return module.name
    return module.package


def _node_id(node: str) -> str:
    return re.sub(r"\W+", "_", node).strip("_")


def render_graph(modules: dict[str, Module] | None = None) -> str:
    """The Mermaid flowchart between the markers of docs/architecture.md (markers excluded)."""
    modules = discover() if modules is None else modules
    graph = import_graph(modules)
    members: dict[str, list[Module]] = {}
    for module in modules.values():
        members.setdefault(node_of(module), []).append(module)
    edges = sorted(
        {
            (node_of(modules[source]), node_of(modules[target]))
            for source, targets in graph.items()
            for target in targets
        }
    )
    lines = [
        "<!-- generated by `python -m tests.architecture`; "
        "tests/test_architecture.py checks it is current -->",
        "```mermaid",
        "flowchart TD",
    ]
    for folder, root in FOLDERS.items():
        lines.append(f'    subgraph {folder}["{root} ({folder}/)"]')
        for node in sorted(n for n in members if n.split(" ")[0].startswith(root)):
            mods = members[node]
            largest = max(mods, key=lambda m: (m.lines, m.name))
            short = largest.path.relative_to(ROOT / folder).as_posix()
            if node.endswith(" (aliases)"):
                names = sorted(m.name.rpartition(".")[2] for m in mods)
                what = "old paths" if "__main__" not in names else "entry point and old paths"
                label = f"{node.split(' ')[0]}: {what}<br/>{', '.join(names)}"
            elif len(mods) == 1:
                label = f"{node}<br/>{short}"
            else:  # no line counts: the picture changes when the shape does, not every edit
                label = f"{node}<br/>{len(mods)} modules, largest {short}"
            lines.append(f'        {_node_id(node)}["{label}"]')
        lines.append("    end")
    targets: dict[str, list[str]] = {}
    for a, b in edges:
        if a != b and b not in UNDRAWN_TARGETS:
            targets.setdefault(a, []).append(_node_id(b))
    lines += [f"    {_node_id(a)} --> {' & '.join(bs)}" for a, bs in sorted(targets.items())]
    lines.append("```")
    return "\n".join(lines) + "\n"


def replace_block(text: str, block: str) -> str:
    """``text`` with what lies between the markers replaced by ``block``."""
    head, start, rest = text.partition(START)
    _, end, tail = rest.partition(END)
    if not start or not end:
        raise ValueError(f"{DOC} lacks the markers {START} and {END}")
    return f"{head}{START}\n{block}{END}{tail}"


def current_block(text: str) -> str:
    return text.partition(START)[2].partition(END)[0].removeprefix("\n")


def main() -> None:
    text = DOC.read_text(encoding="utf-8")
    new = replace_block(text, render_graph())
    if new != text:
        DOC.write_text(new, encoding="utf-8")
        print(f"rewrote the import graph in {DOC.relative_to(ROOT)}")
    else:
        print(f"the import graph in {DOC.relative_to(ROOT)} is current")


if __name__ == "__main__":
    main()
