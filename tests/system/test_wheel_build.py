"""Building the wheel (scripts/wheel.sh, docs/install.md): the version comes from git (tag,
distance, commit), a tree without git metadata gets the fallback version, a version set by the
caller wins, and the build writes nothing into the tree it is run from."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path("scripts") / "wheel.sh"

pytestmark = pytest.mark.slow


def _git(tree: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.test",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.test"}
    return subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True,
                          text=True, env=env, timeout=120).stdout


def _copy_checkout(target: Path, *, with_git: bool) -> Path:
    """This checkout's files as they are now (tracked, and untracked but not ignored), in a
    fresh git repository of one commit (`with_git`) or as a plain tree."""
    names = _git(REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                 "--", "pyproject.toml", "README.md", "src", "scripts").split("\0")
    for name in filter(None, names):
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    if with_git:
        _git(target, "init", "-q")
        _git(target, "add", "-A")
        _git(target, "commit", "-q", "-m", "copy")
    return target


def _everything(tree: Path) -> dict[str, float]:
    """Every path under the tree but .git, with its modification time."""
    return {str(p.relative_to(tree)): p.lstat().st_mtime for p in tree.rglob("*")
            if ".git" not in p.relative_to(tree).parts}


def _build(tree: Path, out: Path, pretend: str | None = None) -> Path:
    env = {k: v for k, v in os.environ.items() if k != "SETUPTOOLS_SCM_PRETEND_VERSION"}
    if pretend is not None:
        env["SETUPTOOLS_SCM_PRETEND_VERSION"] = pretend
    done = subprocess.run(["bash", str(SCRIPT), str(out), sys.executable], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    (wheel,) = out.glob("herder-*.whl")
    assert done.stdout.strip().splitlines()[-1] == str(wheel)
    return wheel


def _wheel_version(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = (n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        meta = archive.read(name).decode()
    (line,) = (ln for ln in meta.splitlines() if ln.startswith("Version: "))
    return line.removeprefix("Version: ")


def test_the_build_writes_nothing_into_the_checkout_and_takes_its_version_from_git(
        tmp_path: Path) -> None:
    tree = _copy_checkout(tmp_path / "checkout", with_git=True)
    status = _git(tree, "status", "--porcelain", "--ignored")
    before = _everything(tree)
    assert status == ""  # a clean copy: anything the build leaves would show
    wheel = _build(tree, tmp_path / "out")
    assert _git(tree, "status", "--porcelain", "--ignored") == status
    assert _everything(tree) == before  # not even an ignored build/ or *.egg-info
    commit = _git(tree, "rev-parse", "--short", "HEAD").strip()
    version = _wheel_version(wheel)
    # no tag in the copy: setuptools-scm's 0.1.devN+g<commit>; the commit names the build
    assert version.startswith("0.1.dev") and f"+g{commit}" in version, version
    # a tag names the release
    _git(tree, "tag", "v2.3.4")
    tagged = _build(tree, tmp_path / "tagged")
    assert _wheel_version(tagged) == "2.3.4"
    assert _git(tree, "status", "--porcelain", "--ignored") == status


def test_a_tree_without_git_gets_the_fallback_or_the_callers_version(tmp_path: Path) -> None:
    tree = _copy_checkout(tmp_path / "plain", with_git=False)
    # a tree in no repository at all (tmp_path is outside any checkout)
    assert subprocess.run(["git", "-C", str(tree), "rev-parse"], capture_output=True,
                          timeout=60).returncode != 0
    before = _everything(tree)
    assert _wheel_version(_build(tree, tmp_path / "fallback")) == "0.0.0+unknown"
    assert _wheel_version(_build(tree, tmp_path / "pretend", "9.8.7")) == "9.8.7"
    assert _everything(tree) == before
