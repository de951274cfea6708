"""`herder backup`: Ganeti's gnt-backup (export, import, list, remove). Exports and imports go
through Ganeti's RAPI routes (`PUT /2/instances/I/export`, `POST /2/instances` with mode
import), the list through `/2/query/export`, so they also drive a real Ganeti cluster."""

from __future__ import annotations

import json
from typing import Any

import click

from herder.cli import listing, remote
from herder.cli.instance import disk_spec
from herder.core.backupsched import KEEP_MAX, BadSchedule, parse_schedule, utc_text
from herder.core.errors import AmbiguousError, HerderError, NotFoundError


@click.group()
def backup() -> None:
    """Exports of instances (to a node's export directory) and imports from them."""


@backup.command("export")
@click.argument("name", metavar="INSTANCE")
@click.option("-n", "--node", "target_node", required=True,
              help="The node whose export directory receives the export.")
@click.option("--noshutdown", is_flag=True,
              help="Do not shut the instance down (only where its disks can be snapshotted).")
@click.option("--remove-instance", is_flag=True, help="Remove the instance once exported.")
@click.option("--ignore-remove-failures", is_flag=True,
              help="With --remove-instance: go on when a part cannot be removed.")
@click.option("--shutdown-timeout", type=click.IntRange(0, 86400), default=None,
              help="Seconds to wait for the instance to shut down.")
@click.option("--keep", type=click.IntRange(1, KEEP_MAX), default=None,
              help="Keep this many exports of INSTANCE on the node (herder's): the one "
                   "replaced stays as INSTANCE@YYYYMMDD-HHMMSS, the oldest beyond go. "
                   "Default: Ganeti's, the new export replaces INSTANCE's.")
@click.pass_context
def export(ctx: click.Context, name: str, target_node: str, noshutdown: bool,
           remove_instance: bool, ignore_remove_failures: bool,
           shutdown_timeout: int | None, keep: int | None) -> None:
    """Export INSTANCE to a node (OP_BACKUP_EXPORT, as gnt-backup export): each disk streamed
    to the node's export directory, with Ganeti's config.ini."""
    body: dict[str, Any] = {"destination": target_node, "mode": "local",
                            "shutdown": not noshutdown, "remove_instance": remove_instance}
    if ignore_remove_failures:
        body["ignore_remove_failures"] = True
    if shutdown_timeout is not None:
        body["shutdown_timeout"] = shutdown_timeout
    if keep is not None:
        body["keep"] = keep
    op = {"OP_ID": "OP_BACKUP_EXPORT", "instance_name": name,
          **{("target_node" if k == "destination" else k): v for k, v in body.items()}}
    remote.run(ctx, [op], rapi=lambda api: api.request(
        "PUT", f"/2/instances/{name}/export", None, body))
    click.echo(f"Exported {name} to {target_node}")


@backup.command("import")
@click.argument("name", metavar="INSTANCE")
@click.option("--src-node", required=True, help="The node holding the export.")
@click.option("--src-dir", required=True,
              help="The export's directory on it (its name: the exported instance's).")
@click.option("-t", "--disk-template", default=None,
              type=click.Choice(["drbd", "plain", "file", "sharedfile", "blockdev", "ext",
                                 "rbd", "gluster"]),
              help="Default: the export's.")
@click.option("-o", "--os-type", help="Default: the export's OS.")
@click.option("--disk", "disks", multiple=True, metavar="SIZE|[N:]KEY=VALUE[,...]",
              help="A disk (default: the export's disks, with their sizes); repeatable.")
@click.option("--net", "nics", multiple=True, metavar="KEY=VALUE[,...]",
              help="A NIC (default: the export's NICs); repeatable.")
@click.option("-n", "--node", "nodes", help="PRIMARY[:SECONDARY] (default: the iallocators).")
@click.option("-I", "--iallocator", help="Placement by this iallocator.")
@click.option("-B", "--backend-parameters", "be", multiple=True, help="Over the export's.")
@click.option("-H", "--hypervisor-parameters", "hv", multiple=True, help="Over the export's.")
@click.option("--no-start", is_flag=True)
@click.option("--no-name-check", is_flag=True,
              help="Do not require INSTANCE to resolve (and so do not check its IP either).")
@click.option("--no-ip-check", is_flag=True,
              help="Do not check that the address INSTANCE resolves to is unused.")
@click.pass_context
def import_(ctx: click.Context, name: str, src_node: str, src_dir: str,
            disk_template: str | None, os_type: str | None, disks: tuple[str, ...],
            nics: tuple[str, ...], nodes: str | None, iallocator: str | None,
            be: tuple[str, ...], hv: tuple[str, ...], no_start: bool, no_name_check: bool,
            no_ip_check: bool) -> None:
    """Create INSTANCE from an export (OP_INSTANCE_CREATE in mode import, as gnt-backup
    import): what is not given comes from the export's config.ini."""
    from herder.core import params  # imported by the commands that parse parameters only

    body: dict[str, Any] = {
        "__version__": 1, "name": name, "mode": "import", "src_node": src_node,
        "src_path": src_dir, "start": not no_start,
        "name_check": not no_name_check, "ip_check": not (no_name_check or no_ip_check)}
    optional = {"disk_template": disk_template, "os_type": os_type, "iallocator": iallocator,
                "disks": [disk_spec(spec) for spec in disks] or None,
                "nics": [dict(params.parse_assignments([spec])) for spec in nics] or None,
                "beparams": params.parse_assignments(be) if be else None,
                "hvparams": params.parse_assignments(hv) if hv else None}
    body |= {key: value for key, value in optional.items() if value is not None}
    if nodes:
        primary, _, secondary = nodes.partition(":")
        body |= {"pnode": primary, **({"snode": secondary} if secondary else {})}
    op = {"OP_ID": "OP_INSTANCE_CREATE", "instance_name": name,
          **{k: v for k, v in body.items() if k not in ("__version__", "name")}}
    (chosen,) = remote.run(ctx, [op], rapi=lambda api: api.request(
        "POST", "/2/instances", None, body))
    click.echo(f"Imported instance {name} on {', '.join(chosen or [])}")


