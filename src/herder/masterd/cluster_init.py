"""`herder cluster init`: a new cluster's config and secrets (Ganeti's `bootstrap.InitCluster`).

The first node, the master, is this host unless the settings name another. The cluster's name
(and the master's, without a primary IP) must resolve, and not to a loopback address, unless
forced, as Ganeti's init insists; the master IP defaults to the cluster name's address. Every
check runs before anything is written; an existing config or secret is never overwritten.
Bringing the master IP up on this host is the host's step (`supervise.masterip`), which the
CLI takes after this one.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Any

from herder.core import cluster_secrets, model, params, uidpool
from herder.core.errors import HerderError
from herder.core.store import ConfigStore


def local_fqdn() -> str:
    return socket.getfqdn() or socket.gethostname()


def resolve(name: str) -> str | None:
    """The first address `name` resolves to (None: it does not)."""
    try:
        found = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return None
    return str(found[0][4][0]) if found else None


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def checked_name(name: str, what: str, force: bool) -> str | None:
    """The address of a name `cluster init` relies on; refuses (unless forced) one that does
    not resolve or resolves to a loopback address, as Ganeti's init does."""
    address = resolve(name)
    if force:
        return address
    if address is None:
        raise HerderError(f"{what} {name} does not resolve; add it to DNS or /etc/hosts "
                          "(--force initialises anyway)")
    if is_loopback(address):
        raise HerderError(f"{what} {name} resolves to a loopback address ({address}); fix DNS "
                          "or /etc/hosts (--force initialises anyway)")
    return address


@dataclass(frozen=True)
class InitSettings:
    """What the operator asked for, parsed (parameter overrides as `params` parses them)."""

    name: str
    master_node: str | None = None  # None: this host
    primary_ip: str | None = None  # None: the master's name resolved
    secondary_ip: str | None = None
    master_ip: str | None = None  # None: the cluster name's address, else the primary IP
    master_netdev: str = "eth0"
    master_netmask: int = 32
    enabled_hypervisors: tuple[str, ...] = ("kvm",)
    enabled_disk_templates: tuple[str, ...] = ("drbd", "plain", "file", "diskless")
    vg_name: str = "xenvg"
    mac_prefix: str = "aa:00:00"
    uid_pool: tuple[tuple[int, int], ...] = ()
    hvparams: dict[str, dict[str, Any]] | None = None  # hypervisor -> overrides
    beparams: dict[str, Any] | None = None
    nicparams: dict[str, Any] | None = None
    ndparams: dict[str, Any] | None = None
    diskparams: dict[str, dict[str, Any]] | None = None  # disk template -> overrides
    default_iallocators: dict[str, list[str]] | None = None
    hmac_key: bytes | None = None  # adopt this key instead of generating one
    candidate_pool_size: int = 10  # Ganeti's default
    force: bool = False  # names that do not resolve, or resolve to loopback, are taken


@dataclass(frozen=True)
class Initialised:
    config: model.ConfigData
    master: model.Node
    secrets: cluster_secrets.SecretPaths


def init_cluster(store: ConfigStore, settings: InitSettings) -> Initialised:
    """Write the new cluster's config to `store` and its secrets beside it (mode 0600), with
    the master's node certificate; HerderError (nothing written) when the store exists, a
    name check fails or the settings are invalid."""
    if store.exists():
        raise HerderError(f"{store.path} already exists; refusing to overwrite it")
    for hypervisor in settings.enabled_hypervisors:
        try:
            params.check_runnable_hypervisor(hypervisor)
        except ValueError as err:
            raise HerderError(str(err)) from None
    paths = cluster_secrets.SecretPaths.beside(store.path)
    node_name = settings.master_node or local_fqdn()
    cluster_address = checked_name(settings.name, "the cluster name", settings.force)
    ip = settings.primary_ip or checked_name(node_name, "the master's name", settings.force)
    if ip is None:
        raise HerderError(f"the master's name {node_name} does not resolve: give its "
                          "address with --primary-ip")
    master_ip = settings.master_ip
    if master_ip is None and cluster_address is not None and not is_loopback(cluster_address):
        master_ip = cluster_address  # Ganeti's master IP: what the cluster's name resolves to
    config = model.revalidate(new_config(settings, node_name, ip, master_ip or ip))
    master = config.nodes[config.cluster.master_node]
    master_digest = cluster_secrets.create_all(paths, settings.name, settings.hmac_key,
                                               node_name=master.name)
    if master_digest is not None:
        config.cluster.node_certs[master.uuid] = master_digest
    store.create(config)
    return Initialised(config, master, paths)


def _upgraded(beparams: dict[str, Any] | None) -> dict[str, Any]:
    """The cluster's backend parameters with Ganeti's old `memory` as maxmem and minmem."""
    upgraded = dict(beparams or {})
    params.upgrade_be_params(upgraded)
    return upgraded


def new_config(settings: InitSettings, node_name: str, ip: str,
               master_ip: str) -> model.ConfigData:
    """The config of a cluster of one node, the master, in the default group."""
    stamp = model.now()
    group = model.NodeGroup(uuid=model.new_uuid(), name="default", ctime=stamp, mtime=stamp)
    node = model.Node(
        uuid=model.new_uuid(), name=node_name, primary_ip=ip,
        secondary_ip=settings.secondary_ip, group=group.uuid, master_candidate=True,
        ctime=stamp, mtime=stamp,
    )
    hv_changes = settings.hvparams or {}
    hypervisors = list(settings.enabled_hypervisors)
    c = model.Cluster(
        uuid=model.new_uuid(), name=settings.name, master_node=node.uuid, master_ip=master_ip,
        master_netdev=settings.master_netdev, master_netmask=settings.master_netmask,
        enabled_hypervisors=hypervisors,
        enabled_disk_templates=list(settings.enabled_disk_templates),
        volume_group_name=settings.vg_name or None, mac_prefix=settings.mac_prefix,
        candidate_pool_size=settings.candidate_pool_size,
        hvparams={
            h: params.apply_overrides(params.hv_family(h), {}, hv_changes.get(h, {}))
            for h in sorted(set(hypervisors) | set(hv_changes))
        },
        beparams=params.apply_overrides(params.BE_FAMILY, {}, _upgraded(settings.beparams)),
        nicparams=params.apply_overrides(params.NIC_FAMILY, {}, settings.nicparams or {}),
        ndparams=params.apply_overrides(params.ND_FAMILY, {}, settings.ndparams or {}),
        diskparams={
            t: params.apply_overrides(params.disk_family(t), {}, ch)
            for t, ch in (settings.diskparams or {}).items()
        },
        uid_pool=uidpool.check_size(uidpool.normalise(list(settings.uid_pool)))
        if settings.uid_pool else [],
        default_iallocators=settings.default_iallocators or {},
        ctime=stamp, mtime=stamp,
    )
    return model.ConfigData(cluster=c, nodegroups={group.uuid: group}, nodes={node.uuid: node},
                            ctime=stamp, mtime=stamp)
