"""`herder storage ...` and `herder os list|info|modify`: storage units and OS definitions on
the nodes."""

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
    """Every usable OS (valid on every node, not hidden or blacklisted) with its variants
    (name+variant) and the nodes offering it (OP_OS_DIAGNOSE)."""
    (rows,) = remote.run(ctx, [{"OP_ID": "OP_OS_DIAGNOSE",
                                "output_fields": ["name", "variants", "node_status"]}])
    offered = {full: sorted(n for n, has in status.items() if has)
               for name, variants, status in rows for full in os_names(name, variants)}
    if as_json:
        click.echo(json.dumps(offered, indent=2))
    else:
        print_table(["OS", "Nodes"], [[name, nodes] for name, nodes in offered.items()])


def os_names(name: str, variants: list[str]) -> list[str]:
    """Ganeti's CalculateOSNames: name+variant for each variant, else the name."""
    return [f"{name}+{v}" for v in variants] if variants else [name]


INFO_FIELDS = ["name", "valid", "hidden", "blacklisted", "variants", "node_status", "os_hvp",
               "osparams"]


@os_group.command("info")
@click.argument("names", nargs=-1, metavar="[OS...]")
@json_option
@click.pass_context
def os_info(ctx: click.Context, names: tuple[str, ...], as_json: bool) -> None:
    """Everything about the OSes the nodes offer, hidden and blacklisted ones too (as
    gnt-os info): valid, hidden, blacklisted, variants, nodes, OS parameters."""
    (rows,) = remote.run(ctx, [{"OP_ID": "OP_OS_DIAGNOSE", "output_fields": INFO_FIELDS,
                                "names": list(names)}])
    infos = [dict(zip(INFO_FIELDS, row, strict=True)) for row in rows]
    if as_json:
        click.echo(json.dumps(infos, indent=2))
        return
    for info in infos:
        click.echo(f"OS: {info['name']}")
        for key in ("valid", "hidden", "blacklisted"):
            click.echo(f"  {key}: {info[key]}")
        click.echo(f"  variants: {', '.join(info['variants']) or '-'}")
        click.echo("  nodes: " + ", ".join(f"{n}{'' if ok else ' (missing)'}"
                                           for n, ok in sorted(info["node_status"].items())))
        for key in ("os_hvp", "osparams"):
            if info[key]:
                click.echo(f"  {key}: {json.dumps(info[key], sort_keys=True)}")


@os_group.command("modify")
@click.argument("name", metavar="OS")
@click.option("--hidden", type=YES_NO, help="Hide the OS from lists (yes/no).")
@click.option("--blacklisted", type=YES_NO, help="Refuse the OS for new instances (yes/no).")
@click.pass_context
def os_modify(ctx: click.Context, name: str, hidden: str | None,
              blacklisted: str | None) -> None:
    """Hide or blacklist an OS, or undo it (as gnt-os modify --hidden/--blacklisted:
    OP_CLUSTER_SET_PARAMS's hidden_os and blacklisted_os)."""
    op: dict[str, object] = {"OP_ID": "OP_CLUSTER_SET_PARAMS"}
    for field, value in (("hidden_os", hidden), ("blacklisted_os", blacklisted)):
        if value is not None:
            op[field] = [["add" if yes_no(value) else "remove", name]]
    if len(op) == 1:
        raise click.UsageError("give --hidden or --blacklisted")
    remote.run(ctx, [op])
    click.echo(f"Modified OS {name}")
