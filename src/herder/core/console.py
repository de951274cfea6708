"""Instance consoles: Ganeti's console object, its `--show-cmd` text, and the names the master
and the node daemon share for the console streams (docs/security.md "Consoles").

`instance_console` answers what Ganeti 3.0's `LUInstanceConsole` answers (`cmdlib.
instance_operation.GetInstanceConsole` with the hypervisor's `GetInstanceConsole`, then
`objects.InstanceConsole.ToDict`: only the fields that are set): for KVM with `serial_console`
an `ssh` console (the primary node, its ndparam `ssh_port`, user root, the command to run
there), else `vnc` on `vnc_bind_address`:`network_port` (display = port - 5900), else `spice`,
else a `msg`. herder's command is libvirt's console (`virsh console`, escape Ctrl-] as
Ganeti's socat) instead of Ganeti's kvm-console-wrapper and socat on a unix socket
(docs/compat.md).

The streams (herder's extension): masterd bridges RAPI websockets to the primary node's noded
over HTTPS with the node certificates; the upgrade request carries a node call signed like
every node RPC (`core.rpcauth`) in the `SIGNED_CALL_HEADER` header.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

VNC_BASE_PORT = 5900  # Ganeti's VNC_BASE_PORT: display = port - 5900
SSH_CONSOLE_USER = "root"  # Ganeti's SSH_CONSOLE_USER
KINDS = ("msg", "spice", "ssh", "vnc")  # Ganeti's CONS_ALL
VIRSH = "/usr/bin/virsh"

# The node daemon's console streams: GET <STREAM_PATH> with a websocket upgrade and the signed
# call (method STREAM_METHODS[kind], arguments {"instance": name}) in SIGNED_CALL_HEADER.
STREAM_PATH = "/console/{instance}/{kind}"
STREAM_KINDS = ("serial", "vnc")
STREAM_METHODS = {"serial": "console_serial", "vnc": "console_vnc"}
SIGNED_CALL_HEADER = "X-Herder-Signed-Call"
ERROR_HEADER = "X-Herder-Error"  # why noded refused a stream (one line)

SERIAL_LOG_DIR = Path("/var/log/herder/instances")
LOG_LINES_DEFAULT = 100
LOG_LINES_MAX = 10000


def serial_log(directory: Path, instance: str) -> Path:
    """The node's serial log of an instance: `<directory>/<name>.serial.log` (the name is a
    host name: no slash, never empty)."""
    if not instance or "/" in instance or instance in (".", ".."):
        raise ValueError(f"not an instance name: {instance!r}")
    return directory / f"{instance}.serial.log"


def serial_command(instance: str, libvirt_uri: str) -> list[str]:
    """What the ssh console runs on the primary node: libvirt's console of the domain."""
    return [VIRSH, "-c", libvirt_uri, "console", "--force", instance]


def instance_console(instance: str, hypervisor: str, network_port: int | None,
                     hvparams: Mapping[str, Any], node_name: str,
                     ndparams: Mapping[str, Any]) -> dict[str, Any]:
    """Ganeti's console object (`InstanceConsole.ToDict()`) of a running instance: the
    filled hvparams, the primary node's name and filled ndparams."""
    if hypervisor == "kvm":
        if hvparams.get("serial_console"):
            return {"instance": instance, "kind": "ssh", "host": node_name,
                    "port": ndparams.get("ssh_port"), "user": SSH_CONSOLE_USER,
                    "command": serial_command(instance, str(ndparams.get("libvirt_uri")
                                                            or "qemu:///system"))}
        vnc_bind = hvparams.get("vnc_bind_address")
        if vnc_bind and network_port is not None and network_port > VNC_BASE_PORT:
            return {"instance": instance, "kind": "vnc", "host": vnc_bind,
                    "port": network_port, "display": network_port - VNC_BASE_PORT}
        spice_bind = hvparams.get("spice_bind")
        if spice_bind:
            console = {"instance": instance, "kind": "spice", "host": spice_bind}
            if network_port is not None:
                console["port"] = network_port
            return console
        return {"instance": instance, "kind": "msg",
                "message": f"No serial shell for instance {instance}"}
    if hypervisor == "fake":
        return {"instance": instance, "kind": "msg",
                "message": "Console not available for fake hypervisor"}
    return {"instance": instance, "kind": "msg",
            "message": f"herder runs no console for the {hypervisor} hypervisor"}


def ssh_argv(console: Mapping[str, Any]) -> list[str]:
    """The ssh command of an `ssh` console, with the options of Ganeti's `SshRunner.BuildCmd`
    for a console (batch, a tty, no escape character: the console's own Ctrl-] ends it), but
    the caller's known hosts (herder keeps no cluster-wide known_hosts file)."""
    command = console.get("command")
    remote = command if isinstance(command, str) else shlex.join(list(command or []))
    argv = ["ssh", "-oEscapeChar=none", "-oHashKnownHosts=no", "-oCheckHostIp=no",
            "-oConnectTimeout=10"]
    if console.get("port"):
        argv.append(f"-oPort={int(console['port'])}")
    argv += ["-oBatchMode=yes", "-oStrictHostKeyChecking=yes", "-t", "-t",
             f"{console.get('user')}@{console.get('host')}", remote]
    return argv


def show_command(console: Mapping[str, Any]) -> str:
    """What `gnt-instance console --show-cmd` prints for the console object."""
    kind = console.get("kind")
    name = console.get("instance")
    if kind == "msg":
        return str(console.get("message"))
    if kind == "vnc":
        host, port = console.get("host"), console.get("port")
        return (f"Instance {name} has VNC listening on {host}:{port} (display "
                f"{console.get('display')}), URL <vnc://{host}:{port}/>")
    if kind == "spice":
        return f"Instance {name} has SPICE listening on {console.get('host')}:{console.get('port')}"
    if kind == "ssh":
        return shlex.join(ssh_argv(console))
    raise ValueError(f"unknown console type {kind!r}")
