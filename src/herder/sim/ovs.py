"""Open vSwitch on a simulated host, for openvswitch NICs (`mode=openvswitch`).

The machines herder is developed on have no `openvswitch` kernel module, so the bridge uses
Open vSwitch's userspace datapath (`datapath_type=netdev`): ovsdb-server and ovs-vswitchd run
inside the host's namespaces with their database and sockets in its private `/run/openvswitch`
(the default path, where libvirt's `ovs-vsctl` calls look), and the taps libvirt adds to the
bridge are real ports with their VLAN settings in the database. Packets are switched in
userspace; nothing of the machine's own network is touched. A host's power-off ends them with
its PID namespace."""

from __future__ import annotations

import shutil
from typing import Any

RUN = "/run/openvswitch"
SCHEMA = "/usr/share/openvswitch/vswitch.ovsschema"
DAEMONS = ("ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovsdb-tool")


def unavailable() -> str | None:
    """Why Open vSwitch cannot run on the simulated hosts (None: it can)."""
    missing = [name for name in DAEMONS if shutil.which(name) is None]
    if missing:
        return (f"Open vSwitch is not installed ({', '.join(missing)} missing; "
                "scripts/sysdeps.sh installs openvswitch-switch)")
    return None


def start(host: Any, bridges: tuple[str, ...] = ("ovsbr0",), timeout: float = 60.0) -> None:
    """Start Open vSwitch on `host` (a `herder.sim.host.SimHost`) with userspace bridges;
    RuntimeError with the command's words when it cannot."""
    why = unavailable()
    if why:
        raise RuntimeError(why)
    script = " && ".join([
        f"mkdir -p {RUN}",
        f"ovsdb-tool create {RUN}/conf.db {SCHEMA}",
        f"ovsdb-server {RUN}/conf.db --remote=punix:{RUN}/db.sock "
        f"--pidfile={RUN}/ovsdb-server.pid --detach --log-file={RUN}/ovsdb-server.log",
        "ovs-vsctl --timeout=10 --no-wait init",
        f"ovs-vswitchd unix:{RUN}/db.sock --pidfile={RUN}/ovs-vswitchd.pid --detach "
        f"--log-file={RUN}/ovs-vswitchd.log",
        *(f"ovs-vsctl --timeout=10 --may-exist add-br {bridge} -- set bridge {bridge} "
          "datapath_type=netdev" for bridge in bridges),
    ])
    done = host.run(["sh", "-c", script], timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"Open vSwitch did not start on {host.name}: "
                           f"{' '.join((done.stderr or done.stdout).split())[-300:]}")


def port(host: Any, name: str) -> dict[str, str]:
    """An Open vSwitch port's settings on `host` (`tag`, `trunks`, `vlan_mode`, ...; empty
    values as ovs-vsctl prints them) and its bridge (`bridge`); {} when there is no such
    port."""
    bridge = host.run(["ovs-vsctl", "--timeout=10", "port-to-br", name], timeout=30)
    if bridge.returncode != 0:
        return {}
    found = {"bridge": bridge.stdout.strip()}
    for column in ("tag", "trunks", "vlan_mode"):
        value = host.run(["ovs-vsctl", "--timeout=10", "get", "port", name, column],
                         timeout=30)
        found[column] = value.stdout.strip()
    return found
