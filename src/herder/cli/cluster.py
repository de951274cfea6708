"""`herder cluster ...`: create, show, check and change the cluster's configuration."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from herder.cli import cluster_backup, remote, upgrade
from herder.cli.common import (
    PARAM_HELP,
    YES_NO,
    json_option,
    print_json,
    print_mapping,
    store_from,
    timestamp,
    yes_no,
)
from herder.cli.ipolicy import parse_bounds_specs
from herder.cli.queue import queue
from herder.core import cluster_secrets, model, params, ports, uidpool
from herder.core.errors import ConfigError, HerderError, ParameterError
from herder.core.store import ConfigStore, FileStore
from herder.core.verify import Finding
from herder.core.verify import verify as verify_config


@click.group()
def cluster() -> None:
    """Create, inspect, check and change the cluster configuration."""


cluster.add_command(queue)
cluster.add_command(cluster_backup.backup)
cluster.add_command(cluster_backup.restore)
cluster.add_command(upgrade.upgrade)


# --- option helpers shared by init and modify -----------------------------------------------


def parse_hv_options(values: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """`-H kvm:acpi=false,kernel_path=/x` (repeatable) -> {hypervisor: changes}."""
    result: dict[str, dict[str, Any]] = {}
    for value in values:
        hv, sep, rest = value.partition(":")
        if not sep or not hv:
            raise ParameterError(f"expected HYPERVISOR:KEY=VALUE[,...], got {value!r}")
        params.hv_family(hv)
        result.setdefault(hv, {}).update(params.parse_assignments([rest]))
    return result


def parse_disk_options(values: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """`-D drbd:resync-rate=1024` (repeatable) -> {template: changes}."""
    result: dict[str, dict[str, Any]] = {}
    for value in values:
        dt, sep, rest = value.partition(":")
        if not sep or not dt:
            raise ParameterError(f"expected TEMPLATE:KEY=VALUE[,...], got {value!r}")
        params.disk_family(dt)
        result.setdefault(dt, {}).update(params.parse_assignments([rest]))
    return result


def parse_default_iallocators(values: tuple[str, ...]) -> dict[str, list[str]]:
    """`NAME[,NAME]` for every request type, or `TYPE=NAME[,NAME]` for one (repeatable)."""
    result: dict[str, list[str]] = {}
    for value in values:
        kind, sep, names = value.partition("=")
        if sep:
            if kind not in model.IALLOCATOR_REQUEST_TYPES:
                raise ConfigError(
                    f"unknown iallocator request type {kind!r} "
                    f"(known: {', '.join(model.IALLOCATOR_REQUEST_TYPES)})"
                )
            result[kind] = [n for n in names.split(",") if n]
        else:
            for kind in model.IALLOCATOR_REQUEST_TYPES:
                result[kind] = [n for n in value.split(",") if n]
    return result


def parse_collector_options(values: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """`--data-collector drbd:interval=10,active=no` (repeatable)."""
    result: dict[str, dict[str, str]] = {}
    for value in values:
        name, sep, rest = value.partition(":")
        if not sep or not name:
            raise ParameterError(f"expected NAME:KEY=VALUE[,...], got {value!r}")
        changes = params.parse_assignments([rest])
        unknown = set(changes) - {"active", "interval", "min_interval", "max_interval"}
        if unknown:
            raise ParameterError(
                f"unknown data collector setting(s) {', '.join(sorted(unknown))} "
                "(known: active, interval, min_interval, max_interval)"
            )
        result.setdefault(name, {}).update(changes)
    return result


# --- init ---------------------------------------------------------------------------------------


@cluster.command()
@click.argument("name")
@click.option("--master-node", help="Name of the first node, the master (default: this host).")
@click.option("--primary-ip", help="The master node's primary IP (default: resolved).")
@click.option("--secondary-ip", help="The master node's replication IP (default: none).")
@click.option("--master-ip", help="The cluster's floating master IP (default: the primary IP).")
@click.option("--master-netdev", default="eth0", show_default=True,
              help="Network device that carries the master IP.")
@click.option("--master-netmask", type=click.IntRange(0, 128), default=32, show_default=True)
@click.option("--enabled-hypervisors", default="kvm", show_default=True,
              help="Comma-separated hypervisors (kvm, xen-pvm, xen-hvm, lxc, chroot, fake).")
@click.option("--enabled-disk-templates", default="drbd,plain,file,diskless", show_default=True)
@click.option("--vg-name", default="xenvg", show_default=True, help="LVM volume group for disks.")
@click.option("--mac-prefix", default="aa:00:00", show_default=True)
@click.option("--uid-pool", help="User-id pool, e.g. 1000-1009,2000 (default: empty, disabled).")
@click.option("--candidate-pool-size", type=click.IntRange(1), default=10, show_default=True,
              help="How many master candidates the cluster keeps (nodes are promoted "
                   "automatically while there are fewer).")
@click.option("-H", "--hypervisor-parameters", "hv", multiple=True,
              metavar="HV:KEY=VALUE[,...]", help="Cluster hypervisor parameters.")
@click.option("-B", "--backend-parameters", "be", multiple=True, help=PARAM_HELP)
@click.option("-N", "--nic-parameters", "nic", multiple=True, help=PARAM_HELP)
@click.option("--node-parameters", "nd", multiple=True, help=PARAM_HELP)
@click.option("-D", "--disk-parameters", "disk", multiple=True, metavar="TEMPLATE:KEY=VALUE")
@click.option("--default-iallocator", multiple=True, metavar="[TYPE=]NAME[,NAME]",
              help="Default iallocator(s), for every request type or one (repeatable).")
@click.option("--hmac-key", "hmac_key_file", type=click.Path(exists=True, dir_okay=False),
              help="Adopt this HMAC key file instead of generating one.")
@click.option("--force", is_flag=True,
              help="Initialise even when the cluster's name (or the master's, without "
                   "--primary-ip) does not resolve or resolves to a loopback address.")
@json_option
@click.pass_context
def init(ctx: click.Context, name: str, master_node: str | None, primary_ip: str | None,
         secondary_ip: str | None, master_ip: str | None, master_netdev: str,
         master_netmask: int, enabled_hypervisors: str, enabled_disk_templates: str,
         vg_name: str, mac_prefix: str, uid_pool: str | None, candidate_pool_size: int,
         hv: tuple[str, ...],
         be: tuple[str, ...], nic: tuple[str, ...], nd: tuple[str, ...],
         disk: tuple[str, ...], default_iallocator: tuple[str, ...],
         hmac_key_file: str | None, force: bool, as_json: bool) -> None:
    """Create a new cluster NAME: its config, HMAC key, certificate and RAPI users file.

    The config goes to --config / $HERDER_CONFIG; the secrets are written beside it (mode
    0600), with the master's node certificate (node.pem). The first node, the master, is
    this host unless --master-node says otherwise; run on it, init brings the master IP up on
    --master-netdev. Refuses to overwrite an existing config or secret, and (unless --force)
    a cluster name that does not resolve or resolves to a loopback address; --master-ip
    defaults to the cluster name's address.

    \b
    Example:
      herder --config /tmp/c/config.json cluster init cluster.example.com \\
          --master-node node1.example.com --primary-ip 192.0.2.10 --uid-pool 2000-2099
    """
    from herder.masterd import cluster_init

    settings = cluster_init.InitSettings(
        name=name, master_node=master_node, primary_ip=primary_ip, secondary_ip=secondary_ip,
        master_ip=master_ip, master_netdev=master_netdev, master_netmask=master_netmask,
        enabled_hypervisors=tuple(h for h in enabled_hypervisors.split(",") if h),
        enabled_disk_templates=tuple(t for t in enabled_disk_templates.split(",") if t),
        vg_name=vg_name, mac_prefix=mac_prefix,
        uid_pool=tuple(uidpool.parse_pool(uid_pool)) if uid_pool else (),
        hvparams=parse_hv_options(hv), beparams=params.parse_assignments(be),
        nicparams=params.parse_assignments(nic), ndparams=params.parse_assignments(nd),
        diskparams=parse_disk_options(disk),
        default_iallocators=parse_default_iallocators(default_iallocator),
        hmac_key=Path(hmac_key_file).read_bytes() if hmac_key_file else None, force=force,
        candidate_pool_size=candidate_pool_size)
    store = store_from(ctx)
    done = cluster_init.init_cluster(store, settings)
    c, node, paths = done.config.cluster, done.master, done.secrets
    if node.name == cluster_init.local_fqdn():
        # as Ganeti's master-IP setup: the master IP comes up on the master's netdev
        from herder.supervise import masterip

        try:
            network = masterip.MasterNetwork(c.master_ip, c.master_netmask, c.master_netdev,
                                             c.primary_ip_family)
            click.echo(masterip.activate(network, arping=masterip.find_arping()), err=True)
        except HerderError as err:
            click.echo(f"warning: the master IP is not up ({err}); `herder daemon-util "
                       "activate-master-ip` brings it up", err=True)
    if as_json:
        print_json({"config": str(store.path), "cluster": c.name, "uuid": c.uuid,
                    "master_node": node.name, "secrets": [str(p) for p in paths.all()]})
    else:
        click.echo(f"Initialised cluster {c.name} (uuid {c.uuid}) in {store.path}")
        click.echo(f"Master node: {node.name} ({node.primary_ip}); secrets: "
                   f"{paths.hmac_key.parent}/{{{', '.join(p.name for p in paths.all())}}}")


# --- info ---------------------------------------------------------------------------------------


def cluster_info(config: model.ConfigData) -> dict[str, Any]:
    c = config.cluster
    return {
        "name": c.name,
        "uuid": c.uuid,
        "serial_no": config.serial_no,
        "created": timestamp(c.ctime),
        "modified": timestamp(config.mtime),
        "master node": config.node_name(c.master_node),
        "master epoch": c.master_epoch,
        "master lease ttl": c.master_lease_ttl,
        "master ip": c.master_ip,
        "master netdev": c.master_netdev,
        "master netmask": c.master_netmask,
        "nodes": len(config.nodes),
        "node groups": len(config.nodegroups),
        "instances": len(config.instances),
        "tags": c.tags,
        "enabled hypervisors": c.enabled_hypervisors,
        "enabled disk templates": c.enabled_disk_templates,
        "volume group": c.volume_group_name,
        "mac prefix": c.mac_prefix,
        "candidate pool size": c.candidate_pool_size,
        "rapi anonymous reads": c.rapi_anonymous_reads,
        "uid pool": uidpool.format_pool(c.uid_pool),
        "default iallocators": {k: c.default_iallocators.get(k, [])
                                for k in model.IALLOCATOR_REQUEST_TYPES},
        "hypervisor parameters": {
            hv: params.fill(params.hv_family(hv).defaults(), c.hvparams.get(hv))
            for hv in c.enabled_hypervisors
        },
        "backend parameters": params.fill(params.BE_FAMILY.defaults(), c.beparams),
        "nic parameters": params.fill(params.NIC_FAMILY.defaults(), c.nicparams),
        "node parameters": params.fill(params.ND_FAMILY.defaults(), c.ndparams),
        "disk parameters": {dt: config.filled_diskparams(dt) for dt in c.enabled_disk_templates},
        "instance policy": model.to_builtins(c.ipolicy),
        "data collectors": model.to_builtins(c.data_collectors),
        "maintenance": {
            "enabled": config.maintenance.enabled,
            "round delay": config.maintenance.round_delay,
            "auto balance": config.maintenance.balance,
            "balance threshold": config.maintenance.balance_threshold,
            "balance disk moves": config.maintenance.balance_disk_moves,
            "balance dynamic load": config.maintenance.balance_dynamic_load,
            "node recovery": config.maintenance.node_recovery,
            "node failure time": config.maintenance.node_failure_time,
            "incidents": len(config.maintenance.incidents),
        },
    }


@cluster.command()
@json_option
@remote.pass_store
def info(store: ConfigStore, as_json: bool) -> None:
    """Show the cluster's settings and filled (effective) parameters."""
    config = store.load()
    if as_json:
        data = model.to_builtins(config.cluster)
        data["uid_pool_text"] = uidpool.format_pool(config.cluster.uid_pool)
        data["serial_no_config"] = config.serial_no
        data["counts"] = {"nodes": len(config.nodes), "node_groups": len(config.nodegroups),
                          "instances": len(config.instances)}
        click.echo(json.dumps(data, indent=2, sort_keys=True))
        return
    print_mapping(cluster_info(config))


