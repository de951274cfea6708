"""A daemon that dies of a fatal signal leaves the traceback of every thread (core.faults;
issue 29: a masterd's SIGSEGV after an etcd takeover left no trace)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from herder.cli import confd, instmon, maintd, masterd, mond, noded, supervise

CRASH = textwrap.dedent("""
    import ctypes, sys, threading, time
    from pathlib import Path
    from herder.core import faults

    assert faults.enable(Path(sys.argv[1]) if len(sys.argv) > 1 else None)
    threading.Thread(target=time.sleep, args=(60,), name="bystander", daemon=True).start()

    def reads_address_zero():
        ctypes.string_at(0)  # a real segmentation fault, in C

    reads_address_zero()
""")


def test_a_segfault_prints_every_threads_traceback_on_stderr() -> None:
    done = subprocess.run([sys.executable, "-c", CRASH], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == -signal.SIGSEGV
    assert "Fatal Python error: Segmentation fault" in done.stderr
    assert "in reads_address_zero" in done.stderr  # where it crashed
    assert "Current thread 0x" in done.stderr, done.stderr  # the crashing one ...
    assert "\nThread 0x" in done.stderr, done.stderr  # ... and the other one too


def test_with_a_log_file_the_traceback_goes_there(tmp_path: Path) -> None:
    log = tmp_path / "noded.log"
    log.write_text("earlier lines\n")
    done = subprocess.run([sys.executable, "-c", CRASH, str(log)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == -signal.SIGSEGV
    text = log.read_text()
    assert text.startswith("earlier lines\n")  # appended
    assert "Fatal Python error: Segmentation fault" in text and "in reads_address_zero" in text


def test_a_running_daemon_dumps_on_sigusr2_and_leaves_a_trace_when_killed_by_sigsegv(
        tmp_path: Path) -> None:
    """The real `herder mond`: SIGUSR2 dumps its threads and it goes on serving; a SIGSEGV
    (as a crash in C would raise) ends it with the tracebacks in its log (stderr)."""
    env = {**os.environ, "HERDER_CONFIG": str(tmp_path / "absent.json")}
    err = tmp_path / "mond.stderr"
    with open(err, "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "herder.cli.main", "mond", "--bind", "127.0.0.1", "--port",
             "0", "--run-dir", str(tmp_path), "--plugin-dir", str(tmp_path / "plugins")],
            stderr=stderr, env=env)
    try:
        deadline = time.monotonic() + 60
        while "listening on http://127.0.0.1:" not in err.read_text():
            assert proc.poll() is None, err.read_text()
            assert time.monotonic() < deadline, err.read_text()
            time.sleep(0.1)
        proc.send_signal(signal.SIGUSR2)
        while "Current thread" not in err.read_text() and "Thread 0x" not in err.read_text():
            assert time.monotonic() < deadline, err.read_text()
            time.sleep(0.1)
        time.sleep(0.5)
        assert proc.poll() is None  # a dump, not a death
        proc.send_signal(signal.SIGSEGV)
        assert proc.wait(30) == -signal.SIGSEGV
        text = err.read_text()
        assert "Fatal Python error: Segmentation fault" in text
        assert "herder/mond" in text or "herder/core" in text  # its own frames
    finally:
        proc.kill()
        proc.wait(10)


@pytest.mark.parametrize("module", [masterd, noded, maintd, mond, confd, instmon, supervise])
def test_every_daemon_command_enables_it(module: object) -> None:
    """Each daemon's command turns it on (the mond test above shows what it does)."""
    source = Path(str(getattr(module, "__file__", ""))).read_text()
    assert "faults.enable(" in source
