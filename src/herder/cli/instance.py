"""`herder instance ...`: the cluster's instances (read-only until the job queue exists)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from herder.cli import listing, remote
from herder.cli.common import (
    json_option,
    print_json,
    print_mapping,
)
from herder.cli.snapshot import snapshot
from herder.core import console as console_names

if TYPE_CHECKING:
    from herder.core.store import ConfigStore


@click.group()
def instance() -> None:
    """Create, run, move and remove instances. INSTANCE is a name, a unique short name or a
    UUID. Changes are jobs through masterd (or --offline)."""


instance.add_command(snapshot)


LIST = listing.ListSpec(
    "instance", "instances",
    # Ganeti's gnt-instance list defaults
    ("name", "hypervisor", "os", "pnode", "status", "oper_ram"),
    ("name", "uuid", "status", "admin_state", "pnode", "snodes", "disk_template", "os",
     "hypervisor", "be/vcpus", "be/maxmem", "oper_state", "oper_ram", "oper_vcpus", "tags"),
    formats=dict.fromkeys(("tags", "disk.sizes", "nic.macs", "nic.ips", "nic.modes",
                           "nic.links", "nic.bridges", "nic.networks", "snodes",
                           "snodes.group", "snodes.group.uuid"), listing.join))


@instance.command("list")
@listing.list_options(LIST)
@click.pass_context
def list_(ctx: click.Context, names: tuple[str, ...], output: str | None, force_filter: bool,
          no_headers: bool, separator: str | None, verbose: bool, as_json: bool,
          units: str | None) -> None:
    """List instances, as gnt-instance list: NAME... (globs too) or a filter (e.g. 'pnode ==
    "node1" and status != "running"') selects them, -o the fields (list-fields shows them
    all). The run state (status, oper_*) comes from masterd."""
    listing.run_list(ctx, LIST, names, output=output, force_filter=force_filter,
                     no_headers=no_headers, separator=separator, units=units,
                     verbose=verbose, as_json=as_json)


listing.add_list_fields(instance, LIST)


@instance.command()
@click.argument("names", nargs=-1, required=True, metavar="INSTANCE...")
@json_option
@remote.pass_store
def info(store: ConfigStore, names: tuple[str, ...], as_json: bool) -> None:
    """Show an instance: placement, disks (with DRBD ids), NICs and filled parameters."""
    from herder.core import model

    config = store.load()
    out = []
    for name in names:
        i = config.find_instance(name)
        group = config.instance_group(i)
        data = model.to_builtins(i)
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


@instance.command("console")
@click.argument("name", metavar="INSTANCE")
@click.option("--show-cmd", is_flag=True,
              help="Print the command (or the VNC address and port) instead of connecting.")
@click.option("--log", "log", is_flag=True,
              help="Print the recent output of the serial console and exit.")
@click.option("--lines", type=click.IntRange(1, console_names.LOG_LINES_MAX),
              default=console_names.LOG_LINES_DEFAULT, show_default=True,
              help="With --log: how many lines.")
@click.pass_context
def console_(ctx: click.Context, name: str, show_cmd: bool, log: bool, lines: int) -> None:
    """Connect to the serial console of a running instance through masterd (Ctrl-] leaves);
    without a serial console, print its VNC address and port (as gnt-instance console)."""
    from herder.cli import console

    with remote.client(ctx) as api:
        console.run(api, name, show_cmd, log, lines)


@instance.command()
@click.argument("name")
@click.option("-t", "--disk-template", required=True,
              type=click.Choice(["drbd", "plain", "file", "sharedfile", "blockdev", "ext",
                                 "rbd", "gluster", "diskless"]))
@click.option("-o", "--os-type", help="OS as name+variant (e.g. debootstrap+default).")
@click.option("--disk", "disks", multiple=True, metavar="SIZE|[N:]KEY=VALUE[,...]",
              help="A disk: its SIZE (e.g. 1G, 512M), or Ganeti's N:size=1G,provider=NAME "
                   "(ext), N:adopt=/dev/disk/... (blockdev), mode=, name=; repeatable.")
@click.option("--net", "nics", multiple=True, metavar="[N:]KEY=VALUE[,...]",
              help="A NIC as Ganeti's N:KEY=VALUE,... (ip=ADDRESS|pool|none, mac=generate|"
                   "MAC, mode=, link=, vlan=, network=NET, name=); repeatable.")
@click.option("--no-conflicts-check", is_flag=True,
              help="Do not refuse a NIC address inside a connected network it is not on.")
@click.option("-n", "--node", "nodes", help="PRIMARY[:SECONDARY] (default: the iallocators).")
@click.option("-I", "--iallocator", help="Placement by this iallocator (`herder`, `hail`...).")
@click.option("-B", "--backend-parameters", "be", multiple=True,
              help="e.g. vcpus=2,maxmem=1G")
@click.option("-H", "--hypervisor-parameters", "hv", multiple=True, help="KEY=VALUE[,...]")
@click.option("--no-start", is_flag=True)
@click.option("--no-install", is_flag=True)
@click.option("--force-variant", is_flag=True, help="Accept an OS variant it does not list.")
@click.option("--no-name-check", is_flag=True,
              help="Do not require NAME to resolve (and so do not check its IP either).")
@click.option("--no-ip-check", is_flag=True,
              help="Do not check that the address NAME resolves to is unused.")
@click.option("--ignore-ipolicy", is_flag=True,
              help="Create it even when it breaks the instance policy of its group.")
@click.option("--dry-run", is_flag=True, help="Run every check and show the chosen nodes.")
@click.pass_context
def add(ctx: click.Context, name: str, disk_template: str, os_type: str | None,
        disks: tuple[str, ...], nics: tuple[str, ...], nodes: str | None,
        iallocator: str | None, be: tuple[str, ...], hv: tuple[str, ...], no_start: bool,
        no_install: bool, force_variant: bool, no_name_check: bool, no_ip_check: bool,
        ignore_ipolicy: bool, dry_run: bool, no_conflicts_check: bool) -> None:
    """Create instance NAME: placed by explicit nodes, or by the iallocators (the cluster's
    defaults for `allocate`, tried in order); the selected nodes are printed.

    NAME is a host name and must resolve (the resolved name is kept), and the address it
    resolves to must not answer yet, unless --no-name-check / --no-ip-check (as Ganeti's
    gnt-instance add)."""
    from herder.core import params  # imported by the commands that parse parameters only

    body: dict[str, Any] = {
        "__version__": 1, "name": name, "disk_template": disk_template, "os_type": os_type,
        "disks": [disk_spec(spec) for spec in disks],
        "nics": nic_specs(nics),
        "start": not no_start, "no_install": no_install, "force_variant": force_variant,
        "beparams": params.parse_assignments(be) if be else {},
        "name_check": not no_name_check, "ip_check": not (no_name_check or no_ip_check),
    }
    hypervisor, body["hvparams"] = hv_option(hv)
    if hypervisor is not None:
        body["hypervisor"] = hypervisor
    if ignore_ipolicy:
        body["ignore_ipolicy"] = True
    if no_conflicts_check:
        body["conflicts_check"] = False
    if nodes:
        primary, _, secondary = nodes.partition(":")
        body["pnode"] = primary
        if secondary:
            body["snode"] = secondary
    if iallocator:
        body["iallocator"] = iallocator
    op = {"OP_ID": "OP_INSTANCE_CREATE", "instance_name": name, "dry_run": dry_run,
          **{k: v for k, v in body.items() if k not in ("__version__", "name")}}
    (chosen,) = remote.run(ctx, [op], rapi=lambda api: api.request(
        "POST", "/2/instances", [("dry-run", "1")] if dry_run else None, body))
    where = ", ".join(chosen or [])
    click.echo(f"Dry run: {name} would be placed on {where}" if dry_run
               else f"Created instance {name} on {where}")


def disk_spec(text: str) -> dict[str, Any]:
    """One --disk: a bare size, or Ganeti's `[N:]key=value,...` (the index is the order)."""
    from herder.core import params  # imported by the commands that parse parameters only

    if "=" not in text:
        return {"size": text}
    index, sep, rest = text.partition(":")
    if sep and index.isdigit():
        text = rest
    return dict(params.parse_assignments([text]))


