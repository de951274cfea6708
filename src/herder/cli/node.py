"""`herder node ...`: the cluster's nodes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from herder.cli import listing, remote
from herder.cli.common import (
    PARAM_HELP,
    YES_NO,
    json_option,
    print_json,
    print_mapping,
    print_table,
    timestamp,
    yes_no,
)
from herder.core import roles
from herder.core.errors import ConfigError, HerderError

if TYPE_CHECKING:
    from herder.core import model


@click.group()
def node() -> None:
    """List, add, change and remove nodes. NODE is a name, a unique short name or a UUID."""


def _check_ip(value: str | None, what: str) -> None:
    if value is None:
        return
    from herder.core import names

    try:
        names.ip_address(value, what)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def _role(config: model.ConfigData, n: model.Node) -> str:
    return roles.NAMES[roles.node_role(n, config.cluster.master_node)]


LIST = listing.ListSpec(
    "node", "nodes",
    # Ganeti's gnt-node list defaults
    ("name", "dtotal", "dfree", "mtotal", "mnode", "mfree", "pinst_cnt", "sinst_cnt"),
    ("name", "uuid", "role", "group", "pip", "sip", "master_candidate", "master_capable",
     "vm_capable", "offline", "drained", "pinst_cnt", "sinst_cnt", "tags", "mtotal", "mnode",
     "mfree", "dtotal", "dfree", "ctotal", "cnos", "cnodes", "csockets", "sptotal", "spfree"),
    formats=dict.fromkeys(("pinst_list", "sinst_list", "tags"), listing.join))


@node.command("list")
@listing.list_options(LIST)
@click.pass_context
def list_(ctx: click.Context, names: tuple[str, ...], output: str | None, force_filter: bool,
          no_headers: bool, separator: str | None, verbose: bool, as_json: bool,
          units: str | None) -> None:
    """List nodes, as gnt-node list: NAME... (or a filter, e.g. 'pinst_cnt > 0 and not
    offline') selects them, -o the fields (list-fields shows them all). Live figures come
    from masterd (`*` for an offline node, `?` for one that did not answer)."""
    listing.run_list(ctx, LIST, names, output=output, force_filter=force_filter,
                     no_headers=no_headers, separator=separator, units=units,
                     verbose=verbose, as_json=as_json)


listing.add_list_fields(node, LIST)


@node.command()
@click.argument("names", nargs=-1, required=True, metavar="NODE...")
@json_option
@click.pass_context
def info(ctx: click.Context, names: tuple[str, ...], as_json: bool) -> None:
    """Show everything about one or more nodes, with their filled node parameters, how KVM
    instances run there (the node's KVM probe) and the herder build its noded runs (both
    from masterd)."""
    from herder.core import model

    config = remote.config_source(ctx).load()
    nodes = [config.find_node(name) for name in names]
    kvm, versions = _live_facts(ctx, [n.name for n in nodes])
    out = []
    for n in nodes:
        data = model.to_builtins(n)
        data["role"] = _role(config, n)
        data["group_name"] = config.nodegroups[n.group].name if n.group in config.nodegroups \
            else None
        data["filled_ndparams"] = config.filled_ndparams(n)
        data["primary_instances"] = [i.name for i in config.primary_instances(n.uuid)]
        data["secondary_instances"] = [i.name for i in config.secondary_instances(n.uuid)]
        data["kvm"] = kvm.get(n.name, "unknown (the node has not said: not probed yet, "
                                           "not answering, or no KVM node)")
        data["herder_version"] = versions.get(n.name, "unknown (not answering, or a noded "
                                                      "older than build versions)")
        out.append(data)
    if as_json:
        print_json(out)
        return
    for data in out:
        data["ctime"], data["mtime"] = timestamp(data["ctime"]), timestamp(data["mtime"])
        click.echo(f"Node {data.pop('name')}:")
        print_mapping(data, 1)


def _live_facts(ctx: click.Context,
                names: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """Node name -> the KVM probe's verdict in one line, and node name -> the herder build
    its noded runs, for the nodes that answered masterd (herder's query fields `kvm_accel`,
    `kvm_reason` and `herder_version`)."""
    from herder.masterd.livefields import RS_NORMAL

    answer = remote.query(ctx, "node", ["name", "kvm_accel", "kvm_reason", "herder_version"],
                          ["|", *(["=", "name", name] for name in names)])
    verdicts, versions = {}, {}
    for (_, name), (status, accel), (_, reason), (v_status, version) in answer.data:
        if status == RS_NORMAL:
            how = "hardware KVM" if accel == "kvm" else "emulated (TCG)"
            verdicts[str(name)] = f"{how}: {reason}"
        if v_status == RS_NORMAL:
            versions[str(name)] = str(version)
    return verdicts, versions


@node.command()
@click.argument("name")
@click.option("--ip", "--primary-ip", "primary_ip", required=True, help="Primary IP address.")
@click.option("--secondary-ip", help="Replication (DRBD) IP address.")
@click.option("--group", "group_name", help="Node group (default: the first group).")
@click.option("--master-capable/--no-master-capable", default=True, show_default=True)
@click.option("--vm-capable/--no-vm-capable", default=True, show_default=True)
@click.option("--node-parameters", "nd", multiple=True, help=PARAM_HELP)
@click.option("--readd", is_flag=True, help="Re-add a known node (keeps its UUID).")
@click.option("--join-token", help="The token `herder node join-token` prints on the new node: "
                                   "the master joins it (its certificate, the cluster's key, "
                                   "ssconf) before adding it.")
@click.option("--no-node-check", is_flag=True,
              help="Without --join-token: add the node without reaching its node daemon first "
                   "(by default its port must answer, as Ganeti's node add).")
@click.pass_context
def add(ctx: click.Context, name: str, primary_ip: str, secondary_ip: str | None,
        group_name: str | None, master_capable: bool, vm_capable: bool,
        nd: tuple[str, ...], readd: bool, join_token: str | None, no_node_check: bool) -> None:
    """Add node NAME to the cluster (OP_NODE_ADD).

    With --join-token, the master reaches the node's noded (which runs without the cluster's
    secrets and printed the token), checks its certificate against the token, proves it knows
    the token's secret, signs the node's own certificate and gives it the cluster's key and
    ssconf; only then is the node written into the config. A node that cannot be reached,
    a wrong token or a node of another cluster is one line, and the config is unchanged.
    Without it, the node's daemon port must answer on its addresses (--no-node-check: not
    asked).
    """
    from herder.core import params

    op = {"OP_ID": "OP_NODE_ADD", "node_name": name, "primary_ip": primary_ip,
          "secondary_ip": secondary_ip, "group": group_name, "master_capable": master_capable,
          "vm_capable": vm_capable, "readd": readd,
          "ndparams": params.parse_assignments(nd) if nd else None}
    if no_node_check:
        op["node_check"] = False
    if join_token is not None:
        from herder.core import node_certs

        try:
            node_certs.parse_token(join_token)
        except node_certs.CertificateError as err:
            raise click.UsageError(str(err)) from None
        op["join_token"] = join_token
    (uuid,) = remote.run(ctx, [op])
    click.echo(f"Added node {name} (uuid {uuid})")


@node.command("libvirt-tls")
@click.option("--listen", "listen_address", help="Address libvirtd's TLS port listens on "
              "(default: this node's primary IP, from ssconf).")
@click.option("--restart", is_flag=True, help="On a systemd host: restart libvirt's sockets "
              "and libvirtd even when nothing changed.")
@click.pass_context
def libvirt_tls(ctx: click.Context, listen_address: str | None, restart: bool) -> None:
    """Configure this node's libvirtd for TLS only (once, on a node the master has added; again
    to repair it): libvirtd.conf, the libvirt CAs of ssconf, the node's libvirt certificate the
    master issued. On a systemd host (Debian's socket-activated libvirtd) also the socket
    units' drop-ins (TLS on the primary IP only, the unix sockets root's alone), the TLS socket
    enabled, and the sockets and libvirtd restarted when anything changed or the running
    sockets differ (running guests go on); the storage directories traversable by QEMU's
    user. A libvirtd herder's supervisor runs must be restarted with --listen afterwards.
    From then on the master keeps its trust current (node add and remove, renew-crypto)
    without a restart."""
    import socket
    from pathlib import Path

    from herder.core import ssconf
    from herder.core.libvirtd_conf import LIBVIRT_TLS_PORT, tls_listen
    from herder.core.store import default_config_path
    from herder.noded import libvirt_systemd, libvirtcheck
    from herder.noded import libvirt_tls as setup

    directory = Path((ctx.find_root().obj or {}).get("config_path")
                     or default_config_path()).parent
    done = setup.install(socket.getfqdn(), directory, listen_address=listen_address)
    click.echo(f"libvirtd: TLS on {done.listen_address}:{LIBVIRT_TLS_PORT}, trusting "
               f"{done.trusted} libvirt CA(s); PKI in {done.pki.directory}, {done.conf} "
               f"{'written' if done.changed else 'unchanged'}")
    # QEMU's access to the disks (Debian's runs as libvirt-qemu): the storage directories of
    # ssconf, and the instances' below them, traversable by it (new ones are made 0711)
    storage = [path for name in ("file_storage_dir", "shared_file_storage_dir")
               if (path := ssconf.read(name, directory))]
    user = libvirtcheck.qemu_user_here()
    for changed in libvirtcheck.grant_traversal(storage, user):
        click.echo(f"{changed}: made traversable by QEMU's user {user}")
    if not libvirt_systemd.applies():
        return
    # the running sockets, as cluster verify judges them: a drop-in in place but not in force
    # (a socket restarted by hand, a mode changed) is repaired by the restart too
    wanted = libvirt_systemd.drop_ins(done.listen_address)
    live = libvirtcheck.listening(LIBVIRT_TLS_PORT)
    modes = libvirtcheck.socket_modes(libvirtcheck.SOCKETS)
    stale = (live != [tls_listen(done.listen_address)]
             or any(mode is not None and mode != 0o600 for mode in modes.values()))
    result = libvirt_systemd.configure(done.listen_address,
                                       restart_needed=restart or done.changed or stale)
    click.echo(f"systemd: drop-ins of {', '.join(wanted)} "
               f"{'written: ' + ', '.join(result.changed) if result.changed else 'unchanged'}; "
               f"{libvirt_systemd.TLS_SOCKET} enabled; "
               + (f"sockets and libvirtd restarted (try {result.tries})" if result.restarted
                  else "nothing to restart"))


@node.command("join-token")
@click.pass_context
def join_token(ctx: click.Context) -> None:
    """Print this node's join token (run on the new node; its noded made it, since the node
    has no cluster secrets). Give it to `herder node add NAME --join-token TOKEN` on the
    master."""
    from pathlib import Path

    from herder.core import node_certs
    from herder.core.errors import HerderError
    from herder.core.store import default_config_path

    directory = Path((ctx.find_root().obj or {}).get("config_path")
                     or default_config_path()).parent
    path = directory / node_certs.JOIN_TOKEN_FILE
    try:
        click.echo(path.read_text().strip())
    except FileNotFoundError:
        if (directory / "hmac.key").exists():
            raise HerderError("this node has joined a cluster (it has the cluster's key); "
                              "it has no join token") from None
        raise HerderError(f"no join token in {path}: start noded on this node "
                          "(`herder daemon-util start noded`); it creates one") from None
    except OSError as err:
        raise HerderError(f"cannot read {path}: {err.strerror}") from None


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
@click.option("--force", is_flag=True, help="e.g. offline a node that runs instances.")
@click.option("--auto-promote", is_flag=True,
              help="Demoting a master candidate may promote other nodes to fill the pool.")
@click.option("--dry-run", is_flag=True, help="Check everything, change nothing.")
@click.pass_context
def modify(ctx: click.Context, name: str, offline: str | None, drained: str | None,
           master_candidate: str | None, master_capable: str | None, vm_capable: str | None,
           secondary_ip: str | None, group_name: str | None, nd: tuple[str, ...],
           new_name: str | None, force: bool, auto_promote: bool, dry_run: bool) -> None:
    """Change a node's flags, group, parameters or name (OP_NODE_SET_PARAMS).

    Ganeti's rules apply: the master cannot be offlined, drained or demoted; an offline or
    drained node stops being a master candidate, which is refused while the candidate pool
    would be short unless --auto-promote lets other nodes fill it.
    """
    from herder.core import params

    fields: dict[str, Any] = {}
    for key, value in (("offline", offline), ("drained", drained),
                       ("master_candidate", master_candidate),
                       ("master_capable", master_capable), ("vm_capable", vm_capable)):
        if value is not None:
            fields[key] = bool(yes_no(value))
    if secondary_ip is not None:
        _check_ip(secondary_ip, "secondary IP")
        fields["secondary_ip"] = secondary_ip
    if group_name:
        fields["group"] = group_name
    if nd:
        fields["ndparams"] = params.parse_assignments(nd)
    if new_name:
        fields["new_name"] = new_name
    if force:
        fields["force"] = True
    if not fields:
        raise click.UsageError("nothing to change; see 'herder node modify --help'")
    if auto_promote:
        fields["auto_promote"] = True
    op = {"OP_ID": "OP_NODE_SET_PARAMS", "node_name": name, "dry_run": dry_run, **fields}
    (changes,) = remote.run(ctx, [op],
                            rapi=lambda api: api.modify_node(name, dry_run=dry_run, **fields))
    if dry_run:
        click.echo(f"Dry run: the change of node {name} is valid; nothing was changed")
        return
    click.echo(f"Modified node {new_name or name}")
    for field, value in changes or []:
        click.echo(f"  {field} -> {value}")


@node.command()
@click.argument("name", metavar="NODE")
@click.pass_context
def remove(ctx: click.Context, name: str) -> None:
    """Remove a node that holds no instances and is not the master (OP_NODE_REMOVE)."""
    remote.run(ctx, [{"OP_ID": "OP_NODE_REMOVE", "node_name": name}])
    click.echo(f"Removed node {name}")


@node.command()
@click.argument("name", metavar="NODE")
@click.option("--mode", type=click.Choice(["primary-only", "secondary-only", "all"]),
              default="all", show_default=True)
@click.option("-I", "--iallocator", help="Where new secondaries go (default: the cluster's "
                                         "relocate iallocators, else herder's).")
@click.option("--new-secondary", "remote_node", help="Put every new secondary here.")
@click.option("--dry-run", is_flag=True, help="List what would move.")
@click.pass_context
def evacuate(ctx: click.Context, name: str, mode: str, iallocator: str | None,
             remote_node: str | None, dry_run: bool) -> None:
    """Move every instance off a node: primaries to their secondaries, secondaries to nodes the
    allocator picks (OP_NODE_EVACUATE)."""
    body: dict[str, Any] = {"mode": mode}
    if iallocator:
        body["iallocator"] = iallocator
    if remote_node:
        body["remote_node"] = remote_node
    op = {"OP_ID": "OP_NODE_EVACUATE", "node_name": name, "dry_run": dry_run, **body}
    if dry_run:
        (moved,) = remote.run(ctx, [op])
        click.echo("Would move: " + (", ".join(moved or []) or "nothing"))
        return
    result = remote.run_and_follow(ctx, op)
    jobs = result.get("jobs", []) if isinstance(result, dict) else []
    click.echo(f"Evacuated {name}: {len(jobs)} job(s)" if jobs else "Moved: nothing")


@node.command()
@click.argument("name", metavar="NODE")
@click.option("--non-live", is_flag=True, help="Stop and start instead of live migration.")
@click.pass_context
def migrate(ctx: click.Context, name: str, non_live: bool) -> None:
    """Migrate every primary instance of a node to its secondary (OP_NODE_MIGRATE)."""
    (moved,) = remote.run(ctx, [{"OP_ID": "OP_NODE_MIGRATE", "node_name": name,
                                 "mode": "non-live" if non_live else "live"}])
    click.echo("Migrated: " + (", ".join(moved or []) or "nothing"))


@node.command()
@click.argument("name", metavar="NODE")
@click.option("--force", is_flag=True, help="Also the master node.")
@click.pass_context
def powercycle(ctx: click.Context, name: str, force: bool) -> None:
    """Power-cycle a node through its node daemon (OP_NODE_POWERCYCLE)."""
    (result,) = remote.run(ctx, [{"OP_ID": "OP_NODE_POWERCYCLE", "node_name": name,
                                  "force": force}])
    click.echo(f"Power-cycle of {name}: {result}")


POWER_SUBCOMMANDS = ("on", "off", "cycle", "status")


def _oob_rows(result: list[Any], command: str) -> tuple[list[list[str]], int]:
    """Ganeti's gnt-node power/health table from OP_OOB_COMMAND's result; the errors."""
    from herder.masterd.livefields import RS_NODATA, RS_NORMAL, RS_UNAVAIL

    rows: list[list[str]] = []
    errors = 0
    for (_, name), (status, payload) in result:
        if status != RS_NORMAL:
            errors += 1
            rows.append([name, {RS_NODATA: "(no data)",
                                RS_UNAVAIL: "(unavailable: no oob_program)"}.get(
                                    status, f"(status {status})")])
        elif command == "health":
            rows.append([name, ", ".join(f"{item}={state}" for item, state in payload) or "OK"])
        elif command == "power-status":
            rows.append([name, "powered" if payload["powered"] else "unpowered"])
        else:
            rows.append([name, "invoked"])
    return rows, errors


def _run_oob(ctx: click.Context, ops: list[dict[str, Any]], command: str,
             as_json: bool) -> None:
    results = remote.run(ctx, ops)
    if as_json:
        print_json(results[-1])
        return
    rows, errors = _oob_rows(results[-1], command)
    print_table(["Node", "Status"], rows)
    if errors:
        raise click.exceptions.Exit(1)


@node.command()
@click.argument("subcommand", type=click.Choice(POWER_SUBCOMMANDS))
@click.argument("names", nargs=-1, metavar="NODES")
@click.option("--ignore-status", is_flag=True,
              help="power off: do not mark the nodes offline first (Ganeti's --ignore-status).")
@click.option("--oob-timeout", type=click.IntRange(1, 3600), default=60, show_default=True,
              help="Seconds before the out-of-band program is killed.")
@click.option("--power-delay", type=click.FloatRange(0, 3600), default=2.0, show_default=True,
              help="Seconds between powering on one node and the next.")
@click.option("--force", is_flag=True, help="Do not ask for confirmation.")
@json_option
@click.pass_context
def power(ctx: click.Context, subcommand: str, names: tuple[str, ...], ignore_status: bool,
          oob_timeout: int, power_delay: float, force: bool, as_json: bool) -> None:
    """Power nodes on, off or cycle them, or ask their power state, through each node's
    out-of-band program (the node parameter oob_program; OP_OOB_COMMAND, as gnt-node power).
    Powering off marks the nodes offline first; the master is never powered off or cycled.
    Without NODES, status asks every node."""
    command = f"power-{subcommand}"
    if command != "power-status":
        if not names:
            raise click.UsageError("give at least one node for this command")
        if not force:
            click.confirm(f"power {subcommand} {', '.join(names)}?", abort=True)
    ops: list[dict[str, Any]] = []
    if command == "power-off" and not ignore_status:
        ops += [{"OP_ID": "OP_NODE_SET_PARAMS", "node_name": name, "offline": True,
                 "auto_promote": True} for name in names]
    ops.append({"OP_ID": "OP_OOB_COMMAND", "node_names": list(names), "command": command,
                "ignore_status": ignore_status, "timeout": oob_timeout,
                "power_delay": power_delay})
    _run_oob(ctx, ops, command, as_json)


@node.command()
@click.argument("names", nargs=-1, metavar="NODES")
@click.option("--oob-timeout", type=click.IntRange(1, 3600), default=60, show_default=True,
              help="Seconds before the out-of-band program is killed.")
@json_option
@click.pass_context
def health(ctx: click.Context, names: tuple[str, ...], oob_timeout: int,
           as_json: bool) -> None:
    """The nodes' health as their out-of-band program reports it (every node without NODES;
    OP_OOB_COMMAND health, as gnt-node health)."""
    _run_oob(ctx, [{"OP_ID": "OP_OOB_COMMAND", "node_names": list(names), "command": "health",
                    "timeout": oob_timeout}], "health", as_json)


@node.command("repair-command")
@click.argument("name", metavar="NODE")
@click.argument("command")
@click.option("--input", "input_file", type=click.File("r"),
              help="JSON given to the command on stdin (e.g. a diagnose object).")
@click.pass_context
def repair_command(ctx: click.Context, name: str, command: str, input_file: Any) -> None:
    """Run a white-listed repair command on a node (OP_REPAIR_COMMAND), as maintd's
    live-repair does."""
    from herder.core import untrusted

    try:
        data = untrusted.loads(input_file.read(), what="--input") if input_file else None
    except untrusted.BadDocument as err:
        raise click.ClickException(str(err)) from None
    (out,) = remote.run(ctx, [{"OP_ID": "OP_REPAIR_COMMAND", "node_name": name,
                               "command": command, "input": data}])
    click.echo(out, nl=False)


@node.command()
@click.argument("name", metavar="NODE")
@click.option("--ignore-consistency", is_flag=True,
              help="Fail over even if the disks on the secondary are not consistent.")
@click.pass_context
def failover(ctx: click.Context, name: str, ignore_consistency: bool) -> None:
    """Fail over every primary instance of a node to its secondary (as gnt-node failover:
    one OP_INSTANCE_FAILOVER job per instance)."""
    config = remote.config_source(ctx).load()
    node_ = config.find_node(name)
    primaries = sorted(i.name for i in config.instances.values()
                       if i.primary_node == node_.uuid)
    if not primaries:
        click.echo(f"No primary instances on node {node_.name}, exiting.")
        return
    failed = []
    for inst in primaries:  # one job each, as gnt-node failover's
        try:
            remote.run(ctx, [{"OP_ID": "OP_INSTANCE_FAILOVER", "instance_name": inst,
                              "ignore_consistency": ignore_consistency}])
            click.echo(f"{inst}: failed over")
        except HerderError as err:
            click.echo(f"{inst}: {err}", err=True)
            failed.append(inst)
    if failed:
        raise HerderError(f"{len(failed)} of {len(primaries)} instance(s) did not fail over: "
                          f"{', '.join(failed)}")


VOLUME_FIELDS = ["node", "vg", "name", "size", "instance"]


@node.command()
@click.argument("names", nargs=-1, metavar="[NODE...]")
@click.option("-o", "--output", "fields", default=",".join(VOLUME_FIELDS), show_default=True,
              help="Fields, comma separated (node, vg, name, size, instance).")
@json_option
@click.pass_context
def volumes(ctx: click.Context, names: tuple[str, ...], fields: str, as_json: bool) -> None:
    """The logical volumes on the nodes (all by default) and the instances they belong to
    (OP_NODE_QUERYVOLS, as gnt-node volumes; sizes in MiB)."""
    wanted = [f for f in fields.split(",") if f]
    (rows,) = remote.run(ctx, [{"OP_ID": "OP_NODE_QUERYVOLS", "nodes": list(names),
                                "output_fields": wanted}])
    if as_json:
        print_json([dict(zip(wanted, row, strict=True)) for row in rows])
    else:
        print_table([f.capitalize() for f in wanted], rows)


@node.command("list-drbd")
@click.argument("name", metavar="NODE")
@click.option("--peer", "peers", multiple=True, metavar="HOST[:PORT]",
              help="A confd server to ask (default: the master candidates).")
@json_option
@click.pass_context
def list_drbd(ctx: click.Context, name: str, peers: tuple[str, ...], as_json: bool) -> None:
    """A node's DRBD minors, with each one's instance, disk, role and peer node (as gnt-node
    list-drbd: confd's node_drbd answer)."""
    from herder.cli.confd import confd_client
    from herder.core import confd as confd_protocol

    result = confd_client(ctx, peers).query(confd_protocol.REQ_NODE_DRBD, name)
    if not result.ok:
        raise HerderError(f"confd answered an error (status {result.status}): {result.answer}")
    rows = list(result.value())
    if as_json:
        print_json([dict(zip(DRBD_FIELDS, row, strict=True)) for row in rows])
    else:
        print_table(["Node", "Minor", "Instance", "Disk", "Role", "PeerNode"], rows)


DRBD_FIELDS = ["node", "minor", "instance", "disk", "role", "peer"]
