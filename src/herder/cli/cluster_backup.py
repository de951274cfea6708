"""`herder cluster backup FILE` and `herder cluster restore FILE` (herder.core.cluster_backup):
run on the master; a restore only while masterd is stopped there."""

from __future__ import annotations

import socket
from pathlib import Path

import click

from herder.cli.common import config_directory, store_from
from herder.core import cluster_backup, ports
from herder.core.errors import HerderError
from herder.core.store import atomic_write

BACKUP_MODE = 0o600  # the file holds the cluster's keys


@click.command("backup")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.pass_context
def backup(ctx: click.Context, file: Path) -> None:
    """Write a consistent copy of the cluster's config (the snapshot with its journal folded
    in, or etcd's objects) and its secrets to FILE (mode 0600). Run it on the master."""
    data = cluster_backup.make(store_from(ctx), config_directory(ctx))
    if not file.parent.is_dir():
        raise HerderError(f"{file.parent} is not a directory")
    atomic_write(file, data, BACKUP_MODE)
    click.echo(f"{file}: the config and the secrets ({len(data)} bytes)")


def masterd_answers(port: int) -> bool:
    """Something accepts connections at masterd's port on this machine."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


@click.command("restore")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--masterd-port", type=click.IntRange(1, 65535), default=ports.MASTERD,
              show_default=True, help="Where this machine's masterd would answer.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def restore(ctx: click.Context, file: Path, masterd_port: int, yes: bool) -> None:
    """Replace this master's config and secrets with those of the backup FILE. masterd must
    be stopped here (a running one would keep the config it has); the whole file is checked
    before anything is written. Start masterd afterwards; `cluster redist-conf` then pushes
    the restored config and secrets to the nodes."""
    checked = cluster_backup.check(file.read_bytes(), str(file))
    if masterd_answers(masterd_port):
        raise HerderError(f"masterd answers on port {masterd_port} here: stop it before a "
                          "restore")
    header = checked.backup
    if not yes:
        click.confirm(f"Replace the config and secrets of this master with cluster "
                      f"{header.cluster}'s at serial {header.serial_no}?", abort=True)
    cluster_backup.restore(checked, store_from(ctx), config_directory(ctx))
    click.echo(f"restored cluster {header.cluster} at serial {header.serial_no}")
