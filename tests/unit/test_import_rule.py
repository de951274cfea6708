"""The import rule of docs/architecture.md, checked on every module's source (imports anywhere
in a module, also inside functions and under TYPE_CHECKING, and `importlib.import_module` of a
literal name):

- `core` imports no component and no CLI;
- a component imports `core` and its own modules, never another component — except the
  allocator's public API (`herder.alloc`'s `__all__`), which masterd (the built-in iallocator)
  and maintd (balancing) use as a library;
- `alloc` imports nothing from herder but the small core helpers listed here, which themselves
  import nothing from herder (so the allocator can run as a bare iallocator script);
- `sim` starts the daemons as processes: it imports `core` only;
- `cli` imports the components and `core`.
"""

from __future__ import annotations

import ast

from tests.sourcetree import PACKAGE, SRC, Import, imports_of, modules

COMPONENTS = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir()
                    and (p / "__init__.py").exists() and p.name not in ("core", "cli"))
# The core helpers the allocator may use (stdlib only themselves).
ALLOC_CORE_HELPERS = {"herder.core.gcpause", "herder.core.ports", "herder.core.sizes",
                      "herder.core.untrusted"}
# Components that use the allocator as a library, through its public API only.
ALLOC_LIBRARY_USERS = {"masterd", "maintd"}


def part_of(module: str) -> str:
    """`core`, `cli`, a component's name, or `herder` for the package root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "herder"


def _alloc_public_api() -> set[str]:
    tree = ast.parse((PACKAGE / "alloc" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    raise AssertionError("herder.alloc has no __all__")


def violation(imp: Import) -> str | None:
    """Why `imp` breaks the rule, or None."""
    source, target = part_of(imp.module), part_of(imp.target)
    if target == "herder":  # the package root: the version only
        return None if imp.names in ((), ("__version__",)) else "the package root offers " \
            "__version__ only"
    if source == target:
        return None
    if source == "cli":
        return None
    if source == "core":
        return f"core imports {target}"
    if source == "alloc":
        if imp.target in ALLOC_CORE_HELPERS:
            return None
        return f"the allocator imports {imp.target} (only {sorted(ALLOC_CORE_HELPERS)})"
    if target == "core":
        return None
    if target == "alloc" and source in ALLOC_LIBRARY_USERS:
        if imp.target != "herder.alloc":
            return f"{source} reaches into the allocator's internals ({imp.target})"
        beyond = set(imp.names) - _alloc_public_api()
        if beyond:
            return f"{source} uses {sorted(beyond)}, not in herder.alloc.__all__"
        return None
    return f"{source} imports another component ({target})"


def test_the_rule_sees_every_part_and_function_level_imports() -> None:
    """The checker itself: it finds the packages and the imports hidden in functions."""
    assert {"alloc", "masterd", "maintd", "mond", "noded", "confd", "instmon", "sim"} <= \
        set(COMPONENTS)
    lazy = [i for i in imports_of(PACKAGE / "masterd" / "iallocator.py")
            if i.target == "herder.alloc"]
    assert lazy and lazy[0].names == ("InputError", "answer_message")
    assert "herder.core.sizes" in {i.target for i in imports_of(PACKAGE / "alloc" /
                                                                 "textdata.py")}
    dynamic = imports_of(PACKAGE / "alloc" / "modes" / "__init__.py")
    assert any(i.target == "herder.alloc.modes" for i in dynamic)
    assert violation(Import("herder.core.model", 1, "herder.mond.collector")) == \
        "core imports mond"
    assert violation(Import("herder.noded.server", 1, "herder.masterd.redist")) == \
        "noded imports another component (masterd)"
    assert violation(Import("herder.maintd.balance", 1, "herder.alloc.balance")) is not None
    assert violation(Import("herder.maintd.balance", 1, "herder.alloc", ("Balancer",))) \
        is not None
    assert violation(Import("herder.alloc.__main__", 1, "herder.cli.alloc")) is not None


def test_every_module_follows_the_import_rule() -> None:
    checked = modules()
    assert len(checked) > 100
    broken = [f"{imp}: {why}" for path in checked for imp in imports_of(path)
              if (why := violation(imp))]
    assert not broken, "\n".join(broken)


def test_the_allocators_core_helpers_import_nothing_from_herder() -> None:
    for name in sorted(ALLOC_CORE_HELPERS):
        path = SRC / (name.replace(".", "/") + ".py")
        assert path.exists(), name
        assert imports_of(path) == [], name
