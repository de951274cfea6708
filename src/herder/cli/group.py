"""`herder group ...`: node groups."""

from __future__ import annotations

import click

from herder.cli.cluster import PARAM_HELP, parse_disk_options
from herder.cli.common import json_option, pass_store, print_json, print_mapping, print_table
from herder.core import model as M
from herder.core import params as P
from herder.core.errors import ExistsError, HerderError
from herder.core.store import FileStore

ALLOC_POLICIES = click.Choice(["preferred", "last_resort", "unallocable"])


@click.group()
def group() -> None:
    """List, add, change and remove node groups. GROUP is a name or a UUID."""


@group.command("list")
@json_option
@pass_store
def list_(store: FileStore, as_json: bool) -> None:
    """List node groups with their allocation policy and sizes."""
    config = store.load()
    rows = []
    for g in sorted(config.nodegroups.values(), key=lambda g: g.name):
        members = {n.uuid for n in config.nodes.values() if n.group == g.uuid}
        instances = sum(1 for i in config.instances.values() if i.primary_node in members)
        rows.append({"name": g.name, "uuid": g.uuid, "alloc_policy": g.alloc_policy,
                     "nodes": len(members), "instances": instances, "tags": g.tags})
    if as_json:
        print_json(rows)
        return
    print_table(["Group", "UUID", "AllocPolicy", "Nodes", "Instances"],
                [[r["name"], r["uuid"], r["alloc_policy"], r["nodes"], r["instances"]]
                 for r in rows])


@group.command()
@click.argument("names", nargs=-1, required=True, metavar="GROUP...")
@json_option
@pass_store
def info(store: FileStore, names: tuple[str, ...], as_json: bool) -> None:
    """Show a group with its filled node parameters and instance policy."""
    config = store.load()
    out = []
    for name in names:
        g = config.find_group(name)
        data = M.to_builtins(g)
        data["nodes"] = sorted(n.name for n in config.nodes.values() if n.group == g.uuid)
        data["filled_ipolicy"] = M.to_builtins(config.filled_ipolicy(g))
        data["filled_ndparams"] = P.fill(P.ND_FAMILY.defaults(), config.cluster.ndparams,
                                         g.ndparams)
        out.append(data)
    if as_json:
        print_json(out)
        return
    for data in out:
        click.echo(f"Node group {data.pop('name')}:")
        print_mapping(data, 1)


@group.command()
@click.argument("name")
@click.option("--alloc-policy", type=ALLOC_POLICIES, default="preferred", show_default=True)
@click.option("--node-parameters", "nd", multiple=True, help=PARAM_HELP)
@click.option("-D", "--disk-parameters", "disk", multiple=True, metavar="TEMPLATE:KEY=VALUE")
@pass_store
def add(store: FileStore, name: str, alloc_policy: str, nd: tuple[str, ...],
        disk: tuple[str, ...]) -> None:
    """Add a node group."""
    with store.update() as config:
        if any(g.name == name for g in config.nodegroups.values()):
            raise ExistsError(f"node group {name!r} already exists")
        stamp = M.now()
        g = M.NodeGroup(
            uuid=M.new_uuid(), name=name, alloc_policy=alloc_policy,  # type: ignore[arg-type]
            ndparams=P.apply_overrides(P.ND_FAMILY, {}, P.parse_assignments(nd)),
            diskparams={t: P.apply_overrides(P.disk_family(t), {}, ch)
                        for t, ch in parse_disk_options(disk).items()},
            ctime=stamp, mtime=stamp,
        )
        config.nodegroups[g.uuid] = g
    click.echo(f"Added node group {name} (uuid {g.uuid})")


@group.command()
@click.argument("name", metavar="GROUP")
@click.option("--alloc-policy", type=ALLOC_POLICIES)
@click.option("--node-parameters", "nd", multiple=True, help=PARAM_HELP)
@click.option("-D", "--disk-parameters", "disk", multiple=True, metavar="TEMPLATE:KEY=VALUE")
@click.option("--ipolicy-vcpu-ratio", type=float)
@click.option("--ipolicy-spindle-ratio", type=float)
@click.option("--ipolicy-disk-templates", help="Comma-separated; '' inherits the cluster's.")
@click.option("--rename", "new_name", help="New name (the UUID stays).")
@pass_store
def modify(store: FileStore, name: str, alloc_policy: str | None, nd: tuple[str, ...],
           disk: tuple[str, ...], ipolicy_vcpu_ratio: float | None,
           ipolicy_spindle_ratio: float | None, ipolicy_disk_templates: str | None,
           new_name: str | None) -> None:
    """Change a group's policy, parameters or name."""
    with store.update() as config:
        g = config.find_group(name)
        if new_name and new_name != g.name:
            if any(o.name == new_name for o in config.nodegroups.values()):
                raise ExistsError(f"node group {new_name!r} already exists")
            g.name = new_name
        if alloc_policy:
            g.alloc_policy = alloc_policy  # type: ignore[assignment]
        if nd:
            g.ndparams = P.apply_overrides(P.ND_FAMILY, g.ndparams, P.parse_assignments(nd))
        for t, changes in parse_disk_options(disk).items():
            g.diskparams[t] = P.apply_overrides(P.disk_family(t), g.diskparams.get(t, {}), changes)
        if ipolicy_vcpu_ratio is not None:
            g.ipolicy.vcpu_ratio = ipolicy_vcpu_ratio
        if ipolicy_spindle_ratio is not None:
            g.ipolicy.spindle_ratio = ipolicy_spindle_ratio
        if ipolicy_disk_templates is not None:
            g.ipolicy.disk_templates = [t for t in ipolicy_disk_templates.split(",") if t] or None
        g.touch()
    click.echo(f"Modified node group {g.name}")


@group.command()
@click.argument("name", metavar="GROUP")
@pass_store
def remove(store: FileStore, name: str) -> None:
    """Remove an empty node group."""
    with store.update() as config:
        g = config.find_group(name)
        members = sorted(n.name for n in config.nodes.values() if n.group == g.uuid)
        if members:
            raise HerderError(f"node group {g.name} still has nodes: {', '.join(members)}")
        if len(config.nodegroups) == 1:
            raise HerderError("the last node group cannot be removed")
        del config.nodegroups[g.uuid]
    click.echo(f"Removed node group {g.name}")
