"""NICs of new and existing instances, as Ganeti 3.0 (cmdlib/instance_create.py's NIC checks,
instance_set_params.py's _PrepareNicModification, _CreateNewNic, _ApplyNicMods, _RemoveNic,
instance_utils.CheckForConflictingIp): a NIC on a network takes its mode, link and VLAN from
the network's connection to the primary's node group; `ip=pool` takes the network's first free
address, a given address is reserved in the network's pool, `ip=none` clears it; `mac=auto` /
`generate` makes a MAC with the network's MAC prefix (else the cluster's), a given one must be
unused in the cluster. Addresses go back to the pool when a NIC leaves its network or its
address, is removed, or its instance is.

Every change is made on `Pools` and on the instance's NIC list in the caller's config
transaction (`store.update()`), so the pools and the NICs are written together or not at all;
the LUs first run the same steps on copies (their `check`), so bad input is refused before
anything is written.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from herder.core import addrpool, configdiff, model, params
from herder.core.errors import ConfigError, OpPrereqError

ADD, REMOVE, MODIFY = "add", "remove", "modify"
MAX_NICS = 8  # Ganeti's constants.MAX_NICS
NIC_KEYS = frozenset({"ip", "mac", "mode", "link", "vlan", "name", "network", "bridge"})
AUTO_MACS = ("auto", "generate")
Feedback = Callable[[str], None]


class Pools:
    """The IP pools of the networks a job touches, read from `config`; `keep` writes them back
    into its networks (only inside the caller's config transaction)."""

    def __init__(self, config: model.ConfigData) -> None:
        self.config = config
        self.pools: dict[str, addrpool.AddressPool] = {}

    def of(self, net_uuid: str) -> addrpool.AddressPool:
        if net_uuid not in self.pools:
            self.pools[net_uuid] = self.config.networks[net_uuid].pool()
        return self.pools[net_uuid]

    def keep(self) -> None:
        for uuid, pool in self.pools.items():
            self.config.networks[uuid].keep(pool)
            self.config.networks[uuid].touch()

    def release(self, nic: model.NIC, feedback: Feedback) -> None:
        """Give a NIC's address back to its network's pool (Ganeti's ReleaseIp: a missing
        reservation is only logged)."""
        if nic.network is None or nic.ip is None or nic.network not in self.config.networks:
            return
        pool = self.of(nic.network)
        try:
            pool.release(nic.ip)
        except addrpool.AddressPoolError as err:
            feedback(f"WARNING: Release IP {nic.ip} of network "
                     f"{self.config.networks[nic.network].name}: {err}")


def network_uuid(config: model.ConfigData, name: str | None) -> str | None:
    """The network a NIC spec names (a name or UUID; `none`: no network)."""
    if name is None or name == "" or name.lower() == "none":
        return None
    try:
        return config.find_network(name).uuid
    except ConfigError as err:
        raise OpPrereqError(str(err), "unknown_entity") from None


def macs_in_use(config: model.ConfigData) -> set[str]:
    return {n.mac for i in configdiff.plain_values(config.instances) for n in i.nics}


def new_mac(prefix: str, taken: set[str]) -> str:
    """A MAC under the three-octet `prefix` not in `taken` (then added to it)."""
    for _ in range(1000):
        mac = prefix + ":" + ":".join(f"{b:02x}" for b in secrets.token_bytes(3))
        if mac not in taken:
            taken.add(mac)
            return mac
    raise OpPrereqError("cannot find a free MAC address", "insufficient_resources")


@dataclass
class NicContext:
    """What NIC changes of one instance need: the config, the primary's group, the pools,
    the MACs in use, and where messages go."""

    config: model.ConfigData
    group: model.NodeGroup | None
    pools: Pools
    feedback: Feedback
    conflicts_check: bool = True
    macs: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, config: model.ConfigData, primary: model.Node, feedback: Feedback,
           conflicts_check: bool = True) -> NicContext:
        return cls(config, config.nodegroups.get(primary.group), Pools(config), feedback,
                   conflicts_check, macs_in_use(config))

    def net_name(self, uuid: str) -> str:
        return self.config.networks[uuid].name

    def link_of(self, net_uuid: str) -> model.NetworkLink:
        link = self.group.networks.get(net_uuid) if self.group else None
        if link is None:
            group = self.group.name if self.group else "?"
            raise OpPrereqError(f"No netparams found for network {self.net_name(net_uuid)}. "
                                f"Probably not connected to node group {group}", "wrong_input")
        return link

    def mac_for(self, given: str | None, net_uuid: str | None) -> str:
        if given is None or given.lower() in AUTO_MACS:
            net = self.config.networks.get(net_uuid) if net_uuid else None
            prefix = net.mac_prefix if net and net.mac_prefix else \
                self.config.cluster.mac_prefix
            return new_mac(prefix, self.macs)
        mac = given.lower()
        if mac in self.macs:
            raise OpPrereqError(f"MAC address '{mac}' already in use in cluster",
                                "already_exists")
        self.macs.add(mac)
        return mac

    def address_for(self, ip: str | None, net_uuid: str | None, what: str) -> str | None:
        """The address a NIC gets: from the pool (`pool`), reserved in its network, or
        checked against the group's networks (Ganeti's CheckForConflictingIp)."""
        if ip is None or ip.lower() == "none" or ip == "":
            return None
        if net_uuid is None:
            if ip.lower() == "pool":
                raise OpPrereqError(f"{what}: ip=pool needs a network (network=NAME)",
                                    "wrong_input")
            if self.conflicts_check:
                self._conflicting(ip)
            return ip
        pool = self.pools.of(net_uuid)
        if ip.lower() == "pool":
            try:
                address = pool.take_free()
            except addrpool.AddressPoolError:
                raise OpPrereqError(f"Unable to get a free IP for {what} from the address "
                                    f"pool of network {self.net_name(net_uuid)} (it is full)",
                                    "insufficient_resources") from None
            self.feedback(f"Chose IP {address} from network {self.net_name(net_uuid)}")
            return address
        try:
            pool.reserve(ip)
        except addrpool.AddressPoolError as err:
            raise OpPrereqError(f"IP address {ip} already in use or does not belong to network"
                                f" {self.net_name(net_uuid)} ({err})", "already_exists") \
                from None
        if pool.is_reserved(ip, external=True):
            pool.release(ip)
            raise OpPrereqError(f"IP address {ip} is reserved in network "
                                f"{self.net_name(net_uuid)}", "already_exists")
        return ip

    def _conflicting(self, ip: str) -> None:
        for net_uuid in sorted(self.group.networks if self.group else ()):
            net = self.config.networks.get(net_uuid)
            if net is not None and net.pool().contains(ip):
                raise OpPrereqError(f"The requested IP address ({ip}) belongs to network "
                                    f"{net.name} ({net.uuid}), but the target NIC does not",
                                    "wrong_input")


