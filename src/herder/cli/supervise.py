"""`herder supervise` (the process supervisor of hosts without systemd) and `herder
daemon-util` (start/stop/check daemons, the master role and the master IP)."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click
import msgspec

from herder.core import faults, supervise_control
from herder.core.errors import HerderError
from herder.supervise.settings import DEFAULT_PATH, DEFAULT_SOCKET

if TYPE_CHECKING:
    from herder.supervise.masterip import MasterNetwork

_SOCKET = click.option("--socket", "socket_path", type=click.Path(path_type=Path),
                       envvar="HERDER_SUPERVISE_SOCKET",
                       help="The supervisor's control socket (default: HERDER_SUPERVISE_SOCKET, "
                            f"else [supervise] socket of the settings, else {DEFAULT_SOCKET}).")


@click.group(invoke_without_command=True)
@click.option("--settings", "settings_path", type=click.Path(dir_okay=False, path_type=Path),
              default=DEFAULT_PATH, show_default=True,
              help="Which daemons to run and how ([supervise], [daemons.NAME]).")
@_SOCKET
@click.option("--debug", is_flag=True, help="Log at debug level.")
@click.pass_context
def supervise(ctx: click.Context, settings_path: Path, socket_path: Path | None,
              debug: bool) -> None:
    """The process supervisor of hosts without systemd (containers, simulated hosts).

    Without a subcommand: run in the foreground (as PID 1 or under another init) until
    SIGTERM/SIGINT; start the daemons the settings enable; restart one that fails (with a
    growing delay); leave one that exits with 11 ("not my role") stopped; reap every child;
    stop every daemon at the end. `herder daemon-util` and the subcommands talk to it through
    its control socket.
    """
    from herder.supervise import settings as node_settings

    ctx.ensure_object(dict)
    if ctx.invoked_subcommand is not None:
        ctx.obj["supervise_socket"] = socket_path or node_settings.control_socket(settings_path)
        return
    from herder.supervise.supervisor import serve

    faults.enable()  # a fatal signal leaves a traceback (core.faults)
    logging.basicConfig(level=logging.DEBUG if debug else logging.INFO,
                        format="%(asctime)s supervise %(levelname)s %(message)s")
    settings = node_settings.load(settings_path)
    if socket_path is not None:
        settings = msgspec.structs.replace(
            settings, supervise=msgspec.structs.replace(settings.supervise,
                                                        socket=str(socket_path)))
    serve(settings)


def _print_status(reply: supervise_control.Reply) -> None:
    rows = [("DAEMON", "STATE", "PID", "SINCE", "RESTARTS", "LAST EXIT", "")]
    for entry in reply.daemons:
        since = time.strftime("%H:%M:%S", time.localtime(entry.since)) if entry.since else "-"
        rows.append((entry.name + ("" if entry.enabled else " (manual)"), entry.state,
                     str(entry.pid or "-"), since, str(entry.restarts),
                     "-" if entry.last_exit is None else str(entry.last_exit), entry.message))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
                   + ("  " + row[-1] if row[-1] else ""))


def _request(ctx: click.Context, command: supervise_control.Command,
             daemons: tuple[str, ...]) -> None:
    _print_status(supervise_control.request(ctx.obj["supervise_socket"], command, daemons))


# The control socket's commands, one subcommand each: (command, names required, help).
_CONTROL_COMMANDS: tuple[tuple[supervise_control.Command, bool, str], ...] = (
    ("status", False, "Show the state of the named daemons (all of them without names): "
                      "running, stopped, backoff (waiting to be restarted after a crash) or "
                      "not-my-role (exited with 11)."),
    ("start", True, "Start the named daemons now (also ones the settings do not enable at "
                    "boot)."),
    ("stop", True, "Stop the named daemons (SIGTERM, SIGKILL after stop_timeout); they stay "
                   "stopped until started again."),
    ("restart", True, "Stop and start the named daemons again (the crash backoff starts "
                      "over)."),
)


def _control_command(command: supervise_control.Command, required: bool,
                     text: str) -> click.Command:
    @supervise.command(command, help=text)
    @click.argument("daemons", nargs=-1, required=required)
    @click.pass_context
    def control(ctx: click.Context, daemons: tuple[str, ...]) -> None:
        _request(ctx, command, daemons)

    return control


for _command, _required, _text in _CONTROL_COMMANDS:
    _control_command(_command, _required, _text)


# --- daemon-util -------------------------------------------------------------------------


@click.group("daemon-util")
@_SOCKET
@click.pass_context
def daemon_util(ctx: click.Context, socket_path: Path | None) -> None:
    """Start, stop and check herder's daemons on this host (Ganeti's daemon-util verbs).

    Through systemd (units herder-DAEMON.service) when it runs herder's units, else through
    herder's supervisor. Daemons: noded confd mond instmon masterd maintd libvirtd, and the
    ones /etc/herder/node.toml names.
    """
    from herder.supervise.daemon_util import backend

    ctx.ensure_object(dict)
    ctx.obj["daemon_backend"] = backend(socket_path)


@daemon_util.command("start")
@click.argument("daemons", nargs=-1, required=True)
@click.pass_context
def util_start(ctx: click.Context, daemons: tuple[str, ...]) -> None:
    """Start the named daemons (systemd units or the supervisor's daemons)."""
    from herder.supervise.daemon_util import check_names

    ctx.obj["daemon_backend"].start(check_names(daemons))


@daemon_util.command("stop")
@click.argument("daemons", nargs=-1, required=True)
@click.pass_context
def util_stop(ctx: click.Context, daemons: tuple[str, ...]) -> None:
    """Stop the named daemons (systemd units or the supervisor's daemons)."""
    from herder.supervise.daemon_util import check_names

    ctx.obj["daemon_backend"].stop(check_names(daemons))


@daemon_util.command("check")
@click.argument("daemon")
@click.pass_context
def util_check(ctx: click.Context, daemon: str) -> None:
    """Exit code 0 when DAEMON runs, else 1 (printing its state)."""
    from herder.supervise.daemon_util import check_names

    name = check_names([daemon])[0]
    state = ctx.obj["daemon_backend"].state(name)
    if state != supervise_control.RUNNING:
        click.echo(f"{name}: {state}")
        sys.exit(1)


@daemon_util.command("start-master")
@click.pass_context
def util_start_master(ctx: click.Context) -> None:
    """Start the master's daemons (masterd, then maintd)."""
    from herder.supervise.daemon_util import start_master

    start_master(ctx.obj["daemon_backend"])


@daemon_util.command("switch-version")
@click.argument("version")
@click.option("--prefix", type=click.Path(file_okay=False, path_type=Path),
              help="The install's prefix (default: the one this herder runs from, "
                   "/opt/herder on a host installed by the guide).")
@click.pass_context
def util_switch_version(ctx: click.Context, version: str, prefix: Path | None) -> None:
    """Run the installed build VERSION here: stop herder's daemons that run (never libvirtd:
    the guests go on), point <prefix>/current at versions/VERSION, start them again (one
    node's step of `herder cluster upgrade`; docs/install.md "Upgrading")."""
    from herder.core import install_layout
    from herder.supervise import versions

    layout = install_layout.running_layout(prefix)
    if layout is None:
        raise HerderError(f"this herder does not run from a versioned install ({sys.prefix} is "
                          f"not <prefix>/{install_layout.VERSIONS}/<version>): give --prefix")

    def stamp(line: str) -> None:  # into upgrade.log when noded started it: when, what
        click.echo(f"{time.strftime('%Y-%m-%d %H:%M:%S')} switch-version: {line}")

    restarted = versions.switch_version(version, layout, ctx.obj["daemon_backend"], say=stamp)
    stamp(f"running herder {version}: {' '.join(restarted) or 'no daemons'} started again")


@daemon_util.command("stop-master")
@click.pass_context
def util_stop_master(ctx: click.Context) -> None:
    """Stop the master's daemons (maintd, then masterd)."""
    from herder.supervise.daemon_util import stop_master

    stop_master(ctx.obj["daemon_backend"])


def _master_ip_options(func: click.decorators.FC) -> click.decorators.FC:
    for option in reversed([
        click.option("--ip", envvar="MASTER_IP", help="The master IP (Ganeti's MASTER_IP)."),
        click.option("--netmask", type=click.IntRange(0, 128), envvar="MASTER_NETMASK",
                     help="Its prefix length (MASTER_NETMASK)."),
        click.option("--netdev", envvar="MASTER_NETDEV",
                     help="The device it goes on (MASTER_NETDEV)."),
        click.option("--family", type=click.Choice(["4", "6"]), envvar="CLUSTER_IP_VERSION",
                     help="4 or 6 (CLUSTER_IP_VERSION)."),
    ]):
        func = option(func)
    return func


def _master_network(ctx: click.Context, ip: str | None, netmask: int | None,
                    netdev: str | None, family: str | None) -> MasterNetwork:
    """The options; what they leave out from this node's ssconf, else the cluster config."""
    from herder.core.store import default_config_path
    from herder.supervise.masterip import MasterNetwork, from_config, from_ssconf

    version = int(family) if family is not None else None
    if ip is not None and netdev is not None:
        base = MasterNetwork(ip, netmask if netmask is not None else 32, netdev, version or 4)
    else:
        found = from_ssconf()
        if found is None:
            config = Path((ctx.find_root().obj or {}).get("config_path")
                          or default_config_path())
            if not config.exists():
                raise HerderError("no master IP given (--ip, --netdev) and neither ssconf nor "
                                  f"the cluster config ({config}) on this node")
            found = from_config(config)
        base = found
    return MasterNetwork(ip if ip is not None else base.ip,
                         netmask if netmask is not None else base.netmask,
                         netdev if netdev is not None else base.netdev,
                         version if version is not None else base.family)


@daemon_util.command("activate-master-ip")
@_master_ip_options
@click.pass_context
def util_activate_master_ip(ctx: click.Context, ip: str | None, netmask: int | None,
                            netdev: str | None, family: str | None) -> None:
    """Bring the master IP up here (ip address add; gratuitous ARP), as Ganeti's master-IP
    setup does. Values not given come from ssconf, else the cluster config."""
    from herder.supervise import masterip

    net = _master_network(ctx, ip, netmask, netdev, family)
    click.echo(masterip.activate(net, arping=masterip.find_arping()))


@daemon_util.command("deactivate-master-ip")
@_master_ip_options
@click.pass_context
def util_deactivate_master_ip(ctx: click.Context, ip: str | None, netmask: int | None,
                              netdev: str | None, family: str | None) -> None:
    """Take the master IP down here (ip address del)."""
    from herder.supervise import masterip

    net = _master_network(ctx, ip, netmask, netdev, family)
    click.echo(masterip.deactivate(net))
