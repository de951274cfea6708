"""What a node is told about an instance to define, run or install it (the `instance` argument of
the instance and migration calls): built from the config on the master (`instance_payload`),
checked at the node's door. Its disks are Ganeti's disk objects for the receiving node
(`core.diskobjects`)."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from herder.core import diskobjects, model, names, paths
from herder.core.rpcdefs.base import instance_name


class NicPayload(msgspec.Struct, kw_only=True):
    """One NIC with its filled parameters (mode, link, ...) and its network's variables."""

    mac: str
    ip: str | None = None
    mode: str | None = None
    link: str | None = None
    uuid: str | None = None
    name: str | None = None
    network: str | None = None
    network_env: dict[str, str] = msgspec.field(default_factory=dict)
    vlan: str | None = None

    def __post_init__(self) -> None:
        # the NETWORK_* variables become a routed NIC's hook environment (noded.kvm.ifup)
        for key, value in self.network_env.items():
            if not re.fullmatch(r"NETWORK_[A-Z0-9_]+", key) or "\0" in value:
                raise ValueError(f"NIC {self.mac}: bad network variable {key!r}")


class InstancePayload(msgspec.Struct, kw_only=True):
    """An instance as a node needs it."""

    name: str
    uuid: str
    memory: int
    vcpus: int
    hypervisor: str = "kvm"
    os: str = "none"
    disks: list[diskobjects.Disk] = msgspec.field(default_factory=list)
    nics: list[NicPayload] = msgspec.field(default_factory=list)
    hvparams: dict[str, Any] = msgspec.field(default_factory=dict)
    beparams: dict[str, Any] = msgspec.field(default_factory=dict)
    osparams: dict[str, Any] = msgspec.field(default_factory=dict)
    uid_pool: list[tuple[int, int]] = msgspec.field(default_factory=list)
    network_port: int | None = None  # the console's port (VNC display = port - 5900)
    tags: list[str] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        instance_name(self.name)
        if self.network_port is not None and not 0 < self.network_port < 65536:
            raise ValueError(f"instance {self.name}: network_port out of range")
        paths.check_component(self.uuid, "instance uuid")
        if not 1 <= self.memory <= diskobjects.MAX_DISK_MIB or not 1 <= self.vcpus <= 4096:
            raise ValueError(f"instance {self.name}: memory or vcpus out of range")
        if self.os != "none":
            names.os_name(self.os)
        for key, value in self.osparams.items():
            if not isinstance(value, str | int | float | bool) or "\0" in str(value):
                raise ValueError(f"OS parameter {key!r} must be a plain string")


def network_of(config: model.ConfigData, nic: model.NIC) -> tuple[str | None, dict[str, str]]:
    """A NIC's network for the node: its name and Ganeti's hook variables (Network.HooksDict:
    NETWORK_NAME, _UUID, _TAGS, _SUBNET, _GATEWAY, _SUBNET6, _GATEWAY6, _MAC_PREFIX), which a
    routed NIC's ifup passes on. (None, {}) without a network."""
    net = config.networks.get(nic.network) if nic.network else None
    if net is None:
        return None, {}
    env = {"NETWORK_NAME": net.name, "NETWORK_UUID": net.uuid,
           "NETWORK_TAGS": " ".join(net.tags), "NETWORK_SUBNET": net.network}
    for key, value in (("NETWORK_GATEWAY", net.gateway), ("NETWORK_SUBNET6", net.network6),
                       ("NETWORK_GATEWAY6", net.gateway6),
                       ("NETWORK_MAC_PREFIX", net.mac_prefix)):
        if value:
            env[key] = value
    return net.name, env


def nic_payload(config: model.ConfigData, nic: model.NIC,
                group: model.NodeGroup | None) -> NicPayload:
    network, network_env = network_of(config, nic)
    filled = config.filled_nicparams(nic, group)
    return NicPayload(mac=nic.mac, ip=nic.ip, uuid=nic.uuid, name=nic.name, network=network,
                      network_env=network_env, mode=filled.get("mode"),
                      link=filled.get("link"), vlan=filled.get("vlan"))


def instance_payload(config: model.ConfigData, inst: model.Instance,
                     node: model.Node | None = None) -> InstancePayload:
    """What a node needs to define and run an instance; its disks are Ganeti's disk objects
    for `node` (default: the primary; `core.diskobjects`)."""
    be = config.filled_beparams(inst)
    group = config.instance_group(inst)
    return InstancePayload(
        name=inst.name, uuid=inst.uuid, memory=be["maxmem"], vcpus=be["vcpus"],
        hypervisor=inst.hypervisor, os=inst.os,
        disks=diskobjects.disk_objects(config, inst, node.uuid if node else None),
        nics=[nic_payload(config, n, group) for n in inst.nics], tags=list(inst.tags),
        hvparams=config.filled_hvparams(inst), beparams=be,
        osparams=config.filled_osparams(inst),
        uid_pool=[(low, high) for low, high in config.cluster.uid_pool],
        network_port=inst.network_port)
