"""herder's source as the rule tests read it (parsed, never imported): its modules, their
imports (anywhere in a module, also inside functions and under TYPE_CHECKING, and
`importlib.import_module` of a literal name) and their functions.

Used by the import rule (`tests/unit/test_import_rule.py`), the import circles
(`test_import_circles.py`), the function lengths (`test_function_length.py`), the `Any` in
signatures (`test_signature_any.py`) and the module map of docs/architecture.md
(`test_architecture_map.py`).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "herder"


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    line: int
    target: str  # the imported module (absolute)
    names: tuple[str, ...] = ()  # `from target import names`
    type_only: bool = False  # under `if TYPE_CHECKING:`: never runs

    def __str__(self) -> str:
        what = f"from {self.target} import {', '.join(self.names)}" if self.names \
            else f"import {self.target}"
        return f"{self.module}:{self.line}: {what}"


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> list[Path]:
    """Every module file of the package."""
    return sorted(PACKAGE.rglob("*.py"))


@functools.cache
def tree_of(path: Path) -> ast.Module:
    """The module's syntax tree (parsed once per test process)."""
    return ast.parse(path.read_text(), str(path))


@functools.cache
def is_module(name: str) -> bool:
    path = SRC.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _literal_prefix(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0],
                                                                       ast.Constant):
        return str(node.values[0].value)
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _type_only_lines(tree: ast.AST) -> set[int]:
    """The lines of the statements under `if TYPE_CHECKING:` (not its `else:`)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for statement in node.body:
                lines.update(range(statement.lineno, (statement.end_lineno or
                                                      statement.lineno) + 1))
    return lines


def imports_of(path: Path) -> list[Import]:
    """The herder modules `path` imports."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = tree_of(path)
    type_only = _type_only_lines(tree)
    found: list[Import] = []
    for node in ast.walk(tree):
        hidden = getattr(node, "lineno", 0) in type_only
        if isinstance(node, ast.Import):
            found.extend(Import(module, node.lineno, alias.name, type_only=hidden)
                         for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            # `from package import module` imports that module
            names = [alias.name for alias in node.names]
            submodules = [n for n in names if is_module(f"{target}.{n}")]
            found.extend(Import(module, node.lineno, f"{target}.{n}", type_only=hidden)
                         for n in submodules)
            rest = tuple(n for n in names if n not in submodules)
            if rest or not submodules:
                found.append(Import(module, node.lineno, target, rest, type_only=hidden))
        elif isinstance(node, ast.Call) and node.args and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (isinstance(node.func, ast.Name) and node.func.id == "import_module")):
            prefix = _literal_prefix(node.args[0])
            if prefix is not None and prefix.startswith("herder."):
                found.append(Import(module, node.lineno, prefix.rstrip("."), type_only=hidden))
    return [i for i in found if i.target == "herder" or i.target.startswith("herder.")]


@dataclass(frozen=True)
class Function:
    module: str
    name: str  # qualified within the module: `Class.method`, `outer.inner`
    line: int
    lines: int  # from `def` to its last line (decorators not counted)
    signature_any: int = 0  # `Any` in its parameters' and return's annotations

    def __str__(self) -> str:
        return f"{self.module}.{self.name} ({self.lines} lines, line {self.line})"


def _anys(annotation: ast.expr | None) -> int:
    """How often an annotation names `Any` (`Any`, `typing.Any`, also in a quoted one; not a
    `Literal`'s values)."""
    if annotation is None:
        return 0
    if (isinstance(annotation, ast.Name) and annotation.id == "Any") or \
            (isinstance(annotation, ast.Attribute) and annotation.attr == "Any"):
        return 1
    if isinstance(annotation, ast.Subscript) and (
            (isinstance(annotation.value, ast.Name) and annotation.value.id == "Literal") or
            (isinstance(annotation.value, ast.Attribute) and annotation.value.attr == "Literal")):
        return 0
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            return _anys(ast.parse(annotation.value, mode="eval").body)
        except SyntaxError:  # a string that is no annotation
            return 0
    return sum(_anys(child) for child in ast.iter_child_nodes(annotation)
               if isinstance(child, ast.expr))


def signature_any(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """`Any` in the annotations of a function's parameters (`*args`, `**kwargs` too) and its
    return; an alias of `Any` (`params.Params`) is a name of its own and not counted."""
    args = function.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs,
             *(a for a in (args.vararg, args.kwarg) if a is not None)]
    return sum(_anys(a.annotation) for a in every) + _anys(function.returns)


def functions_of(path: Path) -> Iterator[Function]:
    """Every function and method of a module, nested ones too."""
    module = module_name(path)

    def walk(node: ast.AST, prefix: str) -> Iterator[Function]:
        for child in ast.iter_child_nodes(node):
            # a `def` is a statement, and statements hold statements only in their bodies and
            # in except handlers and match cases: expressions need not be walked
            if not isinstance(child, ast.stmt | ast.excepthandler | ast.match_case):
                continue
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                yield Function(module, name, child.lineno,
                               (child.end_lineno or child.lineno) - child.lineno + 1,
                               signature_any(child))
                yield from walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(tree_of(path), "")