# --- verify -------------------------------------------------------------------------------------


@cluster.command()
@json_option
@click.option("--config-only", is_flag=True,
              help="Only check the config file; do not ask the node daemons.")
@click.option("--error-codes", is_flag=True,
              help="Machine-readable lines, as Ganeti's: SEVERITY:CODE:TYPE:OBJECT:MESSAGE.")
@click.pass_context
def verify(ctx: click.Context, as_json: bool, config_only: bool, error_codes: bool) -> None:
    """Check the config and the nodes for inconsistencies; exit 1 if any error is found.

    Reports instances on unknown nodes, duplicate names, MACs, IPs and DRBD ports/minors,
    disabled hypervisors or templates, and instances outside their group's instance policy.
    Then, through masterd (one OP_CLUSTER_VERIFY_GROUP per node group), what runs where: an
    instance running on a node that is not its primary, an admin-up instance not running on
    its primary, a node daemon that does not answer; and the disks: LVs missing on a node,
    degraded or unreadable mirrors of instances whose disks are active (Ganeti's messages).
    Each node's prerequisites, as Ganeti's node checks (its codes and messages): the volume
    group and its PVs (ENODELVM), the NICs' bridges and links (ENODENET), DRBD's usermode helper
    and version (ENODEDRBDHELPER), the file storage paths (ENODEFILESTORAGEPATH*), the OS
    definitions against a reference node (ENODEOS), the hypervisor, the KVM probe's verdict and
    the files its parameters name (ENODEHV), the clock (ENODETIME), certificate expiry
    (ECLUSTERCERT). Without masterd (or with --offline) the node checks are skipped with a
    warning.
    """
    config = remote.config_source(ctx).load()
    findings = verify_config(config)
    if not config_only:
        findings += node_findings(ctx, config)
    if as_json:
        print_json([
            {"severity": f.severity, "code": f.code, "object": f.object, "message": f.message}
            for f in findings
        ])
    else:
        for finding in findings:
            click.echo(finding.with_code() if error_codes else str(finding))
        errors = sum(f.severity == "error" for f in findings)
        click.echo(f"{errors} error(s), {len(findings) - errors} warning(s)")
    if any(f.severity == "error" for f in findings):
        raise click.exceptions.Exit(1)


