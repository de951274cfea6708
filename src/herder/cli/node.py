"""`herder node ...`: the cluster's nodes."""

from __future__ import annotations

import ipaddress

import click

from herder.cli.common import (
    YES_NO,
    json_option,
    pass_store,
    print_json,
    print_mapping,
    print_table,
    timestamp,
    yes_no,
)
from herder.core import model as M
from herder.core import params as P
from herder.core.errors import ConfigError, ExistsError, HerderError
from herder.core.store import FileStore

PARAM_HELP = "KEY=VALUE[,...]; KEY=default or -KEY resets, no_KEY sets false"


@click.group()
def node() -> None:
    """List, add, change and remove nodes. NODE is a name, a unique short name or a UUID."""


def _check_ip(value: str | None, what: str) -> None:
    if value is None:
        return
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ConfigError(f"{what} {value!r} is not an IP address") from None


def _roles(config: M.ConfigData, n: M.Node) -> str:
    if n.uuid == config.cluster.master_node:
        return "master"
    if n.master_candidate:
        return "candidate"
    if n.offline:
        return "offline"
    if n.drained:
        return "drained"
    return "regular"


def node_row(config: M.ConfigData, n: M.Node) -> dict[str, object]:
    group = config.nodegroups.get(n.group)
    primaries = sum(1 for i in config.instances.values() if i.primary_node == n.uuid)
    secondaries = sum(1 for i in config.instances.values() if n.uuid in i.secondary_nodes)
    return {
        "name": n.name, "uuid": n.uuid, "role": _roles(config, n),
        "group": group.name if group else n.group, "primary_ip": n.primary_ip,
        "secondary_ip": n.secondary_ip, "master_candidate": n.master_candidate,
        "master_capable": n.master_capable, "vm_capable": n.vm_capable, "offline": n.offline,
        "drained": n.drained, "pinst": primaries, "sinst": secondaries, "tags": n.tags,
    }


@node.command("list")
@json_option
@pass_store
def list_(store: FileStore, as_json: bool) -> None:
    """List nodes with their role, group, IPs, flags and instance counts."""
    config = store.load()
    rows = [node_row(config, n) for n in sorted(config.nodes.values(), key=lambda n: n.name)]
    if as_json:
        print_json(rows)
        return
    print_table(
        ["Node", "Role", "Group", "PrimaryIP", "SecondaryIP", "MC", "Off", "Drain", "Pinst",
         "Sinst"],
        [[r["name"], r["role"], r["group"], r["primary_ip"], r["secondary_ip"],
          r["master_candidate"], r["offline"], r["drained"], r["pinst"], r["sinst"]]
         for r in rows],
    )


@node.command()
@click.argument("names", nargs=-1, required=True, metavar="NODE...")
@json_option
@pass_store
def info(store: FileStore, names: tuple[str, ...], as_json: bool) -> None:
    """Show everything about one or more nodes, with their filled node parameters."""
    config = store.load()
    nodes = [config.find_node(name) for name in names]
    out = []
    for n in nodes:
        data = M.to_builtins(n)
        data["role"] = _roles(config, n)
        data["group_name"] = config.nodegroups[n.group].name if n.group in config.nodegroups \
            else None
        data["filled_ndparams"] = config.filled_ndparams(n)
        data["primary_instances"] = sorted(
            i.name for i in config.instances.values() if i.primary_node == n.uuid)
        data["secondary_instances"] = sorted(
            i.name for i in config.instances.values() if n.uuid in i.secondary_nodes)
        out.append(data)
    if as_json:
        print_json(out)
        return
    for data in out:
        data["ctime"], data["mtime"] = timestamp(data["ctime"]), timestamp(data["mtime"])
        click.echo(f"Node {data.pop('name')}:")
        print_mapping(data, 1)