def nic_specs(given: tuple[str, ...]) -> list[dict[str, Any]]:
    """`add --net`: Ganeti's `N:key=value,...` (or a bare `key=value,...`, in order); the
    indices must be 0..n-1 once each. No --net: one NIC with the cluster's parameters."""
    from herder.core import params  # imported by the commands that parse parameters only

    specs: dict[int, dict[str, Any]] = {}
    for position, text in enumerate(given):
        index, sep, rest = text.partition(":")
        if sep and index.isdigit():
            number, text = int(index), rest
        elif sep and "=" not in index:
            raise click.BadParameter(f"{text!r}: expected N:KEY=VALUE,...", param_hint="--net")
        else:
            number = position
        if number in specs:
            raise click.BadParameter(f"NIC {number} given twice", param_hint="--net")
        specs[number] = dict(params.parse_assignments([text])) if text else {}
    if sorted(specs) != list(range(len(specs))):
        raise click.BadParameter(f"NIC indices {sorted(specs)} leave a gap",
                                 param_hint="--net")
    return [specs[n] for n in sorted(specs)] or [{}]


def _simple(op_id: str, verb: str, **extra: Any) -> Any:
    def command(ctx: click.Context, name: str, **options: Any) -> None:
        fields = {k: v for k, v in options.items() if v is not None}
        remote.run(ctx, [{"OP_ID": op_id, "instance_name": name, **extra, **fields}])
        click.echo(f"{verb} {name}")

    return command