def node_findings(ctx: click.Context, config: model.ConfigData) -> list[Finding]:
    """What the node daemons report, judged by masterd; a warning when they cannot be asked."""
    if remote.offline(ctx):
        return [Finding("warning", "nodes-not-checked", "cluster",
                        "the node daemons were not asked (--offline)")]
    ops = [{"OP_ID": "OP_CLUSTER_VERIFY_GROUP", "group_name": group.name}
           for group in sorted(config.nodegroups.values(), key=lambda g: g.name)]
    try:
        results = remote.run(ctx, ops)
    except HerderError as err:
        return [Finding("warning", "nodes-not-checked", "cluster",
                        f"the node daemons were not asked: {err}")]
    return [Finding(f["severity"], f["code"], f["object"], f["message"])
            for result in results for f in result or []]


@cluster.command("verify-disks")
@click.option("--node-group", "group", help="Only this node group.")
@click.pass_context
def verify_disks(ctx: click.Context, group: str | None) -> None:
    """Check the disks of instances whose disks should be active (OP_CLUSTER_VERIFY_DISKS, as
    gnt-cluster verify-disks): activates the disks of instances that need it, lists missing
    logical volumes and the unknown ones (no instance has them there); exit 1 when a node
    could not be asked or volumes are missing or unknown."""
    op: dict[str, Any] = {"OP_ID": "OP_CLUSTER_VERIFY_DISKS"}
    if group:
        op["group_name"] = group
    (results,) = remote.run(ctx, [op])
    failed = False
    for bad_nodes, instances, missing, *more in results or []:
        for node, text in bad_nodes.items():
            click.echo(f"Error gathering data on node {node}: {text[-400:]}")
            failed = True
            click.echo("You need to fix these nodes first before fixing instances")
        for name in instances:
            if name in missing:
                continue
            click.echo(f"Activating disks for instance '{name}'")
            try:
                remote.run(ctx, [{"OP_ID": "OP_INSTANCE_ACTIVATE_DISKS",
                                  "instance_name": name}])
            except HerderError as err:
                failed = True
                click.echo(f"Error activating disks for instance {name}: {err}", err=True)
        if missing:
            for name, volumes in missing.items():
                if all(node in bad_nodes for node, _ in volumes):
                    click.echo(f"Instance {name} cannot be verified as it lives on broken "
                               "nodes")
                    continue
                click.echo(f"Instance {name} has missing logical volumes:")
                for node, volume in sorted(volumes):
                    broken = "broken node " if node in bad_nodes else ""
                    click.echo(f"\t{broken}{node} /dev/{volume}")
            click.echo("You need to replace or recreate disks for all the above instances if "
                       "this message persists after fixing broken nodes.")
            failed = True
        elif not instances:
            click.echo("No disks need to be activated.")
        for node, volumes in sorted((more[0] if more else {}).items()):
            for volume in volumes:  # herder's: a copy a killed move left (compat B24)
                click.echo(f"Node {node}: volume {volume} is unknown (no instance has it "
                           "there)")
                failed = True
    if failed:
        raise click.exceptions.Exit(1)