def _nicparams(spec: dict[str, Any], what: str) -> dict[str, Any]:
    """The NIC parameters a spec sets (`bridge` is Ganeti's old name of a bridged link)."""
    given = dict(spec)
    if given.get("bridge") and not given.get("link"):
        given["link"] = given["bridge"]
    chosen = {k: given[k] for k in ("mode", "link", "vlan")
              if given.get(k) not in (None, "", "auto")}
    try:
        return params.validate(params.NIC_FAMILY, chosen)
    except ConfigError as err:
        raise OpPrereqError(f"{what}: {err}", "wrong_input") from None


def new_nic(ctx: NicContext, spec: dict[str, Any], what: str) -> model.NIC:
    """A NIC for `spec` (Ganeti's INIC parameters), its address and MAC reserved."""
    unknown = set(spec) - NIC_KEYS
    if unknown:
        raise OpPrereqError(f"{what}: unknown parameter(s) {', '.join(sorted(unknown))}",
                            "wrong_input")
    net_uuid = network_uuid(ctx.config, spec.get("network"))
    nicparams = _nicparams(spec, what)
    if net_uuid is not None:
        if set(nicparams) & {"mode", "link"}:
            raise OpPrereqError(f"{what}: If network is given mode or link should not",
                                "wrong_input")
        link = ctx.link_of(net_uuid)
        ctx.feedback(f"{what} inherits netparams {[link.mode, link.link, link.vlan]}")
        nicparams = {}
    mac = ctx.mac_for(spec.get("mac"), net_uuid)
    ip = ctx.address_for(spec.get("ip"), net_uuid, what)
    name = spec.get("name")
    try:
        nic = model.NIC(uuid=model.new_uuid(), mac=mac, ip=ip, network=net_uuid,
                        nicparams=nicparams,
                        name=None if name is None or str(name).lower() == "none" else name)
    except (ConfigError, ValueError) as err:
        raise OpPrereqError(f"{what}: {err}", "wrong_input") from None
    _check_routed(ctx, nic, what)
    return nic


