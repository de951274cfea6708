"""The node's Ceph client: which cephx user the `rbd` tool runs as, the monitors and the user's
key, as a QEMU that opens an rbd image itself (userspace access) needs them.

They come from where the operator put them for the `rbd` tool (Ganeti's rbd disks use the tool
with its defaults): the configuration (`CEPH_CONF`, else /etc/ceph/ceph.conf), the user from
`CEPH_ARGS` (`--id NAME`, `--user NAME`, `--name client.NAME`, `-n client.NAME`; without one
`client.admin`, the tool's default), its key from the configuration's `key` or its keyring
files (`ceph-conf` expands the search list). The pure parsers are separate from the lookups.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from herder.noded.bdev.base import BlockDevError, Host

DEFAULT_ENTITY = "client.admin"
# one address: an optional protocol, a host (an IPv6 one in brackets), a port, a nonce
_MON_ADDRESS = re.compile(r"(?:(v[12]):)?(\[[0-9a-fA-F:.]+\]|[^\s,;\[\]:/]+)(?::(\d+))?(?:/\d+)?")


@dataclass(frozen=True)
class CephClient:
    entity: str  # client.NAME
    fsid: str
    monitors: tuple[tuple[str, int | None], ...]  # (host, port) per monitor
    key: str  # the cephx secret, base64

    @property
    def user(self) -> str:
        """The name libvirt's <auth username> takes (without `client.`)."""
        return self.entity.removeprefix("client.")


def entity_from_ceph_args(ceph_args: str) -> str:
    """The cephx entity `CEPH_ARGS` selects (the rbd tool's parsing), else client.admin."""
    words = shlex.split(ceph_args)
    entity = DEFAULT_ENTITY
    for index, word in enumerate(words):
        option, equals, value = word.partition("=")
        if not equals:
            value = words[index + 1] if index + 1 < len(words) else ""
        if option in ("--id", "--user", "-i") and value:
            entity = f"client.{value}"
        elif option in ("--name", "-n") and value:
            entity = value if "." in value else f"client.{value}"
    return entity


def parse_mon_host(value: str) -> tuple[tuple[str, int | None], ...]:
    """`mon host` as Ceph spells it (`[v2:A:3300,v1:A:6789],[v2:B...]`, `A:6789,B`, `A B`,
    `[::1]:6789`) -> one (host, port) per monitor: its msgr1 port where it names one (every
    client speaks it), else the only port given, else None (the client's default)."""
    monitors: dict[str, int | None] = {}
    for match in _MON_ADDRESS.finditer(value):
        kind, host, port_text = match.group(1), match.group(2).strip("[]"), match.group(3)
        port = int(port_text) if port_text else None
        if host not in monitors or kind == "v1" or monitors[host] is None:
            monitors[host] = port
    if not monitors and value.strip():
        raise BlockDevError(f"cannot read the Ceph monitor addresses {value.strip()!r}")
    return tuple(monitors.items())


def parse_keyring(text: str, entity: str) -> str | None:
    """The `key` of `[entity]` in a keyring file's text."""
    section = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
        elif section == entity and "=" in line:
            name, _, value = line.partition("=")
            if name.strip() == "key":
                return value.strip()
    return None


def _environment(host: Host) -> dict[str, str]:
    """The environment the node's commands run with (the runner's additions on top)."""
    return {**os.environ, **getattr(host.runner, "extra_env", {})}


def _config_value(host: Host, entity: str, option: str) -> str:
    result = host.run(["ceph-conf", "--name", entity, "--show-config-value", option])
    if result.failed:
        raise BlockDevError(f"the node's Ceph configuration has no usable {option}: "
                            f"{result.last_lines()}")
    return result.stdout.strip()


def load(host: Host) -> CephClient:
    """The node's client: its configuration read through `ceph-conf` (the tool's own search
    path and expansions), its key from `key` or the first keyring file that holds it."""
    entity = entity_from_ceph_args(_environment(host).get("CEPH_ARGS", ""))
    monitors = parse_mon_host(_config_value(host, entity, "mon_host"))
    if not monitors:
        raise BlockDevError("the node's Ceph configuration names no monitor (mon host)")
    fsid = _config_value(host, entity, "fsid")
    key = _config_value(host, entity, "key") or None
    searched = []
    if key is None:
        for name in _config_value(host, entity, "keyring").split(","):
            path = Path(name.strip())
            searched.append(str(path))
            try:
                key = parse_keyring(path.read_text(), entity)
            except OSError:
                continue
            if key:
                break
    if not key:
        raise BlockDevError(f"no cephx key for {entity} on this node (keyrings searched: "
                            f"{', '.join(searched) or 'none'})")
    return CephClient(entity, fsid, monitors, key)