@cluster.command("repair-disk-sizes")
@click.argument("instances", nargs=-1, metavar="[INSTANCE...]")
@click.pass_context
def repair_disk_sizes(ctx: click.Context, instances: tuple[str, ...]) -> None:
    """Correct the disk sizes the config records where the primary nodes' volumes differ
    (OP_CLUSTER_REPAIR_DISK_SIZES, as gnt-cluster repair-disk-sizes)."""
    (changes,) = remote.run(ctx, [{"OP_ID": "OP_CLUSTER_REPAIR_DISK_SIZES",
                                   "instances": list(instances)}])
    for name, index, field, size in changes or []:
        click.echo(f"Updated {field} of {name} disk/{index} to {size} MiB")
    if not changes:
        click.echo("No disk sizes needed changing.")


@cluster.command("search-tags")
@click.argument("pattern")
@click.pass_context
def search_tags(ctx: click.Context, pattern: str) -> None:
    """Every tag of the cluster, its instances, nodes, node groups and networks matching a
    regular expression, with where it is (OP_TAGS_SEARCH, as gnt-cluster search-tags); exit 1
    when none does."""
    (found,) = remote.run(ctx, [{"OP_ID": "OP_TAGS_SEARCH", "pattern": pattern}])
    for path, tag in found or []:
        click.echo(f"{path} {tag}")
    if not found:
        raise click.exceptions.Exit(1)


@cluster.command()
@click.option("--yes-do-it", is_flag=True, required=True,
              help="Confirm: the cluster is destroyed (its config is put aside).")
@click.pass_context
def destroy(ctx: click.Context, yes_do_it: bool) -> None:
    """Destroy a cluster of its master node alone, without instances (OP_CLUSTER_DESTROY, as
    gnt-cluster destroy). On the master, the config file and its journal are then renamed
    `*.destroyed` (kept, not deleted), so no herder daemon loads the cluster again; stop the
    master's daemons afterwards."""
    from herder.core.store import FileStore

    (master,) = remote.run(ctx, [{"OP_ID": "OP_CLUSTER_DESTROY"}])
    store = store_from(ctx)
    put_aside = []
    if isinstance(store, FileStore) and store.exists():
        for path in sorted(store.path.parent.glob(f"{store.path.name}*")):
            if not path.name.endswith(".destroyed"):
                path.rename(path.with_name(path.name + ".destroyed"))
                put_aside.append(path.name)
    click.echo(f"Cluster destroyed (master {master}); "
               + (f"put aside: {', '.join(put_aside)}" if put_aside
                  else "no config file here to put aside"))


# --- modify -------------------------------------------------------------------------------------


@cluster.command()
@click.option("--uid-pool", help="Replace the uid pool, e.g. 1000-1009,2000 ('' empties it).")
@click.option("--add-uids", help="Add user-ids/ranges to the pool.")
@click.option("--remove-uids", help="Remove user-ids/ranges from the pool.")
@click.option("-H", "--hypervisor-parameters", "hv", multiple=True,
              metavar="HV:KEY=VALUE[,...]", help="Change cluster hypervisor parameters.")
@click.option("-B", "--backend-parameters", "be", multiple=True, help=PARAM_HELP)
@click.option("-N", "--nic-parameters", "nic", multiple=True, help=PARAM_HELP)
@click.option("--node-parameters", "nd", multiple=True, help=PARAM_HELP)
@click.option("-D", "--disk-parameters", "disk", multiple=True, metavar="TEMPLATE:KEY=VALUE")
@click.option("--enabled-hypervisors", help="Comma-separated list.")
@click.option("--enabled-disk-templates", help="Comma-separated list.")
@click.option("--master-netdev")
@click.option("--candidate-pool-size", type=click.IntRange(1))
@click.option("--master-lease-ttl", type=int,  # its bounds: the opcode's, one line
              help="etcd backend: the master lease's TTL in seconds (default 10): a dead master "
              "is replaced within about this long; the next election uses it (docs/ha.md).")
@click.option("--default-iallocator", multiple=True, metavar="[TYPE=]NAME[,NAME]",
              help="Set default iallocator(s) for every request type or one ('' clears).")
@click.option("--data-collector", multiple=True, metavar="NAME:KEY=VALUE[,...]",
              help="Collector settings: active, interval, min_interval, max_interval (s).")
@click.option("--ipolicy-vcpu-ratio", type=float)
@click.option("--ipolicy-spindle-ratio", type=float)
@click.option("--ipolicy-disk-templates", help="Comma-separated templates the policy allows.")
@click.option("--ipolicy-bounds-specs", metavar="min:KEY=VAL,.../max:KEY=VAL,...[//...]",
              help="The instance specs' bounds, every key given (memory-size, cpu-count, "
              "disk-count, disk-size, nic-count, spindle-use), as gnt-cluster's.")
@click.option("--maintenance", "maintenance_on", type=YES_NO, help="Enable the maintenance daemon.")
@click.option("--maintenance-interval", type=click.IntRange(0),
              help="Seconds between maintenance rounds.")
@click.option("--maintd-harep", type=YES_NO, help="Let maintd do harep-style instance repairs.")
@click.option("--auto-balance-cluster", type=YES_NO, help="Let maintd balance the cluster.")
@click.option("--auto-balance-threshold", type=float, help="Minimum score gain to balance.")
@click.option("--auto-balance-disk-moves", type=YES_NO,
              help="Let balancing move secondaries (default yes; no: primaries only).")
@click.option("--auto-balance-dynamic-load", type=YES_NO,
              help="Balance with the agents' cpu-avg-load as dynamic load (hbal --mond).")
@click.option("--maintenance-node-recovery", type=YES_NO,
              help="Let maintd fence dead nodes and recover their instances (default yes; "
              "docs/ha.md \"Node failure\").")
@click.option("--maintenance-node-failure-time", type=float,
              help="Seconds without a lease renewal before maintd suspects a node (6-600; 0: "
              "maintd's --node-failure-time, 12 s; docs/ha.md \"Timings\").")
