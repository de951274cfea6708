"""Network LUs: add, modify, remove, connect to and disconnect from a node group, as Ganeti
3.0's cmdlib/network.py (LUNetworkAdd, LUNetworkSetParams, LUNetworkRemove, LUNetworkConnect,
LUNetworkDisconnect). A network's IP pool is `core.addrpool`'s, kept in the network's config
entry; the NIC side (addresses taken and given back) is `lu/nics.py`.

Where herder differs (docs/compat.md P1): an address Ganeti would only warn about in
`modify --add-reserved-ips` is a warning here too, but a bad address of `add
--add-reserved-ips` refuses the job before anything is written (Ganeti fails in Exec, after
the checks); a network's size is checked when the job is submitted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from herder.core import addrpool, configdiff, model
from herder.core.errors import OpPrereqError
from herder.masterd import locking
from herder.masterd.jobs import opcodes
from herder.masterd.lu.base import JobResult, LockRequest, LogicalUnit, lookup

Warn = Callable[[str], None]


def new_network(op: opcodes.OpNetworkAdd, config: model.ConfigData, uuid: str,
                warn: Warn, info: Warn) -> model.Network:
    """The network `op` adds, its pool initialized as Ganeti's LUNetworkAdd.Exec does:
    network, broadcast and gateway reserved; with the conflicts check the nodes' and the
    master's addresses inside it; then `add_reserved_ips` (OpPrereqError naming one that
    cannot be)."""
    stamp = model.now()
    net = model.Network(uuid=uuid, name=op.network_name, network=op.network,
                        gateway=op.gateway, network6=op.network6, gateway6=op.gateway6,
                        mac_prefix=op.mac_prefix, tags=list(op.tags), ctime=stamp, mtime=stamp)
    try:
        pool = addrpool.AddressPool.initialized(net.network, net.gateway)
    except addrpool.AddressPoolError as err:
        raise OpPrereqError(f"Cannot create IP address pool for network "
                            f"'{op.network_name}': {err}", "wrong_input") from None
    if op.conflicts_check:
        for node in sorted(config.nodes.values(), key=lambda n: n.name):
            for address in (node.primary_ip, node.secondary_ip):
                _reserve_known(pool, address, f"IP address of node '{node.name}' ({address})",
                               f"IP address '{address}' of node '{node.name}'", warn, info)
        master = config.cluster.master_ip
        _reserve_known(pool, master, f"cluster master IP address ({master})",
                       f"cluster master IP address ({master})", warn, info)
    for address in op.add_reserved_ips or []:
        try:
            pool.reserve(address, external=True)
        except addrpool.AddressPoolError as err:
            raise OpPrereqError(f"Cannot reserve IP address '{address}': {err}",
                                "wrong_input") from None
    net.keep(pool)
    return net


def _reserve_known(pool: addrpool.AddressPool, address: str | None, reserved: str,
                   refused: str, warn: Warn, info: Warn) -> None:
    """Reserve a node's or the master's address when the pool holds it (Ganeti's words)."""
    if not pool.contains(address):
        return
    assert address is not None  # contains() is False for None
    try:
        pool.reserve(address, external=True)
        info(f"Reserved {reserved}")
    except addrpool.AddressPoolError as err:
        warn(f"Cannot reserve {refused}: {err}")


class NetworkAdd(LogicalUnit[opcodes.OpNetworkAdd]):
    REQ_BGL = True  # the network has no lock yet

    def check(self, config: model.ConfigData) -> None:
        if any(n.name == self.op.network_name for n in config.networks.values()):
            existing = config.find_network(self.op.network_name).uuid
            raise OpPrereqError(f"Desired network name '{self.op.network_name}' already exists"
                                f" as a network (UUID: {existing})", "already_exists")
        new_network(self.op, config, "check", lambda message: None, lambda message: None)

    def execute(self) -> JobResult:
        with self.env.store.update() as config:
            net = new_network(self.op, config, model.new_uuid(), self._warn, self.feedback)
            config.networks[net.uuid] = net
        self.env.locks.add(locking.LEVEL_NETWORK, net.uuid)
        return None

    def _warn(self, message: str) -> None:
        self.feedback(f"WARNING: {message}")


def _none_or(value: str | None, current: str | None) -> str | None:
    """An opcode's value for a field that `none` unsets (None: unchanged)."""
    if value is None:
        return current
    return None if value.lower() == opcodes.VALUE_NONE else value


def modify_network(net: model.Network, op: opcodes.OpNetworkSetParams, warn: Warn) -> None:
    """Ganeti's LUNetworkSetParams (CheckPrereq, then Exec) on `net`: OpPrereqError for a
    gateway already reserved; addresses that cannot be reserved or released are warnings."""
    pool = net.pool()
    gateway = _none_or(op.gateway, net.gateway)
    if op.gateway and gateway is not None and pool.contains(gateway) \
            and pool.is_reserved(gateway):
        raise OpPrereqError(f"Gateway IP address '{gateway}' is already reserved",
                            "wrong_state")
    if op.gateway:
        if gateway == net.gateway:
            warn(f"Gateway is already {gateway}")
        else:
            try:
                if gateway:
                    pool.reserve(gateway, external=True)
                if net.gateway:
                    pool.release(net.gateway, external=True)
            except addrpool.AddressPoolError as err:
                raise OpPrereqError(f"Cannot change the gateway to {gateway}: {err}",
                                    "wrong_input") from None
            net.gateway = gateway
    for address in op.add_reserved_ips or []:
        try:
            pool.reserve(address, external=True)
        except addrpool.AddressPoolError as err:
            warn(f"Cannot reserve IP address {address}: {err}")
    for address in op.remove_reserved_ips or []:
        if address == net.gateway:
            warn("Cannot unreserve Gateway's IP")
            continue
        try:
            pool.release(address, external=True)
        except addrpool.AddressPoolError as err:
            warn(f"Cannot release IP address {address}: {err}")
    net.mac_prefix = _none_or(op.mac_prefix, net.mac_prefix)
    net.network6 = _none_or(op.network6, net.network6)
    net.gateway6 = _none_or(op.gateway6, net.gateway6)
    net.keep(pool)


class NetworkSetParams(LogicalUnit[opcodes.OpNetworkSetParams]):
    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        net = lookup(config.find_network, self.op.network_name)
        return [LockRequest(locking.LEVEL_NETWORK, [net.uuid])]

    def check(self, config: model.ConfigData) -> None:
        net = lookup(config.find_network, self.op.network_name)
        modify_network(configdiff.decode_object("networks", configdiff.encode_object(net)), self.op,
                       lambda message: None)

    def execute(self) -> JobResult:
        with self.env.store.update() as config:
            net = config.find_network(self.op.network_name)
            modify_network(net, self.op, lambda message: self.feedback(f"WARNING: {message}"))
            net.touch()
        return None


def _connected_groups(config: model.ConfigData, net_uuid: str) -> list[str]:
    return sorted(g.name for g in config.nodegroups.values() if net_uuid in g.networks)


class NetworkRemove(LogicalUnit[opcodes.OpNetworkRemove]):
    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        net = lookup(config.find_network, self.op.network_name)
        return [LockRequest(locking.LEVEL_NETWORK, [net.uuid]),
                LockRequest(locking.LEVEL_NODEGROUP, None, shared=True)]

    def check(self, config: model.ConfigData) -> None:
        net = lookup(config.find_network, self.op.network_name)
        groups = _connected_groups(config, net.uuid)
        if groups:
            raise OpPrereqError(f"Network '{net.name}' is still connected to node group(s) "
                                f"{', '.join(groups)}", "wrong_state")
        users = _nic_users(config.instances.values(), lambda nic: nic.network == net.uuid)
        if users:
            raise OpPrereqError(f"Network '{net.name}' is still used by NICs: {users}",
                                "wrong_state")

    def execute(self) -> JobResult:
        with self.env.store.update() as config:
            net = config.find_network(self.op.network_name)
            del config.networks[net.uuid]
        self.env.locks.remove(locking.LEVEL_NETWORK, [net.uuid])
        return None


def _nic_users(instances: Iterable[model.Instance], uses: Callable[[model.NIC], bool]) -> str:
    """Ganeti's _FmtNetworkConflict over every instance: `web1: nic0/192.0.2.5, ...`."""
    found = []
    for inst in sorted(instances, key=lambda i: i.name):
        nics = [f"nic{index}/{nic.ip}" for index, nic in enumerate(inst.nics) if uses(nic)]
        if nics:
            found.append(f"{inst.name}: {', '.join(nics)}")
    return "; ".join(found)


def _group_instances(config: model.ConfigData, group_uuid: str) -> list[model.Instance]:
    return [inst for inst in config.instances.values()
            if (node := config.nodes.get(inst.primary_node)) is not None
            and node.group == group_uuid]


LinkOpT = TypeVar("LinkOpT", opcodes.OpNetworkConnect, opcodes.OpNetworkDisconnect)


class _GroupLink(LogicalUnit[LinkOpT]):
    """Connect and disconnect: the group's lock, its instances' shared."""

    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        lookup(config.find_network, self.op.network_name)
        group = lookup(config.find_group, self.op.group_name)
        return [LockRequest(locking.LEVEL_INSTANCE,
                            sorted(i.uuid for i in _group_instances(config, group.uuid)),
                            shared=True),
                LockRequest(locking.LEVEL_NODEGROUP, [group.uuid])]


class NetworkConnect(_GroupLink[opcodes.OpNetworkConnect]):
    def check(self, config: model.ConfigData) -> None:
        op = self.op
        net = lookup(config.find_network, op.network_name)
        group = lookup(config.find_group, op.group_name)
        if net.uuid in group.networks:
            return
        if op.conflicts_check:
            pool = net.pool()
            users = _nic_users(_group_instances(config, group.uuid),
                               lambda nic: nic.network is None and pool.contains(nic.ip))
            if users:
                raise _in_use(net, group, "connect to", users)

    def execute(self) -> JobResult:
        op = self.op
        with self.env.store.update() as config:
            net = config.find_network(op.network_name)
            group = config.find_group(op.group_name)
            if net.uuid in group.networks:
                self.feedback(f"WARNING: Network '{net.name}' is already mapped to group "
                              f"'{group.name}'")
                return None
            group.networks[net.uuid] = model.NetworkLink(
                mode=op.network_mode, link=op.network_link, vlan=op.network_vlan)
            group.touch()
        return None


def _in_use(net: model.Network, group: model.NodeGroup, change: str,
            users: str) -> OpPrereqError:
    """Ganeti's refusal of a connect or disconnect that NICs' addresses conflict with."""
    return OpPrereqError(f"Conflicting IP addresses found: IP addresses from network "
                         f"'{net.name}', which is about to {change} node group "
                         f"'{group.name}', are in use: {users}; remove/modify the "
                         "corresponding network interfaces", "wrong_state")


class NetworkDisconnect(_GroupLink[opcodes.OpNetworkDisconnect]):
    def check(self, config: model.ConfigData) -> None:
        net = lookup(config.find_network, self.op.network_name)
        group = lookup(config.find_group, self.op.group_name)
        if net.uuid not in group.networks:
            return
        users = _nic_users(_group_instances(config, group.uuid),
                           lambda nic: nic.network == net.uuid)
        if users:
            raise _in_use(net, group, "disconnect from", users)

    def execute(self) -> JobResult:
        with self.env.store.update() as config:
            net = config.find_network(self.op.network_name)
            group = config.find_group(self.op.group_name)
            if net.uuid not in group.networks:
                self.feedback(f"WARNING: Network '{net.name}' is not mapped to group "
                              f"'{group.name}'")
                return None
            del group.networks[net.uuid]
            group.touch()
        return None