def _register(name: str, help_text: str, op_id: str, verb: str,
              options: list[Any] | None = None) -> None:
    fn = _simple(op_id, verb)
    fn.__doc__ = help_text
    decorated = click.pass_context(fn)
    for option in reversed(options or []):
        decorated = option(decorated)
    decorated = click.argument("name", metavar="INSTANCE")(decorated)
    instance.command(name)(decorated)


_register("start", "Start an instance on its primary node (OP_INSTANCE_STARTUP).",
          "OP_INSTANCE_STARTUP", "Started")
_register("shutdown", "Shut an instance down (OP_INSTANCE_SHUTDOWN); destroyed after the "
          "timeout.", "OP_INSTANCE_SHUTDOWN", "Stopped",
          [click.option("--timeout", type=int, help="Seconds before a hard stop.")])
_register("reboot", "Reboot an instance (OP_INSTANCE_REBOOT).", "OP_INSTANCE_REBOOT",
          "Rebooted", [click.option("--type", "reboot_type",
                                    type=click.Choice(["soft", "hard", "full"]))])
_register("migrate", "Live-migrate an instance to its secondary node (OP_INSTANCE_MIGRATE): "
          "libvirt moves the running guest, its memory and all.", "OP_INSTANCE_MIGRATE",
          "Migrated",
          [click.option("--target-node", help="For shared storage: where to."),
           click.option("--non-live", "live", flag_value=False, default=None,
                        help="Pause the guest while its memory moves (Ganeti's --non-live)."),
           click.option("--migration-mode", "mode", type=click.Choice(["live", "non-live"]),
                        help="Override the hypervisor parameter migration_mode."),
           click.option("--cleanup", is_flag=True, default=None,
                        help="Settle a failed or interrupted migration: keep the copy that "
                             "runs, update the config."),
           click.option("--allow-failover", is_flag=True, default=None,
                        help="When the instance cannot be migrated live (it is not running), "
                             "fail it over instead.")])
_register("failover", "Fail an instance over to its secondary node (OP_INSTANCE_FAILOVER): "
          "shut down there, started on the target; also when its primary is down.",
          "OP_INSTANCE_FAILOVER", "Failed over",
          [click.option("--target-node", help="For shared storage: where to."),
           click.option("--ignore-consistency", is_flag=True, default=None,
                        help="The primary is dead: do not try to stop it there.")])
_register("remove", "Remove an instance: its domain and disks on every node "
          "(OP_INSTANCE_REMOVE).", "OP_INSTANCE_REMOVE", "Removed",
          [click.option("--ignore-failures", is_flag=True, default=None)])


@instance.command("move")
@click.argument("name", metavar="INSTANCE")
@click.option("-n", "--node", "target_node", required=True, help="The node to move it to.")
@click.option("--shutdown-timeout", type=int, default=None,
              help="Seconds to wait for the instance to shut down.")
