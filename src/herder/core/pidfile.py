"""`<run_dir>/<daemon>.pid` for the daemons that mond's daemon collectors look for."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from herder.core.store import atomic_write

log = logging.getLogger("herder.pidfile")

DEFAULT_RUN_DIR = Path("/run/herder")


@contextlib.contextmanager
def pid_file(run_dir: Path, daemon: str) -> Iterator[Path | None]:
    """Write this process's pid while the block runs; remove it after, unless another process
    has taken it over meanwhile. A run directory that cannot be written only logs a warning
    (the collectors still find the daemon by its command line)."""
    path = run_dir / f"{daemon}.pid"
    mine = f"{os.getpid()}\n"
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(path, mine.encode(), 0o644)
    except OSError as err:
        log.warning("cannot write pid file %s: %s", path, err)
        yield None
        return
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            if path.read_text() == mine:
                path.unlink()