@node.command()
@click.argument("name")
@click.option("--ip", "--primary-ip", "primary_ip", required=True, help="Primary IP address.")
@click.option("--secondary-ip", help="Replication (DRBD) IP address.")
@click.option("--group", "group_name", help="Node group (default: the first group).")
@click.option("--master-candidate/--no-master-candidate", default=False, show_default=True)
@click.option("--master-capable/--no-master-capable", default=True, show_default=True)
@click.option("--vm-capable/--no-vm-capable", default=True, show_default=True)
@click.option("--node-parameters", "nd", multiple=True, help=PARAM_HELP)
@click.option("--uuid", "node_uuid", help="Keep this UUID (e.g. re-adding a known node).")
@pass_store
def add(store: FileStore, name: str, primary_ip: str, secondary_ip: str | None,
        group_name: str | None, master_candidate: bool, master_capable: bool, vm_capable: bool,
        nd: tuple[str, ...], node_uuid: str | None) -> None:
    """Add node NAME to the cluster."""
    _check_ip(primary_ip, "primary IP")
    _check_ip(secondary_ip, "secondary IP")
    with store.update() as config:
        for other in config.nodes.values():
            if other.name == name:
                raise ExistsError(f"node {name!r} already exists (uuid {other.uuid})")
            if other.primary_ip == primary_ip:
                raise ExistsError(f"IP {primary_ip} is already node {other.name}'s primary IP")
        if node_uuid and node_uuid in config.nodes:
            raise ExistsError(f"UUID {node_uuid} is already node {config.nodes[node_uuid].name}")
        if group_name:
            group = config.find_group(group_name)
        elif config.nodegroups:
            group = min(config.nodegroups.values(), key=lambda g: g.ctime)
        else:
            raise HerderError("the cluster has no node group; add one with 'herder group add'")
        stamp = M.now()
        new = M.Node(
            uuid=node_uuid or M.new_uuid(), name=name, primary_ip=primary_ip,
            secondary_ip=secondary_ip, group=group.uuid, master_candidate=master_candidate,
            master_capable=master_capable, vm_capable=vm_capable,
            ndparams=P.apply_overrides(P.ND_FAMILY, {}, P.parse_assignments(nd)),
            ctime=stamp, mtime=stamp,
        )
        config.nodes[new.uuid] = new
    click.echo(f"Added node {name} (uuid {new.uuid}) to group {group.name}")


@node.command()
@click.argument("name", metavar="NODE")
@click.option("--offline", type=YES_NO, help="Mark offline (also demotes from candidate).")
@click.option("--drained", type=YES_NO, help="Mark drained: no new instances.")
@click.option("--master-candidate", type=YES_NO)
@click.option("--master-capable", type=YES_NO)
@click.option("--vm-capable", type=YES_NO)
@click.option("--secondary-ip")
@click.option("--group", "group_name", help="Move the node to this group.")
@click.option("--node-parameters", "nd", multiple=True, help=PARAM_HELP)
@click.option("--rename", "new_name", help="New name (the UUID stays).")
@pass_store
def modify(store: FileStore, name: str, offline: str | None, drained: str | None,
           master_candidate: str | None, master_capable: str | None, vm_capable: str | None,
           secondary_ip: str | None, group_name: str | None, nd: tuple[str, ...],
           new_name: str | None) -> None:
    """Change a node's flags, group, parameters or name."""
    _check_ip(secondary_ip, "secondary IP")
    with store.update() as config:
        n = config.find_node(name)
        is_master = n.uuid == config.cluster.master_node
        if new_name and new_name != n.name:
            if any(o.name == new_name for o in config.nodes.values()):
                raise ExistsError(f"node {new_name!r} already exists")
            n.name = new_name
        for flag, value in (("offline", offline), ("drained", drained)):
            if value is not None:
                on = bool(yes_no(value))
                if on and is_master:
                    raise HerderError(f"the master node cannot be marked {flag}")
                setattr(n, flag, on)
                if on:
                    n.master_candidate = False  # Ganeti demotes offline/drained nodes too
        if master_capable is not None:
            n.master_capable = bool(yes_no(master_capable))
            if not n.master_capable:
                if is_master:
                    raise HerderError("the master node must stay master capable")
                n.master_candidate = False
        if master_candidate is not None:
            on = bool(yes_no(master_candidate))
            if not on and is_master:
                raise HerderError("the master node cannot be demoted from master candidate")
            n.master_candidate = on
        if vm_capable is not None:
            n.vm_capable = bool(yes_no(vm_capable))
        if secondary_ip is not None:
            n.secondary_ip = secondary_ip or None
        if group_name:
            n.group = config.find_group(group_name).uuid
        if nd:
            n.ndparams = P.apply_overrides(P.ND_FAMILY, n.ndparams, P.parse_assignments(nd))
        n.touch()
    click.echo(f"Modified node {n.name}")


@node.command()
@click.argument("name", metavar="NODE")
@pass_store
def remove(store: FileStore, name: str) -> None:
    """Remove a node that holds no instances and is not the master."""
    with store.update() as config:
        n = config.find_node(name)
        if n.uuid == config.cluster.master_node:
            raise HerderError(f"node {n.name} is the master and cannot be removed")
        users = sorted(i.name for i in config.instances_on(n.uuid))
        if users:
            raise HerderError(f"node {n.name} still holds instances: {', '.join(users)}")
        del config.nodes[n.uuid]
    click.echo(f"Removed node {n.name}")