import_.name = "import"


# Ganeti's gnt-backup list: its default fields, no names as arguments (--node selects)
LIST = listing.ListSpec("export", "exports", ("node", "export"), ("node", "export"),
                        name_field="node")


@backup.command("list")
@click.option("--node", "nodes", multiple=True,
              help="Only this node's exports; repeatable (gnt-backup list --node).")
@listing.list_options(LIST, names=False)
@click.pass_context
def list_(ctx: click.Context, nodes: tuple[str, ...], output: str | None, no_headers: bool,
          separator: str | None, units: str | None, verbose: bool, as_json: bool) -> None:
    """The exports on each node, as gnt-backup list (Ganeti's /2/query/export); -o the
    fields (list-fields shows them all)."""
    if remote.offline(ctx):
        raise HerderError("the exports are on the nodes: ask masterd (no --offline)")
    wanted: list[str] = []
    if nodes:
        config = remote.config_source(ctx).load()
        try:
            wanted = [config.find_node(node).name for node in nodes]
        except (NotFoundError, AmbiguousError) as err:
            raise HerderError(str(err)) from None
    listing.run_list(ctx, LIST, wanted, output=output, force_filter=False,
                     no_headers=no_headers, separator=separator, units=units,
                     verbose=verbose, as_json=as_json)


list_.name = "list"
listing.add_list_fields(backup, LIST)


@backup.command("remove")
@click.argument("name", metavar="INSTANCE")
@click.pass_context
def remove(ctx: click.Context, name: str) -> None:
    """Remove the exports named INSTANCE from every node (OP_BACKUP_REMOVE); an older one
    kept by a retention count by its own name, INSTANCE@YYYYMMDD-HHMMSS."""
    remote.run(ctx, [{"OP_ID": "OP_BACKUP_REMOVE", "instance_name": name}])
    click.echo(f"Removed the exports of {name}")


@backup.group("schedule")
def schedule() -> None:
    """Scheduled backups (herder's, as Proxmox VE's backup jobs; Ganeti has none): maintd
    exports the instances a schedule names when its time comes (`herder maintd status` shows
    the runs)."""


@schedule.command("add")
@click.argument("name")
@click.option("--when", required=True,
              help="'daily HH:MM' (UTC), 'every N hours', 'every N minutes', or a cron "
                   "expression in UTC ('0 2 * * mon-fri', '@weekly').")
@click.option("-n", "--node", "target_node", required=True, help="The node the exports go to.")
@click.option("--instance", default="", help="The instance to export (or --tag).")
@click.option("--tag", default="", help="Export every instance carrying this tag.")
@click.option("--keep", type=int, default=1, show_default=True,
              help="Exports of each instance kept on the node (the newest named by the "
                   "instance, older ones INSTANCE@YYYYMMDD-HHMMSS).")
@click.pass_context
def schedule_add(ctx: click.Context, name: str, when: str, target_node: str, instance: str,
                 tag: str, keep: int) -> None:
    """Add the backup schedule NAME."""
    body = {"name": name, "when": when, "targetNode": target_node, "instance": instance,
            "tag": tag, "keep": keep}
    try:
        parse_schedule(body)  # the server checks again; a bad one never leaves this machine
    except BadSchedule as err:
        raise HerderError(str(err)) from None
    with remote.client(ctx) as api:
        remote.call(api.request, "POST", "/2/herder/backup-schedules", None, body)
    click.echo(f"Backup schedule {name} added")


@schedule.command("list")
@click.option("--json", "as_json", is_flag=True, help="The schedules and runs as JSON.")
@click.pass_context
def schedule_list(ctx: click.Context, as_json: bool) -> None:
    """The backup schedules with their next run, and when each instance was last exported
    by one."""
    with remote.client(ctx) as api:
        found = remote.call(api.get_herder, "backup-schedules")
    if as_json:
        click.echo(json.dumps(found, indent=1))
        return
    last: dict[tuple[str, str], dict[str, Any]] = {}
    for run in found.get("runs") or []:
        last[(run["schedule"], run["instance"])] = run
    for item in found.get("schedules") or []:
        what = f"instance {item['instance']}" if item.get("instance") else f"tag {item['tag']}"
        click.echo(f"{item['name']:16} {item['when']:18} {what:32} to {item['targetNode']} "
                   f"keep {item['keep']}  next {utc_text(item.get('nextRun') or 0)}")
        for (sched, inst), run in sorted(last.items()):
            if sched == item["name"]:
                click.echo(f"  {inst}: {run['status']} {utc_text(run.get('end') or 0)}"
                           + (f"  {run['error']}" if run.get("error") else ""))


@schedule.command("remove")
@click.argument("name")
@click.pass_context
def schedule_remove(ctx: click.Context, name: str) -> None:
    """Remove the backup schedule NAME (the exports it made stay)."""
    with remote.client(ctx) as api:
        remote.call(api.request, "DELETE", f"/2/herder/backup-schedules/{name}")
    click.echo(f"Backup schedule {name} removed")
