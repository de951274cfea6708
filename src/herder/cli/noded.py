"""`herder noded`: the node daemon (node RPCs over TLS, hypervisor through libvirt)."""

from __future__ import annotations

import asyncio
import signal
import socket
from pathlib import Path

import click

from herder.core import envelope
from herder.core.cluster_secrets import SecretPaths
from herder.core.errors import HerderError
from herder.core.store import FileStore, default_config_path
from herder.noded.server import DEFAULT_PORT, NodeDaemon, NodeSettings


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
    from herder.noded.daemon import lock_memory, serve, setup_logging

    setup_logging(log_file, debug)
    config_path = Path((ctx.find_root().obj or {}).get("config_path") or default_config_path())
    secrets = SecretPaths.beside(config_path)
    key = envelope.load_key(secrets.hmac_key)
    name = node_name or socket.getfqdn()
    if libvirt_uri is None:
        libvirt_uri = "qemu:///system"
        store = FileStore(config_path)
        if store.exists():
            config = store.load()
            node = next((n for n in config.nodes.values() if n.name == name), None)
            if node is not None:
                libvirt_uri = config.filled_ndparams(node).get("libvirt_uri") or libvirt_uri
    locked = False if no_mlock else lock_memory()
    daemon = NodeDaemon(NodeSettings(node_name=name, state_dir=state_dir, run_dir=run_dir,
                                     hmac_key=key, libvirt_uri=libvirt_uri,
                                     repair_dir=repair_dir,
                                     powercycle_action=powercycle_action,
                                     os_path=os_path or (Path("/srv/herder/os"),),
                                     disk_capacity=disk_capacity, file_root=file_root,
                                     config_dir=config_path.parent))

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)

        def ready(bound: int) -> None:
            scheme = "http" if no_tls else "https"
            click.echo(f"herder noded: node {name}, serving RPC on {scheme}://{bind}:{bound}/ "
                       f"(libvirt {libvirt_uri}, memory {'locked' if locked else 'not locked'})",
                       err=True)

        await serve(daemon, bind, port, None if no_tls else secrets.certificate, ready=ready,
                    stop=stop)

    try:
        asyncio.run(main())
    except OSError as err:
        raise HerderError(f"cannot listen on {bind}:{port}: {err.strerror}") from None
