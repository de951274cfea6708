"""The paths under herder's install prefix that the docs name are ones the install creates
(issue 34 item 9: docs/ganeti.md named `/opt/herder/.venv/bin/python`, which no install
makes): docs/install.md's layout at /opt/herder (a virtualenv per build under
`versions/<version>`, `current` and `bin` links: core.install_layout) gives `bin/` with the
console scripts of pyproject.toml and the venv's python; the iallocator script docs/ganeti.md
shows is the one `herder alloc install` writes for that interpreter."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from herder.cli.alloc import iallocator_script
from herder.core.install_layout import VERSIONS, valid_version

REPO = Path(__file__).resolve().parents[2]
PREFIX = "/opt/herder"


def installed_paths() -> set[str]:
    """What `python3 -m venv /opt/herder/versions/V`, `pip install herder.whl` and the
    `current` and `bin` links make (bin/ reached through them)."""
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    names = {*scripts, "python", "python3", "pip", "pip3", "activate"}
    return {PREFIX, f"{PREFIX}/bin", f"{PREFIX}/current", f"{PREFIX}/{VERSIONS}",
            *(f"{PREFIX}/bin/{name}" for name in names)}


def installed(path: str) -> bool:
    """One of `installed_paths`, or a build's venv `/opt/herder/versions/<version>` (a version
    as core.install_layout takes it) or a file of its bin/."""
    if path in installed_paths():
        return True
    inside = path.removeprefix(f"{PREFIX}/{VERSIONS}/").split("/")
    if path == inside[0] or not valid_version(inside[0]):
        return False
    return len(inside) == 1 or f"{PREFIX}/{'/'.join(inside[1:])}" in installed_paths()


def test_every_prefix_path_in_the_docs_is_installed() -> None:
    named = {}
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for match in re.finditer(r"/opt/herder[\w./-]*", doc.read_text()):
            named.setdefault(match.group(0).rstrip(".").rstrip("/"), doc.name)
    assert named, "the docs name no path under /opt/herder"
    assert {path: doc for path, doc in named.items() if not installed(path)} == {}
    assert not installed(f"{PREFIX}/versions/../etc") and not installed(f"{PREFIX}/.venv")


def test_the_iallocator_script_shown_is_the_one_written() -> None:
    text = (REPO / "docs" / "ganeti.md").read_text()
    script = iallocator_script(f"{PREFIX}/bin/python")
    command = script.splitlines()[-1]
    assert f"    #!/bin/sh\n    {command}\n" in text
