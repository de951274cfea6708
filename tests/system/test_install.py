"""An install that starts (docs/install.md): the wheel built from this tree, installed into a
fresh venv at <root>/opt/herder, holds every file of src/herder (package data included, scripts
executable), and `herder` and each daemon start from it, without this tree on the path."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest

from herder.supervise.settings import HERDER_DAEMONS

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "src" / "herder"
PREFIX = "opt/herder"  # under the test's root: docs/install.md's /opt/herder

pytestmark = pytest.mark.slow


def build_backend_pin() -> str:
    """`setuptools==X`: what pyproject.toml's [build-system] requires."""
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    (pin,) = (r for r in requires if r.startswith("setuptools=="))
    return str(pin)


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    package: Path  # the installed `herder` package directory
    env: dict[str, str]


def _copy_source(target: Path) -> Path:
    """What the wheel is built from (pyproject.toml, README.md, src), away from this tree so the
    build writes nothing into it."""
    target.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, target / name)
    shutil.copytree(REPO / "src", target / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc"))
    return target


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    pin = build_backend_pin()
    have = metadata.version("setuptools")
    if f"setuptools=={have}" != pin:
        pytest.skip(f"the build backend {pin} is not installed here (setuptools {have}); "
                    "the dev extras pin it")
    base = tmp_path_factory.mktemp("install")
    source = _copy_source(base / "source")
    dist = base / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--no-index", "-q", "-w", str(dist), str(source)],
                   check=True, capture_output=True, text=True, timeout=300)
    (wheel,) = dist.glob("herder-*.whl")
    venv = base / "root" / PREFIX
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True, text=True, timeout=300)
    # The dependencies: those of this test's environment (fetching them from the registry is
    # pip's business, not this test's). A path line adds the directory only: its .pth files
    # (this tree's editable install among them) are not read.
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig."
                                "get_paths()['purelib'])"], check=True, capture_output=True,
                               text=True, timeout=60).stdout.strip())
    ours = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    (site / "zz_test_dependencies.pth").write_text("".join(f"{p}\n" for p in ours))
    env = {"PATH": f"{venv / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
           "HOME": str(base)}  # no PYTHONPATH: nothing of this tree
    return Installed(wheel, venv, site / "herder", env)


def run(installed: Installed, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), env=installed.env, cwd=installed.venv, capture_output=True,
                          text=True, timeout=120)


def test_herder_is_on_the_venvs_path_and_runs_the_installed_code(installed: Installed) -> None:
    assert shutil.which("herder", path=installed.env["PATH"]) == str(
        installed.venv / "bin" / "herder")
    done = run(installed, "herder", "--help")
    assert done.returncode == 0, done.stderr
    assert "herder watches, heals and places virtual machines" in done.stdout
    where = run(installed, "python", "-c", "import herder; print(herder.__file__)")
    assert where.stdout.strip() == str(installed.package / "__init__.py"), where.stderr


def test_herder_says_the_version_of_the_build_it_was_installed_from(
        installed: Installed) -> None:
    """The build's version (here a copy without git metadata: setuptools-scm's fallback),
    from the install's own metadata, not from the test environment's editable herder that the
    path line also reaches."""
    wheel_version = installed.wheel.name.split("-")[1]
    assert wheel_version == "0.0.0+unknown"
    done = run(installed, "herder", "--version")
    assert done.stdout.strip() == f"herder, version {wheel_version}", done.stderr


@pytest.mark.parametrize("daemon", [*HERDER_DAEMONS, "supervise", "daemon-util"])
def test_each_daemon_starts_from_the_install(installed: Installed, daemon: str) -> None:
    done = run(installed, "herder", daemon, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"Usage: herder {daemon} ")


def test_every_file_of_the_package_is_installed(installed: Installed) -> None:
    def files(top: Path) -> dict[str, bool]:
        """Relative path -> executable, for every file but compiled bytecode."""
        return {str(path.relative_to(top)): bool(path.stat().st_mode & stat.S_IXUSR)
                for path in top.rglob("*")
                if path.is_file() and "__pycache__" not in path.parts}

    source = files(SOURCE)
    assert [name for name in source if not name.endswith(".py")], "no package data left?"
    missing = sorted(set(source) - set(files(installed.package)))
    assert not missing, ("not in the wheel (add them to [tool.setuptools.package-data] in "
                         f"pyproject.toml): {missing}")
    assert files(installed.package) == source  # same files, same executable bits
    provider = installed.package / "sim" / "extstorage" / "sharedimg"
    assert os.access(provider / "create", os.X_OK)


def test_the_units_command_is_what_the_install_made(installed: Installed) -> None:
    """contrib/systemd's ExecStart=/opt/herder/bin/herder is the venv's console script."""
    script = installed.venv / "bin" / "herder"
    assert script.is_file() and os.access(script, os.X_OK)
    for unit in (REPO / "contrib" / "systemd").glob("herder-*.service"):
        assert f"ExecStart=/{PREFIX}/bin/herder " in unit.read_text()
