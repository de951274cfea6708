"""Fatal errors of a daemon leave a Python traceback (`faulthandler`).

A daemon killed by SIGSEGV, SIGFPE, SIGABRT, SIGBUS or SIGILL otherwise dies without a word:
its log ends and the supervisor restarts it (issue 29: a masterd died so right after an etcd
takeover, and nothing said where). With `faulthandler` on, the dying process writes the
traceback of every thread to its stderr first, which is its log under `herder supervise` (the
supervisor sends a daemon's stdout and stderr to its log file) and systemd's journal (noded's
go to its `--log-file` when it is given: where its log is). SIGUSR2 dumps the same tracebacks
of a living daemon (one whose threads hang, say) without stopping it, as soon as its main
thread runs Python again; no herder daemon uses SIGUSR2 otherwise.

Every daemon command calls `enable` first thing, before any of its threads starts.
"""

from __future__ import annotations

import contextlib
import faulthandler
import signal
import sys
from pathlib import Path
from typing import IO, Any

DUMP_SIGNAL = signal.SIGUSR2
# the open files the tracebacks are written to: faulthandler keeps only their descriptors, so
# the file objects must stay alive as long as the process
_kept: list[IO[Any]] = []


def enable(log_file: Path | None = None) -> bool:
    """Tracebacks of all threads on a fatal signal (and on SIGUSR2) to stderr, or to
    `log_file` when given (appended); whether it is on. A daemon without a usable stderr (closed,
    or not a file) and no log file runs on without it."""
    target: Any = sys.stderr
    if log_file is not None:
        try:
            target = open(log_file, "a", buffering=1)  # noqa: SIM115 (kept open: see _kept)
        except OSError:
            target = sys.stderr
        else:
            _kept.append(target)
    try:
        faulthandler.enable(file=target, all_threads=True)
    except (AttributeError, ValueError, OSError, RuntimeError):  # no usable file descriptor
        return False
    with contextlib.suppress(AttributeError, ValueError, OSError, RuntimeError):
        # a Python-level handler, not faulthandler.register: the dump then runs in the main
        # thread holding the GIL, where every other thread's frames hold still; register()'s
        # C handler reads them from inside the signal while they change, and crashed a mond
        # with SIGSEGV in a test (a diagnostic must never kill the daemon it looks at)
        signal.signal(DUMP_SIGNAL, lambda _signum, _frame: faulthandler.dump_traceback(
            file=target, all_threads=True))
    return True
