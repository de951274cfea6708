"""`herder daemon-util switch-version` (herder.supervise.versions): `current` moves to the
other build first, then the daemons that ran restart one at a time; masterd's stop alone is
asked to keep the master lease (etcd: the next masterd of the node holds it, docs/ha.md)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from herder.core import supervise_control
from herder.core.errors import HerderError
from herder.core.install_layout import KEEP_LEASE, Layout
from herder.supervise import versions


class Recording:
    """A backend whose daemons `running` run; what each stop and start saw."""

    name = "recording"

    def __init__(self, layout: Layout, run_dir: Path, running: set[str]) -> None:
        self.layout, self.run_dir, self.running = layout, run_dir, running
        self.calls: list[tuple[str, str, str | None, bool]] = []

    def _record(self, verb: str, daemons: Sequence[str]) -> None:
        for daemon in daemons:
            self.calls.append((verb, daemon, self.layout.current_version(),
                               (self.run_dir / KEEP_LEASE).exists()))

    def start(self, daemons: Sequence[str]) -> None:
        self._record("start", daemons)

    def stop(self, daemons: Sequence[str]) -> None:
        self._record("stop", daemons)

    def state(self, daemon: str) -> str:
        return supervise_control.RUNNING if daemon in self.running else "stopped"


def install(prefix: Path, *builds: str) -> Layout:
    for build in builds:
        program = prefix / "versions" / build / "bin" / "herder"
        program.parent.mkdir(parents=True)
        program.write_text("#!/bin/sh\n")
        program.chmod(0o755)
    layout = Layout(prefix)
    layout.switch(builds[0])
    return layout


def test_switch_moves_current_then_restarts_each_daemon_masterd_keeping_its_lease(
        tmp_path: Path) -> None:
    layout = install(tmp_path / "opt", "1.0", "1.1")
    run_dir = tmp_path / "run"
    backend = Recording(layout, run_dir, {"noded", "masterd", "mond"})
    said: list[str] = []
    restarted = versions.switch_version("1.1", layout, backend, say=said.append,
                                        run_dir=run_dir)
    assert set(restarted) == {"noded", "masterd", "mond"}
    assert layout.current_version() == "1.1"
    # each daemon stopped and started again in turn, on the new link; the keep request only
    # while masterd stops
    expected = []
    for daemon in restarted:
        expected += [("stop", daemon, "1.1", daemon == "masterd"),
                     ("start", daemon, "1.1", False)]
    assert backend.calls == expected
    assert not (run_dir / KEEP_LEASE).exists()
    assert said[0].endswith("-> versions/1.1 (was 1.0)")


def test_a_build_that_is_not_installed_changes_nothing(tmp_path: Path) -> None:
    layout = install(tmp_path / "opt", "1.0")
    backend = Recording(layout, tmp_path / "run", {"noded", "masterd"})
    with pytest.raises(HerderError, match="herder 2.0 is not installed here"):
        versions.switch_version("2.0", layout, backend, run_dir=tmp_path / "run")
    assert layout.current_version() == "1.0" and backend.calls == []
