"""The paths under herder's install prefix that the docs name are ones the install creates
(issue 34 item 9: docs/ganeti.md named `/opt/herder/.venv/bin/python`, which no install
makes): docs/install.md's virtualenv at /opt/herder holds `bin/` with the console scripts of
pyproject.toml and the venv's python; the iallocator script docs/ganeti.md shows is the one
`herder alloc install` writes for that interpreter."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from herder.cli.alloc import iallocator_script

REPO = Path(__file__).resolve().parents[2]
PREFIX = "/opt/herder"


def installed_paths() -> set[str]:
    """What `python3 -m venv /opt/herder` and `pip install herder.whl` make under bin/."""
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    names = {*scripts, "python", "python3", "pip", "pip3", "activate"}
    return {PREFIX, f"{PREFIX}/bin", *(f"{PREFIX}/bin/{name}" for name in names)}


def test_every_prefix_path_in_the_docs_is_installed() -> None:
    named = {}
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for match in re.finditer(r"/opt/herder[\w./-]*", doc.read_text()):
            named.setdefault(match.group(0).rstrip("."), doc.name)
    assert named, "the docs name no path under /opt/herder"
    assert {path: doc for path, doc in named.items() if path not in installed_paths()} == {}


def test_the_iallocator_script_shown_is_the_one_written() -> None:
    text = (REPO / "docs" / "ganeti.md").read_text()
    script = iallocator_script(f"{PREFIX}/bin/python")
    command = script.splitlines()[-1]
    assert f"    #!/bin/sh\n    {command}\n" in text
