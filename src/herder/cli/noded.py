"""`herder noded`: the node daemon (node RPCs over TLS, hypervisor through libvirt)."""

from __future__ import annotations

from pathlib import Path

import click

from herder.core import faults, ports
from herder.core.locations import local_config_path


@click.command()
@click.option("--bind", default="0.0.0.0", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=ports.NODED, show_default=True)
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("/var/lib/herder/noded"), show_default=True)
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("/run/herder"), show_default=True)
@click.option("--repair-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("/etc/ganeti/node-repair-commands"), show_default=True,
              help="White-list directory of repair commands (live-repair).")
@click.option("--os-path", "os_path", multiple=True, type=click.Path(path_type=Path),
              help="Where OS definitions live (repeatable; default /srv/herder/os).")
@click.option("--log-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Log file; when it cannot be written, logs go to the console.")
@click.option("--no-mlock", is_flag=True, help="Do not lock noded's memory.")
@click.option("--debug", is_flag=True)
@click.pass_context
def noded(ctx: click.Context, bind: str, port: int, state_dir: Path, run_dir: Path,
          repair_dir: Path, os_path: tuple[Path, ...], log_file: Path | None, no_mlock: bool,
          debug: bool) -> None:
    """The node daemon: serves the master's node RPCs over TLS (cluster certificate) and
    answers only requests signed with the cluster HMAC key.

    The node's name is this host's name (its FQDN). What differs between nodes comes from the
    node's parameters (ssconf `herder_ndparams`, pushed by the master): the libvirt URI
    (`libvirt_uri`, followed when it changes). At start it locks its memory (mlockall) so a
    node with a broken disk can still be power-cycled, and logs to the console when its log
    file cannot be written. It holds one libvirt connection and re-defines its domains after
    a libvirtd restart.
    """
    from herder.noded.daemon import NodedOptions, run, setup_logging

    faults.enable(log_file)  # a fatal signal leaves a traceback in its log (core.faults)
    setup_logging(log_file, debug)
    run(NodedOptions(
        # on the etcd backend its files are in the local directory (docs/ha.md)
        config_path=local_config_path((ctx.find_root().obj or {}).get("config_path")),
        bind=bind, port=port, state_dir=state_dir, run_dir=run_dir, repair_dir=repair_dir,
        os_path=os_path or (Path("/srv/herder/os"),), mlock=not no_mlock),
        say=lambda line: click.echo(line, err=True))
