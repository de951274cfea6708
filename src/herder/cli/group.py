"""`herder group ...`: node groups."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from herder.cli import listing, remote
from herder.cli.common import (
    PARAM_HELP,
    json_option,
    print_json,
    print_mapping,
)

if TYPE_CHECKING:
    from herder.core.store import ConfigStore

ALLOC_POLICIES = click.Choice(["preferred", "last_resort", "unallocable"])


@click.group()
def group() -> None:
    """List, add, change and remove node groups. GROUP is a name or a UUID."""


LIST = listing.ListSpec(
    "group", "node groups",
    # Ganeti's gnt-group list defaults
    ("name", "node_cnt", "pinst_cnt", "alloc_policy", "ndparams"),
    ("name", "uuid", "alloc_policy", "node_cnt", "pinst_cnt", "tags"),
    formats={"node_list": listing.join, "pinst_list": listing.join,
             "ndparams": listing.params_text},
    units=False)


@group.command("list")
@listing.list_options(LIST)
@click.pass_context
def list_(ctx: click.Context, names: tuple[str, ...], output: str | None, force_filter: bool,
          no_headers: bool, separator: str | None, verbose: bool, as_json: bool) -> None:
    """List node groups, as gnt-group list: NAME... or a filter selects them, -o the fields
    (list-fields shows them all)."""
    listing.run_list(ctx, LIST, names, output=output, force_filter=force_filter,
                     no_headers=no_headers, separator=separator, units=None,
                     verbose=verbose, as_json=as_json)


listing.add_list_fields(group, LIST)


@group.command()
@click.argument("names", nargs=-1, required=True, metavar="GROUP...")
@json_option
@remote.pass_store
def info(store: ConfigStore, names: tuple[str, ...], as_json: bool) -> None:
    """Show a group with its filled node parameters and instance policy."""
    from herder.core import model, params

    config = store.load()
    out = []
    for name in names:
        g = config.find_group(name)
        data = model.to_builtins(g)
        data["nodes"] = sorted(n.name for n in config.nodes.values() if n.group == g.uuid)
        data["filled_ipolicy"] = model.to_builtins(config.filled_ipolicy(g))
        data["filled_ndparams"] = params.fill(params.ND_FAMILY.defaults(), config.cluster.ndparams,
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
@click.pass_context
def add(ctx: click.Context, name: str, alloc_policy: str, nd: tuple[str, ...],
        disk: tuple[str, ...]) -> None:
    """Add a node group (OP_GROUP_ADD)."""
    from herder.cli.cluster import parse_disk_options
    from herder.core import params

    body: dict[str, Any] = {"group_name": name, "alloc_policy": alloc_policy}
    if nd:
        body["ndparams"] = params.parse_assignments(nd)
    if disk:
        body["diskparams"] = parse_disk_options(disk)
    (uuid,) = remote.run(ctx, [{"OP_ID": "OP_GROUP_ADD", **body}],
                         rapi=lambda api: api.request("POST", "/2/groups", None, body))
    click.echo(f"Added node group {name} (uuid {uuid})")


@group.command()
@click.argument("name", metavar="GROUP")
@click.option("--alloc-policy", type=ALLOC_POLICIES)
@click.option("--node-parameters", "nd", multiple=True, help=PARAM_HELP)
@click.option("-D", "--disk-parameters", "disk", multiple=True, metavar="TEMPLATE:KEY=VALUE")
@click.option("--ipolicy-vcpu-ratio", type=float)
@click.option("--ipolicy-spindle-ratio", type=float)
@click.option("--ipolicy-disk-templates", help="Comma-separated; '' inherits the cluster's.")
@click.option("--rename", "new_name", help="New name (the UUID stays).")
@click.pass_context
def modify(ctx: click.Context, name: str, alloc_policy: str | None, nd: tuple[str, ...],
           disk: tuple[str, ...], ipolicy_vcpu_ratio: float | None,
           ipolicy_spindle_ratio: float | None, ipolicy_disk_templates: str | None,
           new_name: str | None) -> None:
    """Change a group's policy, parameters (OP_GROUP_SET_PARAMS) or name (OP_GROUP_RENAME)."""
    from herder.cli.cluster import parse_disk_options
    from herder.core import params

    body: dict[str, Any] = {}
    if alloc_policy:
        body["alloc_policy"] = alloc_policy
    if nd:
        body["ndparams"] = params.parse_assignments(nd)
    if disk:
        body["diskparams"] = parse_disk_options(disk)
    ipolicy: dict[str, Any] = {}
    if ipolicy_vcpu_ratio is not None:
        ipolicy["vcpu-ratio"] = ipolicy_vcpu_ratio
    if ipolicy_spindle_ratio is not None:
        ipolicy["spindle-ratio"] = ipolicy_spindle_ratio
    if ipolicy_disk_templates is not None:
        ipolicy["disk-templates"] = [t for t in ipolicy_disk_templates.split(",") if t] or None
    if ipolicy:
        body["ipolicy"] = ipolicy
    if not body and not new_name:
        raise click.UsageError("nothing to change; see 'herder group modify --help'")
    if body:
        remote.run(ctx, [{"OP_ID": "OP_GROUP_SET_PARAMS", "group_name": name, **body}],
                   rapi=lambda api: api.request("PUT", f"/2/groups/{name}/modify", None, body))
    if new_name:
        remote.run(ctx, [{"OP_ID": "OP_GROUP_RENAME", "group_name": name, "new_name": new_name}],
                   rapi=lambda api: api.rename_group(name, new_name))
    click.echo(f"Modified node group {new_name or name}")