def _check_routed(ctx: NicContext, nic: model.NIC, what: str) -> None:
    filled = ctx.config.filled_nicparams(nic, ctx.group)
    try:
        params.check_relations(params.NIC_FAMILY, filled)
    except ConfigError as err:
        raise OpPrereqError(f"{what}: {err}", "wrong_input") from None
    if filled["mode"] == params.NIC_MODE_ROUTED and nic.ip is None and nic.network is None:
        raise OpPrereqError(f"{what}: Cannot set the NIC IP address to None on a routed NIC if "
                            "not attached to a network", "wrong_input")


def modify_nic(ctx: NicContext, nic: model.NIC, settings: dict[str, Any], what: str) -> None:
    """Ganeti's _PrepareNicModification and _ApplyNicMods for one NIC (changed in place)."""
    unknown = set(settings) - NIC_KEYS
    if unknown:
        raise OpPrereqError(f"{what}: unknown parameter(s) {', '.join(sorted(unknown))}",
                            "wrong_input")
    old_ip, old_net = nic.ip, nic.network
    new_net = network_uuid(ctx.config, settings["network"]) if "network" in settings \
        else old_net
    changes = _nicparams(settings, what)
    if "network" in settings and new_net is not None and set(changes) & {"mode", "link"}:
        raise OpPrereqError(f"{what}: If network is given mode or link should not",
                            "wrong_input")
    mac = settings.get("mac")
    if mac is not None and mac.lower() == "auto":
        raise OpPrereqError(f"{what}: 'auto' is not a valid MAC address when modifying an "
                            "existing NIC", "wrong_input")
    if new_net != old_net:
        nic.nicparams = {}
        if new_net is not None:
            ctx.link_of(new_net)
    elif old_net is not None and set(changes) & {"mode", "link"}:
        raise OpPrereqError(f"{what}: Not allowed to change link or mode of a NIC that is "
                            "connected to a network", "wrong_input")
    if new_net is None:
        nic.nicparams = {**nic.nicparams, **changes}
    if mac is not None:
        ctx.macs.discard(nic.mac)
        nic.mac = ctx.mac_for(mac, new_net)
    elif new_net != old_net and _prefix(ctx, new_net) != _prefix(ctx, old_net):
        nic.mac = ctx.mac_for(None, new_net)
    new_ip = settings.get("ip", old_ip)
    if (new_ip, new_net) != (old_ip, old_net):
        if old_ip and old_net:
            ctx.pools.release(nic, ctx.feedback)
        nic.network = new_net
        nic.ip = ctx.address_for(new_ip, new_net, what)
    if "name" in settings:
        name = settings["name"]
        nic.name = None if name is None or str(name).lower() == "none" else name
    _check_routed(ctx, nic, what)


def _prefix(ctx: NicContext, net_uuid: str | None) -> str | None:
    net = ctx.config.networks.get(net_uuid) if net_uuid else None
    return net.mac_prefix if net else None


@dataclass
class NicChange:
    """One NIC modification done: what, at which index, the NIC (for hotplug)."""

    action: str
    index: int
    nic: model.NIC
    old: model.NIC | None = None  # a modified NIC as it was (a hotplug replaces it)


