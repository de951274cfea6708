"""No import circle between the files of herder (issue 33): a module that imports another,
directly or through others, is never imported back by it. Imports inside functions count
(they only hide the circle); imports under `if TYPE_CHECKING:` do not (they never run). An
import names the module it imports; the `__init__` of its package runs first but is no edge
of the graph (a package re-exporting its modules would otherwise be a circle with each).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tests.sourcetree import PACKAGE, Import, imports_of, is_module, module_name, modules

# Circles the checker knows of and lets stand for now, each with why. Remove an entry when its
# circle is gone (the test then insists).
KNOWN_CIRCLES: dict[frozenset[str], str] = {}


def import_graph() -> dict[str, dict[str, list[Import]]]:
    """module -> module it imports at run time -> the import statements doing it."""
    graph: dict[str, dict[str, list[Import]]] = {}
    for path in modules():
        edges = graph.setdefault(module_name(path), {})
        for imp in imports_of(path):
            if not imp.type_only and imp.target != imp.module and is_module(imp.target):
                edges.setdefault(imp.target, []).append(imp)
    return graph


def circles(graph: Mapping[str, Iterable[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative: the package's graph is deep enough for Python's recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in graph:
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, list(graph.get(root, ())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, pending = work[-1]
            if pending:
                nxt = pending.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, list(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def describe(circle: frozenset[str], graph: Mapping[str, Mapping[str, list[Import]]]) -> str:
    """The circle's modules and the imports between them, one per line."""
    lines = [f"circle of {len(circle)}: {', '.join(sorted(circle))}"]
    for module in sorted(circle):
        for target, imports in sorted(graph[module].items()):
            if target in circle:
                lines.extend(f"    {imp}" for imp in imports)
    return "\n".join(lines)


def test_the_checker_finds_circles_and_lets_type_only_imports_be() -> None:
    assert circles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == \
        [frozenset({"a", "b", "c"})]
    assert circles({"a": ["b"], "b": []}) == []
    assert sorted(map(sorted, circles({"a": ["b"], "b": ["a"], "c": ["d"], "d": ["c"]}))) == \
        [["a", "b"], ["c", "d"]]
    graph = import_graph()
    # a function-level import is an edge (masterd's iallocator imports the allocator lazily)
    assert "herder.alloc" in graph["herder.masterd.iallocator"]
    # a TYPE_CHECKING one is not (mond's metrics names its agent's type only)
    metrics = imports_of(PACKAGE / "mond" / "metrics.py")
    assert [i.target for i in metrics if i.type_only] == ["herder.mond.agent"]
    assert "herder.mond.agent" not in graph["herder.mond.metrics"]


def test_no_import_circle_between_files() -> None:
    graph = import_graph()
    found = circles({module: list(edges) for module, edges in graph.items()})
    unknown = [describe(c, graph) for c in found if c not in KNOWN_CIRCLES]
    assert not unknown, "import circles:\n" + "\n".join(unknown)
    gone = [", ".join(sorted(c)) for c in KNOWN_CIRCLES if c not in found]
    assert not gone, "known circles that are gone (remove them from KNOWN_CIRCLES): " + \
        "; ".join(gone)