@click.option("--ignore-consistency", is_flag=True, default=None,
              help="Proceed even when it cannot be shut down on its node.")
@click.option("--ignore-ipolicy", is_flag=True, default=None,
              help="Move it even when it breaks the instance policy of the target's group.")
@click.pass_context
def move(ctx: click.Context, name: str, target_node: str, shutdown_timeout: int | None,
         ignore_consistency: bool | None, ignore_ipolicy: bool | None) -> None:
    """Move an instance with plain or file disks to another node, copying its disks over the
    network (OP_INSTANCE_MOVE, as gnt-instance move)."""
    fields = {k: v for k, v in (("shutdown_timeout", shutdown_timeout),
                                ("ignore_consistency", ignore_consistency),
                                ("ignore_ipolicy", ignore_ipolicy)) if v is not None}
    remote.run(ctx, [{"OP_ID": "OP_INSTANCE_MOVE", "instance_name": name,
                      "target_node": target_node, **fields}])
    click.echo(f"Moved {name} to {target_node}")


@instance.command("change-group")
@click.argument("name", metavar="INSTANCE")
@click.option("--to", "targets", multiple=True, metavar="GROUP",
              help="A group it may go to (repeatable; default: any other).")
@click.option("-I", "--iallocator", help="The allocator that plans the move.")
@click.option("--early-release", is_flag=True, help="Release locks as soon as possible.")
@click.pass_context
def change_group(ctx: click.Context, name: str, targets: tuple[str, ...],
                 iallocator: str | None, early_release: bool) -> None:
    """Move an instance to another node group (OP_INSTANCE_CHANGE_GROUP, as gnt-instance
    change-group): the allocator plans the moves, their job is awaited."""
    remote.run_and_follow(ctx, {"OP_ID": "OP_INSTANCE_CHANGE_GROUP", "instance_name": name,
                                "target_groups": list(targets) or None,
                                "iallocator": iallocator, "early_release": early_release})
    click.echo(f"Moved {name} to another group")


@instance.command("batch-create")
@click.argument("spec", type=click.File("r"), metavar="FILE")
@click.option("-I", "--iallocator", help="The allocator that places the instances.")
@click.pass_context
def batch_create(ctx: click.Context, spec: Any, iallocator: str | None) -> None:
    """Create several instances placed together by the allocator (OP_INSTANCE_MULTI_ALLOC,
    as gnt-instance batch-create): FILE is a JSON list of instance-create bodies (name,
    disk_template, disks, nics, os, ...); the creation jobs are awaited."""
    from herder.core import untrusted

    try:
        items = untrusted.loads(spec.read(), what=spec.name)
    except untrusted.BadDocument as err:
        raise click.BadParameter(str(err), param_hint="FILE") from None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise click.BadParameter("a JSON list of instance specifications", param_hint="FILE")
    aliases = {"name": "instance_name", "os": "os_type"}
    instances = [{aliases.get(k, k): v for k, v in item.items()} for item in items]
    result = remote.run_and_follow(ctx, {"OP_ID": "OP_INSTANCE_MULTI_ALLOC",
                                         "instances": instances, "iallocator": iallocator})
    if isinstance(result, dict):
        click.echo(f"Created: {', '.join(result.get('allocatable') or []) or 'none'}")
        if result.get("failed"):
            click.echo(f"Not placed: {', '.join(result['failed'])}", err=True)
            raise click.exceptions.Exit(1)


@instance.command("grow-disk")
@click.argument("name", metavar="INSTANCE")
@click.argument("disk", type=int)
@click.argument("amount")
@click.option("--absolute", is_flag=True, help="AMOUNT is the new size, not the growth.")
@click.option("--no-wait-for-sync", is_flag=True, help="Do not wait for the mirror's resync.")
@click.pass_context
def grow_disk(ctx: click.Context, name: str, disk: int, amount: str, absolute: bool,
              no_wait_for_sync: bool) -> None:
    """Grow disk DISK of an instance by AMOUNT (e.g. 1G), or to AMOUNT with --absolute,
    through every layer (OP_INSTANCE_GROW_DISK, as gnt-instance grow-disk)."""
    from herder.core import params  # imported by the commands that parse parameters only

    size = params.parse_size(amount)
    (grown,) = remote.run(ctx, [{"OP_ID": "OP_INSTANCE_GROW_DISK", "instance_name": name,
                                 "disk": disk, "amount": size, "absolute": absolute,
                                 "wait_for_sync": not no_wait_for_sync}])
    click.echo(f"Grew disk/{disk} of {name} to {grown} MiB")


