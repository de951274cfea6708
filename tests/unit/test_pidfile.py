from __future__ import annotations

import os
from pathlib import Path

from herder.core.pidfile import pid_file


def test_written_while_running_and_removed_after(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with pid_file(run, "maintd") as path:
        assert path == run / "maintd.pid"
        assert int(path.read_text()) == os.getpid()
    assert not (run / "maintd.pid").exists()


def test_a_taken_over_file_is_left_alone(tmp_path: Path) -> None:
    with pid_file(tmp_path, "confd") as path:
        assert path is not None
        path.write_text("1\n")  # another confd took over this run directory
    assert path.read_text() == "1\n"


def test_unwritable_run_dir_only_warns(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pid_file(blocker / "run", "confd") as path:
        assert path is None
