"""`herder noded`: the node daemon (node RPCs over TLS, hypervisor through libvirt)."""

from __future__ import annotations

from pathlib import Path

import click

from herder.core.store import default_config_path
from herder.noded.server import DEFAULT_PORT


@click.command()
@click.option("--bind", default="0.0.0.0", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True)
@click.option("--node", "node_name", help="This node's name (default: this host's FQDN).")
@click.option("--libvirt-uri", help="libvirt URI (default: the node's `libvirt_uri` node "
                                    "parameter from the config, else qemu:///system).")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("/var/lib/herder/noded"), show_default=True)
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("/run/herder"), show_default=True)
@click.option("--repair-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("/etc/ganeti/node-repair-commands"), show_default=True,
              help="White-list directory of repair commands (live-repair).")
@click.option("--powercycle-action", type=click.Choice(["reboot", "simulate"]),
              default="reboot", show_default=True,
              help="What a power-cycle request does ('simulate' only records it).")
@click.option("--os-path", "os_path", multiple=True, type=click.Path(path_type=Path),
              help="Where OS definitions live (repeatable; default /srv/herder/os).")
@click.option("--disk-capacity", type=click.IntRange(1), metavar="MIB",
              help="Space for instance disks on this node (default: its filesystem's).")
@click.option("--log-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Log file; when it cannot be written, logs go to the console.")
@click.option("--file-root", type=click.Path(file_okay=False, path_type=Path),
              default=Path("/"), show_default=True,
              help="Where files the master distributes land (their absolute path under it).")
@click.option("--no-mlock", is_flag=True, help="Do not lock noded's memory (tests).")
@click.option("--no-tls", is_flag=True, help="Plain HTTP (tests on loopback only).")
@click.option("--debug", is_flag=True)
@click.pass_context
def noded(ctx: click.Context, bind: str, port: int, node_name: str | None,
          libvirt_uri: str | None, state_dir: Path, run_dir: Path, repair_dir: Path,
          powercycle_action: str, os_path: tuple[Path, ...], disk_capacity: int | None,
          log_file: Path | None, file_root: Path,
          no_mlock: bool, no_tls: bool, debug: bool) -> None:
    """The node daemon: serves the master's node RPCs over TLS (cluster certificate) and
    answers only requests signed with the cluster HMAC key.

    At start it locks its memory (mlockall) so a node with a broken disk can still be
    power-cycled, and logs to the console when its log file cannot be written. It holds one
    libvirt connection and re-defines its domains after a libvirtd restart.
    """
    from herder.noded.daemon import NodedOptions, run, setup_logging

    setup_logging(log_file, debug)
    run(NodedOptions(
        config_path=Path((ctx.find_root().obj or {}).get("config_path")
                         or default_config_path()),
        bind=bind, port=port, node_name=node_name, libvirt_uri=libvirt_uri,
        state_dir=state_dir, run_dir=run_dir, repair_dir=repair_dir,
        powercycle_action=powercycle_action, os_path=os_path or (Path("/srv/herder/os"),),
        disk_capacity=disk_capacity, file_root=file_root, mlock=not no_mlock, tls=not no_tls),
        say=lambda line: click.echo(line, err=True))