@instance.command("recreate-disks")
@click.argument("name", metavar="INSTANCE")
@click.option("--disk", "indices", multiple=True, type=int,
              help="A disk to recreate (its index); repeatable (default: all).")
@click.option("-n", "--node", "nodes", help="New node(s): PRIMARY (the disks are made there).")
@click.pass_context
def recreate_disks(ctx: click.Context, name: str, indices: tuple[int, ...],
                   nodes: str | None) -> None:
    """Make an instance's lost disks again, empty (OP_INSTANCE_RECREATE_DISKS, as
    gnt-instance recreate-disks); it must be stopped."""
    remote.run(ctx, [{"OP_ID": "OP_INSTANCE_RECREATE_DISKS", "instance_name": name,
                      "disks": list(indices),
                      "nodes": nodes.split(":") if nodes else []}])
    click.echo(f"Recreated disks of {name}")


@instance.command("activate-disks")
@click.argument("name", metavar="INSTANCE")
@click.option("--ignore-size", is_flag=True, default=None,
              help="Do not check the disks' sizes (Ganeti's option).")
@click.pass_context
def activate_disks(ctx: click.Context, name: str, ignore_size: bool | None) -> None:
    """Make an instance's disks available on its nodes (OP_INSTANCE_ACTIVATE_DISKS); prints
    one NODE:disk/N:PATH line per disk, as gnt-instance activate-disks."""
    fields = {"ignore_size": ignore_size} if ignore_size is not None else {}
    (assembled,) = remote.run(ctx, [{"OP_ID": "OP_INSTANCE_ACTIVATE_DISKS",
                                     "instance_name": name, **fields}])
    for node, iv_name, path in assembled or []:
        click.echo(f"{node}:{iv_name}:{path}")


_register("deactivate-disks", "Shut an instance's disks down on its nodes; it must be "
          "stopped (OP_INSTANCE_DEACTIVATE_DISKS).", "OP_INSTANCE_DEACTIVATE_DISKS",
          "Deactivated disks of",
          [click.option("-f", "--force", is_flag=True, default=None,
                        help="Even when the primary cannot shut them down.")])
_register("reinstall", "Reinstall the OS of a stopped instance, optionally another OS "
          "(OP_INSTANCE_REINSTALL).", "OP_INSTANCE_REINSTALL", "Reinstalled",
          [click.option("-o", "--os-type", help="New OS (name+variant)."),
           click.option("--force-variant", is_flag=True, default=None)])
_register("replace-disks", "Recreate an instance's disks on its primary (-p, repair), or move "
          "its mirror to a new secondary (-n NODE / -I ALLOC) (OP_INSTANCE_REPLACE_DISKS).",
          "OP_INSTANCE_REPLACE_DISKS", "Replaced disks of",
          [click.option("-p", "--on-primary", "mode", flag_value="replace_on_primary",
                        default=None),
           click.option("-s", "--on-secondary", "mode", flag_value="replace_on_secondary"),
           click.option("-n", "--new-secondary", "remote_node"),
           click.option("-I", "--iallocator")])


DISK_ACTIONS = ("add", "remove", "modify")


