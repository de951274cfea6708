"""The files a simulated host starts with (pure: text from values).

- `/etc/lvm/lvm.conf`: LVM sees only the host's own loop device (its filter) and never asks
  device-mapper for anything (`activation = 0`: no device-mapper on the machines this runs on,
  see docs/real-nodes.md §2), without udev, lvmetad or a devices file.
- `/etc/libvirt/libvirtd.conf`: system mode on the unix sockets only, for root only; no TCP,
  no TLS: what a host has before it has joined a cluster (its node certificate then makes the
  production configuration, `herder.core.libvirtd_conf`, possible). Its qemu.conf is the
  production one (`core.libvirtd_conf.qemu_conf`).
- `/etc/hosts`: the cluster's names, shared by every host.
- `/etc/herder/node.toml`: what the host's supervisor runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence

DEFAULT_STOP_TIMEOUT = 5.0


def lvm_conf(devices: Sequence[str]) -> str:
    """LVM that accepts exactly `devices` (full paths) and never activates anything."""
    accept = ", ".join(f'"a|^{re.escape(d)}$|"' for d in devices)
    pattern = f"[ {accept}{', ' if accept else ''}\"r|.*|\" ]"
    return f"""\
# A simulated herder host: LVM sees only this host's own loop device(s), and works on the
# metadata only (no device-mapper here).
devices {{
    dir = "/dev"
    scan = [ "/dev" ]
    obtain_device_list_from_udev = 0
    external_device_info_source = "none"
    use_devicesfile = 0
    filter = {pattern}
    global_filter = {pattern}
}}
global {{
    activation = 0
    use_lvmlockd = 0
    event_activation = 0
}}
activation {{
    udev_sync = 0
    udev_rules = 0
    monitoring = 0
}}
backup {{
    backup = 1
    archive = 0
}}
"""


def libvirtd_conf() -> str:
    return """\
# A simulated herder host: libvirtd in system mode on its unix sockets (/run/libvirt),
# root only; no TCP or TLS listener (libvirtd runs without --listen).
listen_tls = 0
listen_tcp = 0
unix_sock_group = "root"
unix_sock_ro_perms = "0700"
unix_sock_rw_perms = "0700"
unix_sock_admin_perms = "0700"
auth_unix_ro = "none"
auth_unix_rw = "none"
log_outputs = "3:stderr"
"""


def hosts_file(entries: Iterable[tuple[str, Sequence[str]]]) -> str:
    """/etc/hosts: localhost, then one line per (address, names)."""
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    for address, names in entries:
        if not names:
            continue
        lines.append(f"{address}\t{' '.join(names)}")
    return "\n".join(lines) + "\n"


def node_toml(enabled: Iterable[str] = (), *, args: Mapping[str, Sequence[str]] | None = None,
              commands: Mapping[str, Sequence[str]] | None = None,
              stop_timeout: float = DEFAULT_STOP_TIMEOUT, restart_delay: float = 1.0,
              restart_delay_max: float = 30.0,
              environment: Mapping[str, Mapping[str, str]] | None = None) -> str:
    """A host's /etc/herder/node.toml: `enabled` daemons start with the host; `args` are
    appended to a daemon's command; `commands` gives other programs their command;
    `environment` adds variables to a daemon's environment."""
    args = args or {}
    commands = commands or {}
    environment = environment or {}
    enabled = list(enabled)
    lines = ["[supervise]", f"stop_timeout = {stop_timeout!r}",
             f"restart_delay = {restart_delay!r}", f"restart_delay_max = {restart_delay_max!r}"]
    for name in dict.fromkeys([*enabled, *args, *commands, *environment]):
        lines += ["", f"[daemons.{name}]", f"enabled = {'true' if name in enabled else 'false'}"]
        if name in commands:
            lines.append(f"command = [{', '.join(_toml_string(a) for a in commands[name])}]")
        if name in args:
            lines.append(f"args = [{', '.join(_toml_string(a) for a in args[name])}]")
        if environment.get(name):
            pairs = ", ".join(f"{_toml_string(key)} = {_toml_string(value)}"
                              for key, value in sorted(environment[name].items()))
            lines.append(f"environment = {{ {pairs} }}")
    return "\n".join(lines) + "\n"


def _toml_string(text: str) -> str:
    return json.dumps(text)  # a JSON string is a TOML basic string
