"""`herder storage ...` and `herder os list`: storage units and OS definitions on the nodes."""

from __future__ import annotations

import json

import click

from herder.cli import remote
from herder.cli.common import YES_NO, json_option, print_table, yes_no

FIELDS = ["node", "name", "size", "used", "free", "allocatable"]


@click.group()
def storage() -> None:
    """Storage units on the nodes (design-2.1): LVM physical volumes, volume groups, file
    storage directories; stop allocations on a PV; fix a VG that lost a PV."""


@storage.command("list")
@click.argument("nodes", nargs=-1, metavar="[NODE...]")
@click.option("-t", "--type", "storage_type", type=click.Choice(["lvm-pv", "lvm-vg", "file"]),
              default="lvm-vg", show_default=True)
@json_option
@click.pass_context
def list_(ctx: click.Context, nodes: tuple[str, ...], storage_type: str, as_json: bool) -> None:
    """List storage units of a type on the nodes (all by default), sizes in MiB."""
    (rows,) = remote.run(ctx, [{"OP_ID": "OP_NODE_QUERY_STORAGE", "nodes": list(nodes),
                                "storage_type": storage_type, "output_fields": FIELDS}])
    if as_json:
        click.echo(json.dumps([dict(zip(FIELDS, r, strict=True)) for r in rows], indent=2))
    else:
        print_table([f.capitalize() for f in FIELDS], rows)


@storage.command()
@click.argument("node", metavar="NODE")
@click.argument("name", metavar="PV")
@click.option("--allocatable", type=YES_NO, required=True,
              help="no: stop new allocations on this PV.")
@click.pass_context
def modify(ctx: click.Context, node: str, name: str, allocatable: str) -> None:
    """Allow or stop allocations on a physical volume (OP_NODE_MODIFY_STORAGE)."""
    remote.run(ctx, [{"OP_ID": "OP_NODE_MODIFY_STORAGE", "node_name": node, "name": name,
                      "storage_type": "lvm-pv",
                      "changes": {"allocatable": bool(yes_no(allocatable))}}])
    click.echo(f"{name} on {node}: allocatable={allocatable}")


@storage.command()
@click.argument("node", metavar="NODE")
@click.argument("name", metavar="VG")
@click.option("--ignore-consistency", is_flag=True,
              help="Repair even if another node or an instance's other copy is unhealthy.")
@click.pass_context
def repair(ctx: click.Context, node: str, name: str, ignore_consistency: bool) -> None:
    """Fix a volume group that lost physical volumes — refused unless every node sharing
    instances with this one is healthy and every instance on it has a good copy elsewhere."""
    (result,) = remote.run(ctx, [{"OP_ID": "OP_REPAIR_NODE_STORAGE", "node_name": node,
                                  "name": name, "ignore_consistency": ignore_consistency}])
    click.echo(f"Repaired {name} on {node}: {json.dumps(result)}")


@click.group(name="os")
def os_group() -> None:
    """OS definitions (OS API 10/15/20, with variants) on the nodes."""


@os_group.command("list")
@json_option
@click.pass_context
def os_list(ctx: click.Context, as_json: bool) -> None:
    """Every OS with its variants (name+variant), and the nodes offering it."""
    (offered,) = remote.run(ctx, [{"OP_ID": "OP_OS_DIAGNOSE"}])
    if as_json:
        click.echo(json.dumps(offered, indent=2))
    else:
        print_table(["OS", "Nodes"], [[name, nodes] for name, nodes in offered.items()])
