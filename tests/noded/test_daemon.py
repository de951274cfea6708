"""noded's start-up helpers: memory locking and logging that survives a broken disk."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

from herder.noded.daemon import FallbackFileHandler


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord("herder.noded", logging.ERROR, __file__, 1, message, None, None)


def test_logs_go_to_the_file_when_it_can_be_written(tmp_path: Path) -> None:
    log = tmp_path / "noded.log"
    handler = FallbackFileHandler(log, console=str(tmp_path / "console"))
    handler.emit(_record("all fine"))
    assert "all fine" in log.read_text()
    assert not (tmp_path / "console").exists()


def test_logs_fall_back_to_the_console_when_the_file_cannot_be_written(tmp_path: Path) -> None:
    broken = tmp_path / "no-such-dir" / "noded.log"  # as good as a dead disk
    console = tmp_path / "console"
    handler = FallbackFileHandler(broken, console=str(console))
    handler.emit(_record("disk is gone"))
    assert "disk is gone" in console.read_text()


def test_mlockall_locks_memory_in_a_fresh_process() -> None:
    if os.geteuid() != 0:
        import pytest

        pytest.skip("mlockall of all memory needs root (RLIMIT_MEMLOCK)")
    code = ("from herder.noded.daemon import lock_memory; from herder.noded.rpc.node import "
            "vm_locked_kb; ok = lock_memory(); print(ok, vm_locked_kb())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    assert out[0] == "True" and int(out[1]) > 0