@click.option("--diagnose-data-collector-filename", "diagnose_command",
              help="Self-diagnose command name ('' for the built-in all-is-well).")
@click.option("--rapi-anonymous-reads", type=YES_NO,
              help="Answer RAPI GET requests without credentials, as Ganeti's RAPI (htools' "
              "-m); secrets stay redacted, writes need a user (default no).")
@click.option("--rename", "new_name", help="Rename the cluster (its UUID stays).")
@click.option("--dry-run", is_flag=True, help="Check everything, change nothing.")
@click.pass_context
def modify(ctx: click.Context, uid_pool: str | None, add_uids: str | None,
           remove_uids: str | None, hv: tuple[str, ...], be: tuple[str, ...],
           nic: tuple[str, ...], nd: tuple[str, ...], disk: tuple[str, ...],
           enabled_hypervisors: str | None, enabled_disk_templates: str | None,
           master_netdev: str | None, candidate_pool_size: int | None,
           master_lease_ttl: int | None, default_iallocator: tuple[str, ...],
           data_collector: tuple[str, ...],
           ipolicy_vcpu_ratio: float | None, ipolicy_spindle_ratio: float | None,
           ipolicy_disk_templates: str | None, ipolicy_bounds_specs: str | None,
           maintenance_on: str | None,
           maintenance_interval: int | None, maintd_harep: str | None,
           auto_balance_cluster: str | None,
           auto_balance_threshold: float | None, auto_balance_disk_moves: str | None,
           auto_balance_dynamic_load: str | None, maintenance_node_recovery: str | None,
           maintenance_node_failure_time: float | None,
           diagnose_command: str | None, rapi_anonymous_reads: str | None,
           new_name: str | None, dry_run: bool) -> None:
    """Change cluster-wide settings. Nothing is written unless every change is valid.

    Goes through masterd as a job (OP_CLUSTER_SET_PARAMS), or with --offline straight to the
    config file.

    \b
    Examples:
      herder cluster modify --add-uids 3000-3009 --remove-uids 1005
      herder cluster modify -H kvm:kernel_path=/boot/vmlinuz,migration_port=8102
      herder cluster modify -B vcpus=2,maxmem=1G --data-collector drbd:interval=10
    """
    fields: dict[str, Any] = {}
    if uid_pool is not None:
        fields["uid_pool"] = uidpool.parse_pool(uid_pool)
    if add_uids:
        fields["add_uids"] = uidpool.parse_pool(add_uids)
    if remove_uids:
        fields["remove_uids"] = uidpool.parse_pool(remove_uids)
    if hv:
        fields["hvparams"] = parse_hv_options(hv)
    for key, values in (("beparams", be), ("nicparams", nic), ("ndparams", nd)):
        if values:
            fields[key] = params.parse_assignments(values)
    if disk:
        fields["diskparams"] = parse_disk_options(disk)
    if enabled_hypervisors is not None:
        fields["enabled_hypervisors"] = [h for h in enabled_hypervisors.split(",") if h]
    if enabled_disk_templates is not None:
        fields["enabled_disk_templates"] = [t for t in enabled_disk_templates.split(",") if t]
    if master_netdev is not None:
        fields["master_netdev"] = master_netdev
    if candidate_pool_size is not None:
        fields["candidate_pool_size"] = candidate_pool_size
    if master_lease_ttl is not None:
        fields["master_lease_ttl"] = master_lease_ttl
    if default_iallocator:
        fields["default_iallocators"] = parse_default_iallocators(default_iallocator)
    if data_collector:
        fields["data_collectors"] = parse_collector_options(data_collector)
    ipolicy: dict[str, Any] = {}
    if ipolicy_vcpu_ratio is not None:
        ipolicy["vcpu-ratio"] = ipolicy_vcpu_ratio
    if ipolicy_spindle_ratio is not None:
        ipolicy["spindle-ratio"] = ipolicy_spindle_ratio
    if ipolicy_disk_templates is not None:
        ipolicy["disk-templates"] = [t for t in ipolicy_disk_templates.split(",") if t]
    if ipolicy_bounds_specs is not None:
        ipolicy["minmax"] = parse_bounds_specs(ipolicy_bounds_specs)
    if ipolicy:
        fields["ipolicy"] = ipolicy
    if maintenance_on is not None:
        fields["maint_enabled"] = bool(yes_no(maintenance_on))
    if maintenance_interval is not None:
        fields["maint_round_delay"] = maintenance_interval
    if maintd_harep is not None:
        fields["maint_harep"] = bool(yes_no(maintd_harep))
    if auto_balance_cluster is not None:
        fields["maint_balance"] = bool(yes_no(auto_balance_cluster))
    if auto_balance_threshold is not None:
        fields["maint_balance_threshold"] = auto_balance_threshold
    if auto_balance_disk_moves is not None:
        fields["maint_balance_disk_moves"] = bool(yes_no(auto_balance_disk_moves))
    if auto_balance_dynamic_load is not None:
        fields["maint_balance_dynamic_load"] = bool(yes_no(auto_balance_dynamic_load))
    if maintenance_node_recovery is not None:
        fields["maint_node_recovery"] = bool(yes_no(maintenance_node_recovery))
    if maintenance_node_failure_time is not None:
        fields["maint_node_failure_time"] = maintenance_node_failure_time
    if diagnose_command is not None:
        fields["diagnose_data_collector_filename"] = diagnose_command
    if rapi_anonymous_reads is not None:
        fields["rapi_anonymous_reads"] = bool(yes_no(rapi_anonymous_reads))
    if new_name:
        fields["name"] = new_name
    if not fields:
        raise click.UsageError("nothing to change; see 'herder cluster modify --help'")
    op = {"OP_ID": "OP_CLUSTER_SET_PARAMS", "dry_run": dry_run, **fields}
    remote.run(ctx, [op], rapi=lambda api: api.modify_cluster(dry_run=dry_run, **fields))
    click.echo("Dry run: the change is valid; nothing was changed" if dry_run
               else "Modified the cluster")


