"""No import circle among sesa_cli's modules, function-local imports counted.

Every module of src/sesa_cli is parsed with ``ast``; every ``import`` and ``from ... import`` that names a sesa_cli
module counts, wherever it stands: at the top, inside a function (a lazy import kept for start-up speed), under
``if TYPE_CHECKING:``. One import is not counted, because no line of code writes it: importing ``a.b.c`` makes
Python import the package ``a.b`` first, so a package whose ``__init__`` imports its submodules (sesa_cli.tasks)
would otherwise be in a circle with each of them. An import a module writes of its own package is counted like any
other (``from sesa_cli import tasks`` inside sesa_cli.tasks.base would be one).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def modules(src: Path = SRC) -> dict[str, Path]:
    """{dotted module name: file} of every module of sesa_cli (a package under its own name)."""
    found = {}
    for path in sorted((src / "sesa_cli").rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _target(name: str, known: dict[str, Path]) -> str | None:
    """The module an import of ``name`` runs: ``name`` itself, or the nearest enclosing module (an attribute)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(known: dict[str, Path]) -> dict[str, set[str]]:
    """{module: the sesa_cli modules it imports anywhere in its file}."""
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [_target(alias.name, known) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from . import x, from ..y import z
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                # from pkg import submodule imports the submodule; from module import name, the module
                targets = [_target(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base, known)
                           for a in node.names]  # fmt: skip
            edges.update(t for t in targets if t is not None and t != name)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as [a, b, ..., a], or None (depth-first search, modules in sorted order)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def test_no_import_circle_among_sesa_cli_modules():
    graph = import_graph(modules())
    assert len(graph) > 50  # the walk found the package
    assert "sesa_cli.commands.table" in graph["sesa_cli.cli"]  # and reads top-level imports
    assert "sesa_cli.commands.validate" in graph["sesa_cli.cli"]  # and function-local ones
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_the_walk_finds_a_circle_through_a_function_local_import(tmp_path):
    pkg = tmp_path / "sesa_cli"
    (pkg / "commands").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "commands" / "__init__.py").write_text("")
    (pkg / "cli.py").write_text("from sesa_cli.commands import train\n")
    (pkg / "commands" / "train.py").write_text("from . import common\n")
    (pkg / "commands" / "common.py").write_text("def f():\n    from sesa_cli.cli import fail\n")
    graph = import_graph(modules(tmp_path))
    assert find_cycle(graph) == ["sesa_cli.cli", "sesa_cli.commands.train", "sesa_cli.commands.common", "sesa_cli.cli"]
    # a module importing its own package, whose __init__ imports the module: counted
    (pkg / "commands" / "__init__.py").write_text("from sesa_cli.commands import common\n")
    (pkg / "commands" / "common.py").write_text("def f():\n    from sesa_cli import commands\n")
    graph = import_graph(modules(tmp_path))
    assert find_cycle(graph) == ["sesa_cli.commands.common", "sesa_cli.commands", "sesa_cli.commands.common"]
    # the package Python imports before its submodule, which no line writes: not counted
    (pkg / "commands" / "common.py").write_text("def f():\n    return 1\n")
    assert find_cycle(import_graph(modules(tmp_path))) is None


def test_the_command_table_and_the_ctrl_c_policy_sit_below_the_dispatcher():
    graph = import_graph(modules())
    for below in ("sesa_cli.commands.table", "sesa_cli.commands.interrupt"):
        assert below in graph["sesa_cli.cli"]
        assert graph[below] == set()  # they import nothing of sesa_cli: any module may import them