@group.command()
@click.argument("name", metavar="GROUP")
@click.pass_context
def remove(ctx: click.Context, name: str) -> None:
    """Remove an empty node group (OP_GROUP_REMOVE)."""
    remote.run(ctx, [{"OP_ID": "OP_GROUP_REMOVE", "group_name": name}],
               rapi=lambda api: api.delete_group(name))
    click.echo(f"Removed node group {name}")


@group.command("assign-nodes")
@click.argument("name", metavar="GROUP")
@click.argument("nodes", nargs=-1, required=True, metavar="NODE...")
@click.option("--force", is_flag=True,
              help="Assign even if DRBD instances end up with nodes in two groups.")
@click.pass_context
def assign_nodes(ctx: click.Context, name: str, nodes: tuple[str, ...], force: bool) -> None:
    """Move nodes into a node group (OP_GROUP_ASSIGN_NODES, as gnt-group assign-nodes)."""
    remote.run(ctx, [{"OP_ID": "OP_GROUP_ASSIGN_NODES", "group_name": name,
                      "nodes": list(nodes), "force": force}])
    click.echo(f"Assigned {', '.join(nodes)} to {name}")


@group.command()
@click.argument("name", metavar="GROUP")
@click.option("--to", "targets", multiple=True, metavar="GROUP",
              help="A group the instances may go to (repeatable; default: any other).")
@click.option("-I", "--iallocator", help="The allocator that plans the moves.")
@click.option("--early-release", is_flag=True, help="Release locks as soon as possible.")
@click.option("--sequential", is_flag=True, help="One job of every move, run in order.")
@click.option("--force-failover", is_flag=True, help="Fail over instead of migrating.")
@click.pass_context
def evacuate(ctx: click.Context, name: str, targets: tuple[str, ...], iallocator: str | None,
             early_release: bool, sequential: bool, force_failover: bool) -> None:
    """Move every instance of a node group to other groups (OP_GROUP_EVACUATE, as gnt-group
    evacuate): the allocator plans the moves, their jobs are awaited."""
    result = remote.run_and_follow(ctx, {
        "OP_ID": "OP_GROUP_EVACUATE", "group_name": name,
        "target_groups": list(targets) or None, "iallocator": iallocator,
        "early_release": early_release, "sequential": sequential,
        "force_failover": force_failover})
    jobs = result.get("jobs", []) if isinstance(result, dict) else []
    click.echo(f"Evacuated group {name}: {len(jobs)} job(s)")
