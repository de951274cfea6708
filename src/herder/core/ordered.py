"""Markers for domain operations herder itself orders, so that instmon does not report the
stops they cause as failures.

Before noded shuts down, reboots, destroys or removes a domain (a shutdown job, a migration's
source side, a failover, an instance removal) it writes `<run_dir>/instmon-ordered/<domain>`
(`{"op": ..., "until": epoch}`); when the operation ends the marker is cut to a short grace
(libvirt delivers its events asynchronously, a few milliseconds later); when noded starts the
domain again the marker is removed. Only lifecycle events are matched against markers: an I/O
error or a watchdog is never herder's doing. instmon drops events
of a domain while its marker is valid and says so in its state. Both daemons run on the same
node with the same `--run-dir`.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

from herder.core import paths
from herder.core.store import atomic_write

DIRECTORY = "instmon-ordered"
GRACE = 5.0  # seconds a marker stays valid after the operation ended


def _path(run_dir: Path, domain: str) -> Path:
    return paths.child(Path(run_dir) / DIRECTORY, domain, what="domain name")


def mark(run_dir: Path, domain: str, op: str, seconds: float) -> None:
    path = _path(run_dir, domain)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps({"op": op, "until": time.time() + seconds}).encode(), 0o644)


def clear(run_dir: Path, domain: str) -> None:
    """The domain runs here again: earlier orders to stop it are over."""
    with contextlib.suppress(OSError, ValueError):  # ValueError: a name no marker can have
        _path(run_dir, domain).unlink()


def ordered(run_dir: Path, domain: str, now: float | None = None) -> str | None:
    """The operation herder ordered on `domain`, while its marker is valid; else None."""
    try:
        data = json.loads(_path(run_dir, domain).read_bytes())
    except (OSError, ValueError):
        return None
    now = time.time() if now is None else now
    if not isinstance(data, dict) or float(data.get("until", 0)) < now:
        return None
    return str(data.get("op") or "ordered")


@contextlib.contextmanager
def expect(run_dir: Path, domain: str, op: str, timeout: float) -> Iterator[None]:
    """Mark `domain` for the duration of an operation (at most `timeout` + GRACE seconds),
    then for GRACE seconds more."""
    with contextlib.suppress(OSError):
        mark(run_dir, domain, op, timeout + GRACE)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            mark(run_dir, domain, op, GRACE)