@cluster.command("redist-conf")
@click.option("--json", "as_json", is_flag=True, help="Per node what was sent, as JSON.")
@click.pass_context
def redist_conf(ctx: click.Context, as_json: bool) -> None:
    """Push the config and job queue (master candidates), the ssconf files (every node) and the
    files that must agree cluster-wide, with the cluster secrets, to every online node now
    (OP_CLUSTER_REDIST_CONF through masterd; docs/ha.md "Redistribution")."""
    results = remote.run(ctx, [{"OP_ID": "OP_CLUSTER_REDIST_CONF"}])
    report = results[0] if results and isinstance(results[0], dict) else {}
    if as_json:
        click.echo(json.dumps(report, indent=2, sort_keys=True))
    else:
        for name, result in sorted(report.items()):
            errors = result.get("errors") or []
            click.echo(f"{name}: sent {len(result.get('sent') or [])} item(s)"
                       + (f", {len(errors)} error(s)" if errors else ""))
            for item in result.get("sent") or []:
                click.echo(f"  sent {item}")
            for error in errors:
                click.echo(f"  error: {error}")
    if any(r.get("errors") for r in report.values()):
        raise SystemExit(1)


# --- merge -------------------------------------------------------------------------------------


@cluster.command()
@click.argument("others", metavar="OTHER...", nargs=-1, required=True)
@click.option("--secrets-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("/var/lib/herder/merge"), show_default=True,
              help="Where the copies of each other cluster's secrets are: "
                   "DIR/OTHER/{hmac.key,server.pem,rapi_users,node.pem} (from its master).")
@click.option("--groups", type=click.Choice(["refuse", "merge", "rename"]), default="refuse",
              show_default=True, help="A node group name in both clusters: refuse the merge, "
              "put their nodes in our group of that name, or rename theirs.")
@click.option("--dry-run", is_flag=True, help="Only the checks and the plan.")
@remote.pass_store
def merge(store: ConfigStore, others: tuple[str, ...], secrets_dir: Path, groups: str,
          dry_run: bool) -> None:
    """Merge other herder clusters into this one (design-2.1 "Cluster Merger"); run it on
    this cluster's master.

    OTHER is the other cluster's name (it resolves to its master IP). First copy the other
    master's /var/lib/herder/{hmac.key,server.pem,rapi_users,node.pem} to
    --secrets-dir/OTHER/ (the borrowed key; removed again at the end). The other cluster is
    reached through its RAPI and its node daemons only. Its nodes join as non-master
    candidates, its instances are stopped and started again, DRBD ports are reallocated. A
    failing step rolls back until the configs are merged (the point of no return).
    """
    from herder.masterd import merge as merging

    if not isinstance(store, FileStore) or not store.exists():
        raise HerderError("run the merge on this cluster's master (it changes the config file)")
    for name in others:
        other = merging.OtherCluster(name, secrets_dir / name)
        job = merging.Merge(store.path, other, merging.RpcControl(), groups=groups,
                            say=click.echo)
        if dry_run:
            for line in job.plan():
                click.echo(f"plan: {line}")
            continue
        job.run()
        click.echo(f"merged {name} into {store.load().cluster.name}")


# --- import-ganeti ------------------------------------------------------------------------------


@cluster.command("import-ganeti")
@click.argument("source", type=click.Path(exists=True, dir_okay=False))
@click.option("--hmac-key", "hmac_key_file", type=click.Path(exists=True, dir_okay=False),
              help="Adopt Ganeti's hmac.key (confd clients keep working).")
@click.option("--force", is_flag=True, help="Replace an existing herder config.")
@click.pass_context
def import_ganeti(ctx: click.Context, source: str, hmac_key_file: str | None,
                  force: bool) -> None:
    """Turn a Ganeti config.data (SOURCE) into a herder config.

    Keeps names, UUIDs, parameters, tags, placement and DRBD ids. Writes the config to
    --config / $HERDER_CONFIG and creates the cluster secrets beside it (with Ganeti's HMAC
    key when --hmac-key is given). What could not be carried over is listed on stderr.
    """
    from herder.cli.common import store_from
    from herder.cli.ganeti_import import import_ganeti_file

    store = store_from(ctx)
    if store.exists() and not force:
        raise HerderError(f"{store.path} already exists; use --force to replace it")
    config, notes = import_ganeti_file(source)
    paths = cluster_secrets.SecretPaths.beside(store.path)
    hmac_key = Path(hmac_key_file).read_bytes() if hmac_key_file else None
    if not paths.hmac_key.exists():
        cluster_secrets.create_all(paths, config.cluster.name, hmac_key)
    elif hmac_key is not None and paths.hmac_key.read_bytes() != hmac_key:
        raise HerderError(f"{paths.hmac_key} exists with another key; remove it to adopt Ganeti's")
    store.replace(config)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    click.echo(
        f"Imported cluster {config.cluster.name}: {len(config.nodes)} nodes, "
        f"{len(config.instances)} instances, {len(config.nodegroups)} groups -> {store.path}"
    )


# --- master failover ----------------------------------------------------------------------------


@cluster.command("master-failover")
@click.option("--node", "node_name", help="The master candidate that takes over (default: this "
              "host's FQDN): run it there.")
@click.option("--no-voting", is_flag=True, help="Skip the vote of the nodes (a cluster that "
              "lost its majority); you make sure the old master is really gone.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation with --no-voting.")
@click.option("--masterd-port", type=click.IntRange(1, 65535), default=ports.MASTERD,
              show_default=True)
@click.option("--noded-port", type=click.IntRange(1, 65535), default=ports.NODED, show_default=True)
@click.option("--no-start", is_flag=True, help="Do not move the master IP nor start the "
              "master daemons here (only the config change and the epoch).")
