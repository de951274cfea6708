"""No import circle through the node RPC contract, its client, noded or the logical units
(issue 33): helper modules are imported by the modules that use them and never import them back.
Imports anywhere in a module count (also inside functions, `importlib.import_module` of a literal
name); imports only for the type checker (`if TYPE_CHECKING:`) do not."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.unit.test_import_rule import imports_of, module_name, modules

# the packages whose modules must be in no circle
GUARDED = ("herder.masterd.lu", "herder.core.noderpc", "herder.core.rpcdefs",
           "herder.core.diskobjects", "herder.noded")


def _type_only_lines(path: Path) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            lines |= {sub.lineno for stmt in node.body for sub in ast.walk(stmt)
                      if isinstance(sub, ast.Import | ast.ImportFrom)}
    return lines


def _known(name: str, known: set[str]) -> str | None:
    """The module `name` is or belongs to (an imported class: its module)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def graph() -> dict[str, set[str]]:
    """Module -> the herder modules it imports at run time."""
    paths = {module_name(path): path for path in modules()}
    edges: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        type_only = _type_only_lines(path)
        for imp in imports_of(path):
            target = _known(imp.target, set(paths))
            if imp.line not in type_only and target is not None and target != name:
                edges[name].add(target)
    return edges


def circles(edges: dict[str, set[str]]) -> Iterator[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(node: str) -> Iterator[list[str]]:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges[node]):
            if target not in index:
                yield from visit(target)
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
                yield sorted(component)

    for node in sorted(edges):
        if node not in index:
            yield from visit(node)


def _guarded(module: str) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in GUARDED)


def test_no_circle_through_the_rpc_contract_noded_or_the_lus() -> None:
    found = [c for c in circles(graph()) if any(_guarded(m) for m in c)]
    assert found == [], "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_check_finds_a_circle() -> None:
    """The detector on a small graph: a circle, a chain and a self-contained module."""
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert list(circles(edges)) == [["a", "b", "c"]]


def test_type_only_imports_do_not_count(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                      "    from herder.noded.node import Node\nimport herder.core.model\n")
    assert _type_only_lines(source) == {3}
