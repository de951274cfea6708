"""Builds side by side (core.install_layout): which build a prefix runs, the switch of its
`current` link, the prefix found from a venv's location, versions that are not one path
component refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from herder.core import install_layout
from herder.core.errors import HerderError
from herder.core.rpcdefs import upgrade_calls


def install(prefix: Path, version: str) -> None:
    """A stand-in build: what `installed` looks for, an executable bin/herder."""
    bin_dir = prefix / "versions" / version / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "herder").write_text(f"#!/bin/sh\necho {version}\n")
    (bin_dir / "herder").chmod(0o755)


def test_switch_moves_current_and_bin_follows(tmp_path: Path) -> None:
    layout = install_layout.Layout(tmp_path)
    install(tmp_path, "1.0.0")
    install(tmp_path, "1.1.0+g5de7b10")
    assert layout.current_version() is None
    layout.switch("1.0.0")
    os.symlink("current/bin", tmp_path / "bin")  # the guide's link, made once
    assert layout.current_version() == "1.0.0"
    run = [str(tmp_path / "bin" / "herder")]
    assert subprocess.run(run, capture_output=True, text=True).stdout == "1.0.0\n"
    layout.switch("1.1.0+g5de7b10")
    assert os.readlink(tmp_path / "current") == "versions/1.1.0+g5de7b10"
    assert subprocess.run(run, capture_output=True, text=True).stdout == "1.1.0+g5de7b10\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "current", "versions"]


def test_a_build_that_is_not_installed_is_refused_and_current_stays(tmp_path: Path) -> None:
    layout = install_layout.Layout(tmp_path)
    install(tmp_path, "1.0.0")
    layout.switch("1.0.0")
    (tmp_path / "versions" / "1.2.0").mkdir()  # a directory without a runnable herder
    assert not layout.installed("1.2.0") and not layout.installed("1.3.0")
    for missing in ("1.2.0", "1.3.0"):
        with pytest.raises(HerderError, match=f"herder {missing} is not installed here"):
            layout.switch(missing)
    assert layout.current_version() == "1.0.0"


@pytest.mark.parametrize("bad", ["../1.0", "1.0/..", "a/b", "", ".hidden", "1.0 0", "x" * 101])
def test_versions_are_one_path_component(bad: str) -> None:
    with pytest.raises(HerderError, match="is not a herder version"):
        install_layout.check_version(bad)
    with pytest.raises(ValueError, match="invalid herder version"):
        upgrade_calls.UpgradeSwitch(version=bad)


def test_the_prefix_is_found_from_the_venv_a_herder_runs_in(tmp_path: Path) -> None:
    assert install_layout.running_layout(tmp_path) == install_layout.Layout(tmp_path)
    venv = tmp_path / "versions" / "2.0.0"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    src = Path(install_layout.__file__).resolve().parents[2]
    probe = ("from herder.core.install_layout import running_layout; r = running_layout(); "
             "print(r.prefix if r else None)")
    done = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(src)})
    assert done.stdout.strip() == str(tmp_path), done.stderr
    # this test's own interpreter runs from no versioned install
    assert install_layout.running_layout() is None