@json_option
@remote.pass_store
def master_failover(store: ConfigStore, node_name: str | None, no_voting: bool, yes: bool,
                    masterd_port: int, noded_port: int, no_start: bool, as_json: bool) -> None:
    """Make this master candidate the master (Ganeti's gnt-cluster master-failover).

    \b
    1. The vote: this node and every other online node (through its noded) try to reach the
       master's masterd at the cluster's master IP; a majority of the online nodes, this one
       counted, must find it gone. An old master whose masterd is stopped consents that way
       (its noded still answers). --no-voting skips the vote, with a warning.
    2. In the config, in one change: master_node = this node, master_epoch + 1, and the
       master IP moves along when it was the old master's primary IP.
    3. Every reachable node is told the new epoch; from then on nodes refuse the old
       master's calls, and an old masterd exits with code 11 (also when started again).
    4. Through the node daemons, as Ganeti does: the old master's master IP goes down on its
       master_netdev and its master daemons stop (node_deactivate_master_ip,
       node_stop_master: warnings when it cannot be reached); then this node's master IP goes
       up and its masterd and maintd start (node_activate_master_ip,
       node_start_master_daemons), continuing from this node's copy of the config and job
       queue. --no-start leaves the last step to you.
    """
    from herder.masterd import cluster_init, failover

    def unvoted(old: str, new: str) -> None:
        click.echo("WARNING: --no-voting: the nodes are not asked whether the master "
                   f"{old} is gone; if it still runs, it is stopped only by the epoch "
                   "check", err=True)
        if not yes:
            click.confirm(f"Make {new} the master without a vote?", abort=True, err=True)

    def voted(old: str, votes: failover.Votes) -> None:
        if not as_json:
            click.echo(f"Vote on whether the master {old} is gone:")
            for line in votes.nodes:
                click.echo(f"  {line}")

    report = failover.failover(store, node_name or cluster_init.local_fqdn(),
                               voting=not no_voting, masterd_port=masterd_port,
                               noded_port=noded_port, start=not no_start, unvoted=unvoted,
                               voted=voted)
    if as_json:
        print_json(report)
        return
    click.echo(f"{report.new_master} is the master now (was {report.old_master}), master epoch "
               f"{report.epoch}, master IP {report.master_ip}")
    for line in report.nodes:
        click.echo(f"  {line}")
    if report.roles is None:
        click.echo(f"Start masterd (and maintd) on {report.new_master}; they continue the job "
                   "queue and maintd's state.")
        return
    for line in report.roles:
        click.echo(f"  {line}")
    if report.failed:
        raise click.exceptions.Exit(1)


# --- simulate -----------------------------------------------------------------------------------


@cluster.command(context_settings={"allow_interspersed_args": False})
@click.option("--nodes", type=click.IntRange(1, 200), default=3, show_default=True)
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              default=Path("/tmp/herder-sim"), show_default=True,
              help="Where the hosts' directories, the client profile and the logs go.")
@click.option("--stop", "stop_it", is_flag=True, help="Tear the simulated cluster down.")
@click.option("--no-mond", is_flag=True, help="Do not run a monitoring agent per node.")
@click.option("--no-maintd", is_flag=True, help="Do not run the maintenance daemon.")
@click.option("--first-ip", type=click.IntRange(1, 254), default=11, show_default=True,
              help="The cluster is published on 127.0.0.N, node i's mond on 127.0.0.(N+i).")
@click.option("--domain", default="sim.herder.test", show_default=True,
              help="DNS domain of the cluster and node names (clusters to merge differ).")
@click.option("--network", type=click.Path(file_okay=False, path_type=Path),
              help="Build the cluster in the network of the simulated cluster in this "
                   "directory (two clusters whose nodes reach each other: cluster merge).")
@click.option("--exec", "exec_on", metavar="NODE",
              help="Run COMMAND on NODE (inside its namespaces, as ssh would): its output "
                   "and exit code.")
@click.option("--break", "break_it", nargs=2, metavar="NODE STATUS",
              help="Make NODE's self-diagnose report STATUS (Ok, live-repair, evacuate, "
                   "evacuate-failover) in the running simulated cluster; Ok heals it.")
@click.option("--crash", "crash_it", metavar="INSTANCE",
              help="Destroy INSTANCE's domain behind herder's back (virsh on its node: what "
                   "a crashed VM looks like to libvirt's test driver); instmon reports it, "
                   "maintd recovers it.")
@click.option("--failover", "failover_to", metavar="NODE",
              help="Master failover to NODE (a master candidate): `herder cluster "
                   "master-failover` run on NODE (the vote, then the master IP and the master "
                   "daemons move through the node daemons).")
@click.option("--no-voting", is_flag=True, help="With --failover: skip the vote.")
@click.option("--power-off", "power_off", metavar="NODE",
              help="Cut NODE's power through its BMC (ipmi_sim; no grace: its processes and "
                   "guests end at once), as a power failure; maintd fences it and recovers "
                   "its instances elsewhere.")
@click.option("--power-on", "power_on", metavar="NODE", help="Power NODE on through its BMC.")
@click.option("--guests", type=click.Choice(["qemu", "test"]), default="qemu",
              show_default=True,
              help="qemu: real guests (each node's libvirtd runs the QEMU driver, TLS between "
                   "the nodes; the herder-guest OS boots a tiny Linux); test: libvirt's test "
                   "driver, which runs nothing (fast).")
@click.option("--hosts", "host_kind", type=click.Choice(["namespace", "debian"]),
              default="namespace", show_default=True,
              help="namespace: each node a namespaced host whose PID 1 is herder's supervisor "
                   "(fast); debian: each node a Debian 12 machine booting systemd "
                   "(systemd-nspawn on a cached debootstrapped root, the first start builds "
                   "it), herder installed from this checkout's wheel by the install guide's "
                   "script (docs/install.md; with --guests qemu only).")
@click.option("--ceph", is_flag=True,
              help="A real Ceph (one monitor, one OSD, the pool herder) in the cluster's "
                   "network; every node gets its client configuration and key (on Debian "
                   "hosts by the guide's `node-install.sh ceph-client` step); the rbd "
                   "template is enabled (access=userspace: QEMU reads images through librbd).")
