"""The Debian hosts' cached root is built atomically and once (herder.sim.debroot.ensure_built):
concurrent builders build it once, a failed or killed build leaves nothing that is used, and the
recipe's hash follows the guide's install script."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import pytest

from herder.sim import debroot


def _slow_build(work: Path) -> None:
    work.mkdir()
    # every build leaves its mark in the shared directory: the test counts them
    with open(work.parent / "builds", "a") as builds:
        builds.write(f"{os.getpid()}\n")
    time.sleep(0.5)
    (work / "etc").mkdir()
    (work / "etc" / "os-release").write_text("ID=debian\n")


def _builder(final: str, ready: Any) -> None:  # a multiprocessing Event
    ready.wait()
    debroot.ensure_built(Path(final), _slow_build)


def test_concurrent_builders_build_once(tmp_path: Path) -> None:
    final = tmp_path / "debian-12-x"
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    workers = [ctx.Process(target=_builder, args=(str(final), ready)) for _ in range(3)]
    for worker in workers:
        worker.start()
    ready.set()
    for worker in workers:
        worker.join(30)
        assert worker.exitcode == 0
    assert len((tmp_path / "builds").read_text().split()) == 1
    assert (final / "etc" / "os-release").read_text() == "ID=debian\n"
    assert not list(tmp_path.glob("*.build-*"))


def test_failed_build_leaves_nothing_used(tmp_path: Path) -> None:
    final = tmp_path / "debian-12-x"

    def half(work: Path) -> None:
        (work / "etc").mkdir(parents=True)
        raise RuntimeError("apt failed")

    with pytest.raises(RuntimeError, match="apt failed"):
        debroot.ensure_built(final, half)
    assert not final.exists()
    assert not list(tmp_path.glob("*.build-*"))
    # the next caller builds it
    assert debroot.ensure_built(final, _slow_build) == final
    assert (final / "etc" / "os-release").exists()


def test_killed_build_and_incomplete_root_are_rebuilt(tmp_path: Path) -> None:
    final = tmp_path / "debian-12-x"
    stale = tmp_path / "debian-12-x.build-99999"  # a builder killed mid-way
    (stale / "etc").mkdir(parents=True)
    final.mkdir()  # a tree without the marker is not complete: never used
    debroot.ensure_built(final, _slow_build)
    assert not stale.exists()
    assert (final / "etc" / "os-release").exists()
    assert len((tmp_path / "builds").read_text().split()) == 1
    # complete now: not built again
    debroot.ensure_built(final, _slow_build)
    assert len((tmp_path / "builds").read_text().split()) == 1


def test_recipe_hash_follows_the_install_scripts_package_step(tmp_path: Path) -> None:
    script = tmp_path / "node-install.sh"
    script.write_text(debroot.install_script().read_text())
    same = debroot.recipe_hash(script)
    assert same == debroot.recipe_hash()
    # the per-host steps (after the recipe) are not the root's
    script.write_text(script.read_text() + "\n# one more step\n")
    assert debroot.recipe_hash(script) == same
    # one more package is
    script.write_text(script.read_text().replace("NODE_PKGS=(", "NODE_PKGS=(htop "))
    assert debroot.recipe_hash(script) != same
    assert debroot.root_path(tmp_path, script).name == f"debian-12-{debroot.recipe_hash(script)}"