def disk_modification(text: str, hint: str = "--disk") -> list[Any]:
    """One `modify --disk` or `--net` as Ganeti's gnt-instance (_ConvertNicDiskModifications):
    `add:size=1G,...` (appended), `remove` (the last one), `N:add,size=1G` (inserted at N),
    `N:remove`, `N:name=x,mode=ro` (modify). Gives [action, index, params]."""
    identifier, _, rest = text.partition(":")
    index: int | str
    if identifier in ("add", "remove") and not rest.startswith(("add", "remove")):
        action, index = identifier, -1
        words = [w for w in rest.split(",") if w.strip()]
    else:
        if not rest and identifier not in DISK_ACTIONS:
            raise click.BadParameter(f"{text!r}: expected add:KEY=VALUE,..., N:remove or "
                                     "N:KEY=VALUE,...", param_hint=hint)
        words = [w for w in rest.split(",") if w.strip()]
        index = identifier
        flags = [w.strip() for w in words if w.strip() in DISK_ACTIONS]
        if len(flags) > 1:
            raise click.BadParameter("Cannot do more than one of the following operations at "
                                     "the same time: add, remove, modify", param_hint=hint)
        action = flags[0] if flags else "modify"
        words = [w for w in words if w.strip() not in DISK_ACTIONS]
    settings: dict[str, Any] = {}
    for word in words:
        key, sep, value = word.strip().partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{word!r}: expected KEY=VALUE", param_hint=hint)
        settings[key] = value
    if action == "remove" and settings:
        raise click.BadParameter("Not accepting parameters on removal/detach",
                                 param_hint=hint)
    if isinstance(index, str) and index.lstrip("-").isdigit():
        index = int(index)
    return [action, index, settings]


def hv_option(values: tuple[str, ...]) -> tuple[str | None, dict[str, Any]]:
    """`-H [HYPERVISOR:]KEY=VALUE[,...]` (repeatable): Ganeti's `gnt-instance add -H
    kvm:kernel_path=/x` (its identkeyval: the hypervisor, then its parameters; `-H kvm` alone
    names the hypervisor) and herder's bare KEY=VALUE list. A prefix is a hypervisor when it
    holds no `=` (so `kernel_args=console=ttyS0:x` stays one value); two different ones are
    refused."""
    from herder.core import params  # imported by the commands that parse parameters only

    hypervisor: str | None = None
    items: list[str] = []
    for value in values:
        ident, sep, rest = value.partition(":")
        if (sep and "=" not in ident and "," not in ident) or value in params.HYPERVISORS:
            params.hv_family(ident)  # one line for an unknown hypervisor
            if hypervisor not in (None, ident):
                raise click.BadParameter(f"two hypervisors given: {hypervisor} and {ident}",
                                         param_hint="-H")
            hypervisor = ident
            items.append(rest)
        else:
            items.append(value)
    return hypervisor, params.parse_assignments(items)


@instance.command("modify")
@click.argument("name", metavar="INSTANCE")
@click.option("--disk", "disk_mods", multiple=True, metavar="add:size=N,... | N:remove | N:K=V",
              help="Add a disk (add:size=1G[,mode=rw,name=...,provider=...]; N:add,size=... "
                   "inserts at N), remove one (N:remove; the instance must be stopped) or "
                   "change a disk's name/mode (N:name=x); repeatable.")
@click.option("-t", "--disk-template", type=click.Choice(["plain", "drbd"]),
              help="Convert the disks (plain <-> drbd); the instance must be stopped.")
@click.option("-n", "--node", "remote_node", help="With -t drbd: the new secondary node.")
@click.option("-B", "--backend-parameters", "be", multiple=True, help="e.g. maxmem=1G")
@click.option("-H", "--hypervisor-parameters", "hv", multiple=True, help="KEY=VALUE[,...]")
@click.option("-O", "--os-parameters", "osp", multiple=True, help="KEY=VALUE[,...]")
@click.option("-o", "--os-type", help="A new OS (name+variant), used at the next reinstall.")
@click.option("--offline/--online", "offline", default=None,
              help="Mark a stopped instance offline, or back online (down).")
@click.option("--net", "nic_mods", multiple=True,
              metavar="add:KEY=VALUE,... | N:remove | N:KEY=VALUE,...",
              help="Add a NIC (add:network=NET,ip=pool | add:mode=bridged,link=br0,ip=...; "
                   "mac=generate), remove one (N:remove) or change one (N:ip=...,network=..."
                   "); repeatable.")
@click.option("--hotplug", is_flag=True,
              help="Plug the added/removed/changed disk or NIC into the running instance "
                   "now (refused when it cannot be).")
@click.option("--hotplug-if-possible", is_flag=True,
              help="Hotplug when possible, else apply at the next start.")
@click.option("--no-conflicts-check", is_flag=True,
              help="Do not refuse a NIC address inside a connected network it is not on.")
