"""The Debian hosts' wheelhouse (herder.sim.debhost.build_wheelhouse): herder's wheel built from
this checkout without writing into it, with every dependency its metadata requires, so pip in a
host without a package index installs it (`PIP_NO_INDEX`, the wheelhouse as `--find-links`)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from herder.sim import debhost

REPO = Path(__file__).resolve().parents[2]


def _untracked_and_ignored() -> set[str]:
    done = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--ignored",
                           "--untracked-files=all", "--", "src", "pyproject.toml", "build",
                           "dist"], capture_output=True, text=True, check=True, timeout=120)
    return {line for line in done.stdout.splitlines() if "__pycache__" not in line}


def test_wheelhouse_installs_offline_and_leaves_the_checkout_alone(tmp_path: Path) -> None:
    before = _untracked_and_ignored()
    wheels = debhost.build_wheelhouse(tmp_path)
    assert _untracked_and_ignored() == before  # no build/, no *.egg-info, no dist/
    (wheel,) = wheels.glob("herder-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert "herder/sim/debhost.py" in archive.namelist()  # this checkout's code
    assert not (tmp_path / "wheel-build").exists()
    # pip resolves the wheel and all it requires from the wheelhouse alone
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index",
                           "--ignore-installed", "--find-links", str(wheels), "-q",
                           "--report", str(tmp_path / "report.json"), str(wheel)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    # a second simulation in the same directory reuses it
    assert debhost.build_wheelhouse(tmp_path) == wheels