def upgrade(mods: list[Any]) -> list[tuple[str, int | str, dict[str, Any]]]:
    """Ganeti's _UpgradeDiskNicMods for NICs: [op, params] or [op, index, params]."""
    if not isinstance(mods, list) or not all(isinstance(m, list | tuple) and len(m) in (2, 3)
                                             for m in mods):
        raise OpPrereqError("nics: a list of [op, params] or [op, index, params]",
                            "wrong_input")
    result: list[tuple[str, int | str, dict[str, Any]]] = []
    for mod in mods:
        if len(mod) == 3:
            action, index, settings = mod
        elif mod[0] in (ADD, REMOVE):
            action, index, settings = mod[0], -1, mod[1]
        else:
            action, index, settings = MODIFY, mod[0], mod[1]
        if settings is not None and not isinstance(settings, dict):
            raise OpPrereqError(f"NIC {index}: parameters must be an object", "wrong_input")
        result.append((str(action), index, dict(settings or {})))
    return result


def _index(nics: list[model.NIC], identifier: int | str, action: str) -> int:
    """Ganeti's GetItemFromContainer: an index (-1: the last), or a NIC's name or UUID."""
    count = len(nics)
    try:
        index = int(identifier)
    except (TypeError, ValueError):
        for found, nic in enumerate(nics):
            if identifier in (nic.name, nic.uuid):
                return found
        raise OpPrereqError(f"Lookup of NIC {identifier!r} failed", "wrong_input") from None
    if action == ADD:
        if index == -1:
            return count
        if not 0 <= index <= count:
            raise OpPrereqError(f"Not accepting NIC index {index} for an addition (the "
                                f"instance has {count} NICs)", "wrong_input")
        return index
    if not -count <= index < count:
        raise OpPrereqError(f"Not accepting NIC index {identifier} (the instance has {count} "
                            "NICs)", "wrong_input")
    return index % count


def apply_mods(ctx: NicContext, inst: model.Instance, mods: list[Any]) -> list[NicChange]:
    """Apply Ganeti's NIC modifications to `inst` (its NIC list and the pools, in place);
    OpPrereqError naming what is wrong."""
    done: list[NicChange] = []
    for action, identifier, settings in upgrade(mods):
        if action not in (ADD, REMOVE, MODIFY):
            raise OpPrereqError(f"unknown NIC operation {action!r} (add, remove or an index)",
                                "wrong_input")
        index = _index(inst.nics, identifier, action)
        what = f"NIC {index}"
        if action == ADD:
            if len(inst.nics) >= MAX_NICS:
                raise OpPrereqError(f"Instance has too many network interfaces "
                                    f"({len(inst.nics) + 1}), cannot add more", "wrong_state")
            nic = new_nic(ctx, settings, what)
            inst.nics.insert(index, nic)
            done.append(NicChange(ADD, index, nic))
        elif action == REMOVE:
            if settings:
                raise OpPrereqError("No settings should be passed when removing a NIC",
                                    "wrong_input")
            nic = inst.nics.pop(index)
            ctx.pools.release(nic, ctx.feedback)
            ctx.macs.discard(nic.mac)
            done.append(NicChange(REMOVE, index, nic))
        else:
            nic = inst.nics[index]
            old = msgspec.structs.replace(nic)
            modify_nic(ctx, nic, settings, what)
            done.append(NicChange(MODIFY, index, nic, old))
    return done


def describe(changes: Iterable[NicChange]) -> list[list[str]]:
    """Ganeti's result rows of NIC changes (`nic.0`, `add:mac=...,ip=...`)."""
    rows: list[list[str]] = []
    for change in changes:
        nic = change.nic
        if change.action == ADD:
            rows.append([f"nic.{change.index}", f"add:mac={nic.mac},ip={nic.ip},"
                         f"mode={nic.nicparams.get('mode')},link={nic.nicparams.get('link')},"
                         f"network={nic.network}"])
        elif change.action == REMOVE:
            rows.append([f"nic.{change.index}", "remove"])
        else:
            rows += [[f"nic.mac/{change.index}", nic.mac], [f"nic.ip/{change.index}",
                                                            str(nic.ip)],
                     [f"nic.network/{change.index}", str(nic.network)]]
    return rows