@click.option("--no-wait-for-sync", is_flag=True, help="Do not wait for a new mirror's sync.")
@click.option("-m", "--runtime-memory", "runtime_mem", metavar="SIZE",
              help="Balloon the running instance's memory up or down to SIZE (e.g. 768M, "
                   "1G); within minmem..maxmem unless --force.")
@click.option("-f", "--force", is_flag=True,
              help="With --runtime-memory: allow a size outside minmem..maxmem.")
@click.option("--ignore-ipolicy", is_flag=True,
              help="Change it even when it then breaks the instance policy of its group (e.g. "
                   "removing its last disk).")
@click.pass_context
def modify(ctx: click.Context, name: str, disk_mods: tuple[str, ...],
           nic_mods: tuple[str, ...], disk_template: str | None, remote_node: str | None,
           be: tuple[str, ...], hv: tuple[str, ...], osp: tuple[str, ...],
           os_type: str | None, offline: bool | None, hotplug: bool,
           hotplug_if_possible: bool, no_conflicts_check: bool, no_wait_for_sync: bool,
           runtime_mem: str | None, force: bool, ignore_ipolicy: bool) -> None:
    """Change an instance (OP_INSTANCE_SET_PARAMS, as gnt-instance modify): its disks (added
    on every node of its template now) and NICs (with --hotplug plugged into the running
    instance; otherwise it sees them at its next start), its disk template, its parameters
    (applied at the next start), the running guest's memory (--runtime-memory, now). Prints
    each change."""
    from herder.core import params  # imported by the commands that parse parameters only

    op: dict[str, Any] = {"OP_ID": "OP_INSTANCE_SET_PARAMS", "instance_name": name,
                          "disks": [disk_modification(m) for m in disk_mods],
                          "nics": [disk_modification(m, "--net") for m in nic_mods],
                          "wait_for_sync": not no_wait_for_sync, "hotplug": hotplug,
                          "hotplug_if_possible": hotplug_if_possible,
                          "ignore_ipolicy": ignore_ipolicy}
    if no_conflicts_check:
        op["conflicts_check"] = False
    for key, value in (("disk_template", disk_template), ("remote_node", remote_node),
                       ("os_name", os_type), ("offline", offline)):
        if value is not None:
            op[key] = value
    for key, given in (("beparams", be), ("osparams", osp)):
        if given:
            op[key] = params.parse_assignments(given)
    if hv:
        hypervisor, op["hvparams"] = hv_option(hv)
        if hypervisor is not None:
            runs_on = remote.config_source(ctx).load().find_instance(name).hypervisor
            if hypervisor != runs_on:
                raise click.BadParameter(f"instance {name} runs on hypervisor {runs_on}, not "
                                         f"{hypervisor}", param_hint="-H")
    if runtime_mem is not None:
        try:
            op["runtime_mem"] = params.parse_size(runtime_mem)
        except ValueError as err:
            raise click.BadParameter(str(err), param_hint="--runtime-memory") from None
    if force:
        op["force"] = True
    (changes,) = remote.run(ctx, [op])
    if not changes:
        click.echo(f"Modified {name}: nothing changed")
    for key, value in changes or []:
        click.echo(f" - {key} -> {value}")
    click.echo(f"Modified instance {name}")


@instance.command("rename")
@click.argument("name", metavar="INSTANCE")
@click.argument("new_name", metavar="NEW_NAME")
@click.option("--no-name-check", is_flag=True, help="Do not require NEW_NAME to resolve.")
@click.option("--no-ip-check", is_flag=True, help="Do not check that its address is unused.")
@click.pass_context
def rename(ctx: click.Context, name: str, new_name: str, no_name_check: bool,
           no_ip_check: bool) -> None:
    """Rename a stopped instance (OP_INSTANCE_RENAME, as gnt-instance rename): file disks
    move to the new name's directory; the domain takes the name at its next start."""
    (renamed,) = remote.run(ctx, [{"OP_ID": "OP_INSTANCE_RENAME", "instance_name": name,
                                   "new_name": new_name, "name_check": not no_name_check,
                                   "ip_check": not (no_name_check or no_ip_check)}])
    click.echo(f"Renamed {name} to {renamed}")
