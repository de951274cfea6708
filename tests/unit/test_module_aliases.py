"""Module aliases are spelled out (docs/architecture.md "Conventions"): `from herder.core import
model`, not `model as M`. Where a module's own name would collide with a local name, the alias
says what the module is (`reason as reason_trail`). Checked on every import in src/, tests/ and
bench/, also inside functions and in code kept in strings (subprocess scripts).
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREES = ("src", "tests", "bench")


def scan(source: str) -> tuple[list[tuple[int, str, str]], list[str]]:
    """One walk over `source` (the check reads every file of the trees: one parse and one walk
    each, not one per question): its cryptic aliases and its embedded sources.

    A cryptic alias, as (line, imported name, alias), is a single character, or a lowercase
    name (a module or function) written in capitals as if it were a constant (`queue as Q`,
    `instances as IN`); the stdlib's own convention `xml.etree.ElementTree as ET` is not one.
    An embedded source is a string constant that parses as Python and imports something (a
    script run with -c)."""
    aliases = []
    embedded = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                short, last = alias.asname, alias.name.rsplit(".", 1)[-1]
                if short and (len(short) == 1 or (short.isupper() and last.islower())):
                    aliases.append((node.lineno, alias.name, short))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and "import " in node.value:
            text = textwrap.dedent(node.value)
            try:
                ast.parse(text)
            except SyntaxError:
                continue
            embedded.append(text)
    return aliases, embedded


def cryptic_aliases(source: str) -> list[tuple[int, str, str]]:
    return scan(source)[0]


def embedded_sources(source: str) -> list[str]:
    return scan(source)[1]


def test_no_cryptic_module_aliases() -> None:
    offenders = []
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            found, embedded = scan(path.read_text())
            # this file's own examples are refused on purpose
            if path == Path(__file__).resolve():
                embedded = []
            for text in embedded:
                found += cryptic_aliases(text)
            offenders += [f"{path.relative_to(ROOT)}:{line}: {name} as {short}"
                          for line, name, short in found]
    assert not offenders, "spell module aliases out:\n" + "\n".join(offenders)


def test_the_check_finds_what_it_refuses() -> None:
    source = (
        "from herder.core import model as M\n"
        "import herder.masterd.locking as L\n"
        "def f():\n"
        "    from herder.masterd.jobs import queue as Q\n"
        "    from herder.maintd import instances as IN\n"
        "from herder.core import reason as reason_trail\n"
        "import xml.etree.ElementTree as ET\n"
        "from herder.core import params\n"
    )
    assert [(name, short) for _, name, short in cryptic_aliases(source)] == [
        ("model", "M"), ("herder.masterd.locking", "L"), ("queue", "Q"), ("instances", "IN")]
    script = 'WRITER = """\n    import sys\n    from herder.core import etcd as E\n"""\n'
    assert [short for text in embedded_sources(script)
            for _, _, short in cryptic_aliases(text)] == ["E"]