@click.option("--store", type=click.Choice(["file", "etcd"]), default="file",
              show_default=True,
              help="Where the config lives. etcd: one etcd member (TLS, client certificates, "
                   "authentication) in the cluster's network outside every host, as an "
                   "external etcd cluster; masterd campaigns for the master lease on every "
                   "node and the one elected brings up the master IP and starts maintd "
                   "(docs/ha.md).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def simulate(nodes: int, directory: Path, stop_it: bool, no_mond: bool, no_maintd: bool,
             first_ip: int, domain: str, network: Path | None, exec_on: str | None,
             break_it: tuple[str, str] | None, crash_it: str | None, failover_to: str | None,
             no_voting: bool, power_off: str | None, power_on: str | None, guests: str,
             host_kind: str,
             ceph: bool, store: str, command: tuple[str, ...]) -> None:
    """Bring up a whole herder cluster on this machine: every node a host of its own.

    Each node is a set of namespaces (its own processes, network, mounts and host name) whose
    supervisor runs herder's daemons with the defaults of a real host; its own libvirtd runs
    real guests (QEMU; `-o herder-guest` boots a tiny Linux printing a heartbeat on its serial
    console) or, with --guests test, libvirt's test driver. node1 runs `herder cluster init`,
    the others are added with `herder node add --join-token` (each node's noded makes its
    token); node1 is the master, nodes 1-3 are master candidates. From this machine the
    cluster is reached through published ports (masterd and maintd on 127.0.0.11, node i's
    mond on 127.0.0.(11+i)) with the client profile it prints:

    \b
      export HERDER_CLIENT=/tmp/herder-sim/client/client.toml
      herder instance add web1 -t drbd -o debootstrap+default --disk 1G
      herder node evacuate node2.sim.herder.test
      herder maintd status; herder mond status --node node2
      herder cluster simulate --exec node1 -- herder cluster info
      herder cluster simulate --break node3 evacuate   # maintd drains and evacuates it
      herder cluster simulate --crash web1             # maintd starts it again
      herder cluster simulate --power-off node3        # maintd fences it, recovers web1
      herder cluster simulate --exec node1 -- herder daemon-util stop-master
      herder cluster simulate --failover node2         # node2 becomes the master
      herder cluster simulate --stop
    """
    from herder.sim import cluster as sim_cluster

    if command and not exec_on:
        raise click.UsageError("COMMAND needs --exec NODE")
    if exec_on:
        if not command:
            raise click.UsageError("give the command to run: --exec NODE -- COMMAND...")
        import os

        from herder.sim.host import node_environment

        state = sim_cluster.load_state(directory)
        argv = state.host(exec_on).nsenter_argv(list(command))
        os.chdir("/")
        os.execvpe(argv[0], argv, node_environment(state.node_environment))
    if failover_to:
        state, _ = sim_cluster.failover(directory, failover_to, voting=not no_voting,
                                        progress=click.echo)
        click.echo(f"{failover_to} is the master now; RAPI at {state.masterd_url} (the "
                   "cluster's address follows the master IP)")
        return
    if power_off or power_on:
        node = power_off or power_on
        assert node is not None
        said = sim_cluster.power(directory, node, on=power_on is not None)
        click.echo(f"{node}: {said}")
        return
    if crash_it:
        node = sim_cluster.crash_instance(directory, crash_it)
        click.echo(f"{crash_it} crashed on {node}; instmon reports it to maintd, which starts "
                   "it again (herder maintd status)")
        return
    if break_it:
        sim_cluster.break_node(directory, break_it[0], break_it[1])
        click.echo(f"{break_it[0]}'s self-diagnose now reports {break_it[1]}; watch maintd "
                   "act on it (herder maintd status, or its status page)")
        return
    if stop_it:
        click.echo("Stopped the simulated cluster" if sim_cluster.stop(directory)
                   else f"No simulated cluster is running in {directory}")
        return
    state = sim_cluster.start(directory, nodes, mond=not no_mond, maintd=not no_maintd,
                              first_ip=first_ip, progress=click.echo, domain=domain,
                              network=network, guests=guests, ceph=ceph, store=store,
                              hosts=host_kind)
    click.echo(f"Simulated cluster {state.cluster_name} of {nodes} node(s) is up; RAPI at "
               f"{state.masterd_url}, maintd at {state.maintd_url}/status.html")
    click.echo("Drive it from this shell with:")
    for name, value in state.client_environment().items():
        click.echo(f"  export {name}={value}")
    click.echo("  unset HERDER_CONFIG HERDER_MASTERD HERDER_OFFLINE")
    click.echo(f"On a node: herder cluster simulate --dir {directory} --exec node1 -- COMMAND")
    click.echo(f"Stop it with: herder cluster simulate --stop --dir {directory}")


# --- renew-crypto -------------------------------------------------------------------------------


@cluster.command("renew-crypto")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--noded-port", type=click.IntRange(1, 65535), default=ports.NODED, show_default=True)
@remote.pass_store
def renew_crypto(store: ConfigStore, yes: bool, noded_port: int) -> None:
    """Replace the cluster CA (server.pem, also the RAPI certificate), every node's certificate
    and the HMAC key; run it on the master. Instances keep running: the new secrets are
    accepted beside the old ones on every node before the old ones are retired, then the
    daemons that read the key at start restart. Clients that pin the cluster certificate fetch
    the new one. An offline node must join again afterwards."""
    from herder.masterd import renew

    path = getattr(store, "path", None)
    if not isinstance(path, Path) or not path.exists():
        raise HerderError("renew-crypto needs the config file: run it on the master")
    if not yes:
        click.confirm("Replace the cluster CA, the node certificates and the HMAC key?",
                      abort=True)
    digests = renew.renew(path, say=lambda line: click.echo(line, err=True), port=noded_port)
    click.echo(f"Renewed the cluster CA, the HMAC key and {len(digests)} node certificates")
