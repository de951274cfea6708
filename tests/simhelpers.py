"""Helpers shared by the tests that run a simulated cluster (`herder.sim.cluster`: every node a
namespaced host): a module-scoped cluster that skips cleanly when it cannot start, the CLI
against it from this machine (its client profile) or on a node (`--exec`), the config through
masterd, libvirt's view of a node, and waiting for a condition."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")
LIBVIRT_URI = "test+unix:///default"
# Variables that would point the CLI elsewhere than the simulated cluster's profile.
FOREIGN = ("HERDER_CONFIG", "HERDER_OFFLINE", "HERDER_MASTERD", "HERDER_CLIENT",
           "HERDER_RAPI_CA", "HERDER_RAPI_USER", "HERDER_RAPI_PASSWORD_FILE")


def screenshots() -> Path:
    """Where the browser tests put their screenshots: `$HERDER_SCREENSHOTS` when set (e.g.
    `HERDER_SCREENSHOTS=$PWD/docs/screenshots` to refresh the README's), else a directory of
    this machine's temporary files: a test run leaves the checkout as it found it."""
    chosen = os.environ.get("HERDER_SCREENSHOTS")
    directory = Path(chosen) if chosen else Path(tempfile.gettempdir()) / "herder-screenshots"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def cannot_simulate() -> str | None:
    """Why a simulated cluster cannot run here (None: it can)."""
    if not Path("/usr/sbin/libvirtd").exists():
        return "libvirtd is not installed"
    from herder.sim.host import unsupported

    return unsupported()


def running_sim(directory: Path, nodes: int = 3, **kw: Any) -> Iterator[Any]:
    """Body of a sim fixture: start the cluster, yield its state, always stop it. It skips
    only when this machine cannot simulate at all (`cannot_simulate`); a failure of herder's
    own start-up is the test's error. Without `guests`: libvirt's test driver (fast; a test
    of real guests says `guests="qemu"`)."""
    from herder.sim import cluster

    kw.setdefault("guests", "test")

    reason = cannot_simulate()
    if reason:
        pytest.skip(reason)
    try:
        state = cluster.start(directory, nodes, **kw)
    except BaseException:
        cluster.stop(directory)
        raise
    try:
        yield state
    finally:
        cluster.stop(directory)


def client_env(state: Any) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN}
    env.update(state.client_environment())
    return env


def herder(state: Any, *args: str, check: bool = True,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the herder CLI against the simulated cluster from this machine (the operator's
    workstation: its client profile, no config file)."""
    done = subprocess.run([sys.executable, "-m", "herder.cli.main", *args], env=client_env(state),
                          capture_output=True, text=True, timeout=timeout, cwd="/")
    if check:
        assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}" + (
            masterd_logs(state) if "cannot reach RAPI" in done.stderr else "")
    return done


def masterd_logs(state: Any, lines: int = 40) -> str:
    """The end of every node's masterd log (what a failure that lost masterd shows)."""
    found = []
    for node in getattr(state, "nodes", ()):
        try:
            log = state.host(node.name).path("/var/log/herder/masterd.log")
            tail = log.read_text(errors="replace").splitlines()[-lines:]
        except (OSError, AttributeError):
            continue
        found.append(f"--- {node.name} masterd.log (last {len(tail)} lines)\n" + "\n".join(tail))
    return "\n" + "\n".join(found) if found else ""


def daemon_log(state: Any, node: str, daemon: str) -> str:
    """A herder daemon's log on a node, oldest line first: its log file on a namespace host,
    its unit's journal on a Debian host (flushed first: a line just logged is in it; "" while
    the host is off or booting, as a log file not yet written)."""
    from herder.core.errors import HerderError

    host = state.host(node)
    if getattr(host, "debian", False):
        try:
            done = host.run(["sh", "-c", "journalctl --sync; journalctl -q --no-pager -o cat "
                                         f"-u herder-{daemon}.service"], timeout=60)
        except HerderError:  # not running (powered off, or its systemd not started yet)
            return ""
        return str(done.stdout) if done.returncode == 0 else ""
    try:
        return str(host.path(f"/var/log/herder/{daemon}.log").read_text(errors="replace"))
    except OSError:
        return ""


def on(state: Any, node: str, *args: str, check: bool = True,
       timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run `herder ARGS` on a node (as `simulate --exec NODE -- herder ARGS` does)."""
    done = state.host(node).herder(*args, timeout=timeout)
    if check:
        assert done.returncode == 0, f"{node}: {args}: {done.stdout}\n{done.stderr}"
    return done


def config(state: Any) -> Any:
    """The cluster config as masterd holds it (through RAPI, as the CLI reads it here)."""
    import json

    from herder.core import model

    with state.rapi() as api:
        return model.decode(json.dumps(api.request("GET", "/2/herder/config")))


def domains(state: Any, node: str) -> dict[str, bool]:
    """Domain name -> active, as the node's libvirt sees it (virsh on the node)."""
    uri = getattr(state, "libvirt_uri", LIBVIRT_URI)
    done = state.host(node).run(["virsh", "-q", "-c", uri, "list", "--all"], timeout=60)
    assert done.returncode == 0, done.stderr
    found = {}
    for line in done.stdout.splitlines():
        parts = line.split(None, 2)
        if len(parts) >= 3:
            found[parts[1]] = parts[2].strip() == "running"
    return found


def where(state: Any, name: str) -> list[str]:
    """The nodes on which domain `name` runs."""
    return [n.name for n in state.nodes if domains(state, n.name).get(name)]


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


def reset_node(state: Any, node: str) -> str:
    """A removed node reset by its operator (its cluster secrets and ssconf go; noded makes a
    new join token): its join token."""
    from herder.sim import cluster

    data = "/var/lib/herder"
    host = state.host(node)
    on(state, node, "daemon-util", "stop", "noded")
    done = host.run(["sh", "-c", f"rm -f {data}/hmac.key {data}/node.pem {data}/server.pem "
                                 f"{data}/ssconf_* {data}/rapi_users"], timeout=30)
    assert done.returncode == 0, done.stderr
    cluster.start_daemons(host, ["noded"])
    return on(state, node, "node", "join-token").stdout.strip()
