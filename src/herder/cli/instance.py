"""`herder instance ...`: the cluster's instances (read-only until the job queue exists)."""

from __future__ import annotations

import click

from herder.cli.common import json_option, pass_store, print_json, print_mapping, print_table
from herder.core import model as M
from herder.core.store import FileStore


@click.group()
def instance() -> None:
    """List and show instances. INSTANCE is a name, a unique short name or a UUID."""


@instance.command("list")
@json_option
@pass_store
def list_(store: FileStore, as_json: bool) -> None:
    """List instances with their state, nodes, template and OS."""
    config = store.load()
    rows = []
    for i in sorted(config.instances.values(), key=lambda i: i.name):
        be = config.filled_beparams(i)
        rows.append({
            "name": i.name, "uuid": i.uuid, "admin_state": i.admin_state,
            "primary_node": config.node_name(i.primary_node),
            "secondary_nodes": [config.node_name(n) for n in i.secondary_nodes],
            "disk_template": i.disk_template, "os": i.os, "hypervisor": i.hypervisor,
            "vcpus": be["vcpus"], "maxmem": be["maxmem"], "tags": i.tags,
        })
    if as_json:
        print_json(rows)
        return
    print_table(["Instance", "Admin", "Primary", "Secondary", "Template", "OS", "VCPUs", "Memory"],
                [[r["name"], r["admin_state"], r["primary_node"], r["secondary_nodes"],
                  r["disk_template"], r["os"], r["vcpus"], r["maxmem"]] for r in rows])


@instance.command()
@click.argument("names", nargs=-1, required=True, metavar="INSTANCE...")
@json_option
@pass_store
def info(store: FileStore, names: tuple[str, ...], as_json: bool) -> None:
    """Show an instance: placement, disks (with DRBD ids), NICs and filled parameters."""
    config = store.load()
    out = []
    for name in names:
        i = config.find_instance(name)
        group = config.instance_group(i)
        data = M.to_builtins(i)
        data["disk_template"] = i.disk_template
        data["primary_node_name"] = config.node_name(i.primary_node)
        data["secondary_node_names"] = [config.node_name(n) for n in i.secondary_nodes]
        data["filled_hvparams"] = config.filled_hvparams(i)
        data["filled_beparams"] = config.filled_beparams(i)
        data["filled_osparams"] = config.filled_osparams(i)
        data["filled_nicparams"] = [config.filled_nicparams(nic, group) for nic in i.nics]
        out.append(data)
    if as_json:
        print_json(out)
        return
    for data in out:
        click.echo(f"Instance {data.pop('name')}:")
        print_mapping(data, 1)
