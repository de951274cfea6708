"""`herder etcd`: herder's access to a secured etcd (docs/ha.md)."""

from __future__ import annotations

from pathlib import Path

import click

from herder.cli import etcd_setup
from herder.core import etcd_settings
from herder.core.errors import HerderError
from herder.core.store import default_config_path
from herder.core.store_etcd import SECURE, open_client, parse_location


@click.group()
def etcd() -> None:
    """herder's user and role in an etcd with TLS and authentication (docs/ha.md)."""


@etcd.command()
@click.option("--admin", "admin_settings", required=True, metavar="FILE",
              type=click.Path(dir_okay=False, path_type=Path),
              help="Client settings file (the same format) of etcd's root user: CA, its "
                   "certificate and key, user = \"root\", its password file.")
@click.option("--client", "client_settings", metavar="FILE",
              type=click.Path(dir_okay=False, path_type=Path),
              help="herder's client settings file: the user to make and its password file "
                   f"(default: ${etcd_settings.ENVIRONMENT}, else {etcd_settings.DEFAULT_PATH}).")
@click.pass_context
def setup(ctx: click.Context, admin_settings: Path, client_settings: Path | None) -> None:
    """Make herder's etcd role and user for the cluster of the etcds:// config location
    (--config / HERDER_CONFIG), and turn etcd's authentication on.

    \b
    The role herder-CLUSTER may read and write the keys under /herder/CLUSTER/ only; the user
    (herder's client settings' `user`, password from its password file) has that role only.
    While authentication is off, etcd's root user is created with the --admin settings'
    password first (etcd needs it to turn authentication on). Safe to run again: it puts back
    what drifted and says what it did.
    """
    location = str((ctx.find_root().obj or {}).get("config_path") or default_config_path())
    if not location.startswith(SECURE):
        raise HerderError(f"the config location {location!r} is not an etcd one with TLS and "
                          f"authentication ({SECURE}HOST:PORT,.../CLUSTER)")
    endpoints, cluster = parse_location(location)
    herder_path = client_settings or etcd_settings.default_path()
    herder = etcd_settings.load(herder_path)
    password = etcd_settings.read_password(herder, herder_path)
    admin = etcd_settings.client(endpoints, admin_settings, auth_required=False)
    try:
        done = etcd_setup.setup_access(admin, cluster, herder.user, password)
    finally:
        admin.close()
    for line in done:
        click.echo(line)
    # herder's own credentials, as every herder command will use them
    client, _ = open_client(location, client_settings=herder_path)
    with client:
        client.get(etcd_setup.key_prefix(cluster) + "config")
    click.echo(f"etcd user {herder.user} may use {etcd_setup.key_prefix(cluster)} "
               f"({len(endpoints)} endpoint(s), TLS with client certificates)")
