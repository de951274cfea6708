"""Helpers shared by the tests that run a simulated cluster (`herder.sim.cluster`): a
module-scoped cluster that skips cleanly when it cannot start, the CLI against it, libvirt's view
of a node, and waiting for a condition."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")


def worker_offset(span: int, slots: int) -> int:
    """`span` * (this xdist worker's index modulo `slots`): distinct addresses per worker."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return span * (int(worker.removeprefix("gw") or 0) % slots)


def running_sim(directory: Path, nodes: int = 3, **kw: Any) -> Iterator[Any]:
    """Body of a sim fixture: start the cluster (skip the test when it cannot start here),
    yield its state, always stop it."""
    from herder.sim import cluster

    try:
        state = cluster.start(directory, nodes, **kw)
    except Exception as err:
        cluster.stop(directory)
        pytest.skip(f"cannot start a simulated cluster here: {err}")
    try:
        yield state
    finally:
        cluster.stop(directory)


def herder(state: Any, *args: str, check: bool = True,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the herder CLI against the simulated cluster (through masterd)."""
    env = {k: v for k, v in os.environ.items() if k not in ("HERDER_OFFLINE", "HERDER_MASTERD")}
    env["HERDER_CONFIG"] = state.config
    done = subprocess.run([sys.executable, "-m", "herder.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)
    if check:
        assert done.returncode == 0, f"{args}: {done.stderr}"
    return done


def domains(uri: str) -> dict[str, bool]:
    """Domain name -> active, as the node's libvirt sees it."""
    import libvirt

    conn = libvirt.openReadOnly(uri)
    try:
        return {d.name(): bool(d.isActive()) for d in conn.listAllDomains()}
    finally:
        conn.close()


def wait_for(predicate: Callable[[], T], timeout: float = 90.0, what: str = "",
             interval: float = 0.3) -> T:
    """The predicate's first truthy value; AssertionError with the last value on timeout."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}: {last!r}")
