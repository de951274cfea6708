"""docs/architecture.md's module map names every module of `src/herder`, and only those.

The map is the section "## Module map": under a heading naming one component (### `masterd`:
...), each table row's first cell names modules relative to it (`rapi/base`, or several:
`lu/grow`, `lu/recreate`); a folder (`rapi/`) stands for its package's `__init__`. The
package root and the components' own `__init__` are the headings.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.sourcetree import PACKAGE, module_name, modules

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
HEADING = re.compile(r"^### `(\w+)`")
ROW = re.compile(r"^\| *(`[^|]*`) *\|")


def mapped(text: str) -> dict[str, list[str]]:
    """module name -> the lines of the map naming it (more than one: named twice)."""
    found: dict[str, list[str]] = {}
    section = re.split(r"^## Module map$", text, maxsplit=1, flags=re.M)
    assert len(section) == 2, "docs/architecture.md has no '## Module map' section"
    body = re.split(r"^## ", section[1], maxsplit=1, flags=re.M)[0]
    component: str | None = None
    for number, line in enumerate(body.splitlines()[1:], 1):
        heading = HEADING.match(line)
        if heading:
            component = heading.group(1)
            continue
        row = ROW.match(line)
        if row is None:
            continue
        assert component is not None, f"a row before any component's heading: {line}"
        for name in re.findall(r"`([^`]+)`", row.group(1)):
            dotted = name.rstrip("/").replace("/", ".")
            found.setdefault(f"herder.{component}.{dotted}", []).append(
                f"map line {number}: {name}")
    return found


def components() -> set[str]:
    """The package's folders of modules (`core` has no `__init__`)."""
    return {path.parent.relative_to(PACKAGE).parts[0] for path in modules()
            if path.parent != PACKAGE}


def expected() -> set[str]:
    """Every module but the package root and the components' own packages."""
    return {module_name(path) for path in modules()} - {"herder"} - \
        {f"herder.{name}" for name in components()}


def components_headed(text: str) -> set[str]:
    return {m.group(1) for line in text.splitlines() if (m := HEADING.match(line))}


def test_the_map_is_read_as_written() -> None:
    sample = "\n".join(["## Module map", "### `masterd`: x", "| module | owns |", "|---|---|",
                        "| `rapi/` | the package |", "| `rapi/base`, `views` | two |",
                        "## Next", "| `other` | not in the map |"])
    assert mapped(sample) == {
        "herder.masterd.rapi": ["map line 4: rapi/"],
        "herder.masterd.rapi.base": ["map line 5: rapi/base"],
        "herder.masterd.views": ["map line 5: views"]}
    assert "herder.masterd.rapi.base" in expected()
    assert "herder.masterd.rapi" in expected() and "herder.masterd" not in expected()


def test_every_module_is_in_the_map_once_and_every_mapped_one_exists() -> None:
    text = DOC.read_text()
    found = mapped(text)
    assert components_headed(text) == components(), "one '### `component`' heading each"
    modules_now = expected()
    missing = sorted(modules_now - set(found))
    assert not missing, "modules missing from docs/architecture.md's module map: " + \
        ", ".join(missing)
    gone = sorted(f"{name} ({', '.join(lines)})" for name, lines in found.items()
                  if name not in modules_now)
    assert not gone, "the module map names modules that do not exist: " + "; ".join(gone)
    twice = sorted(f"{name} ({', '.join(lines)})" for name, lines in found.items()
                   if len(lines) > 1)
    assert not twice, "named more than once in the module map: " + "; ".join(twice)
