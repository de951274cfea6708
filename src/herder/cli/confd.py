"""`herder confd`: run the configuration query daemon, or ask the master candidates' ones."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import click

from herder.core import confd as confd_protocol
from herder.core import envelope, faults, ports, untrusted
from herder.core import serve as serve_helper
from herder.core.cluster_secrets import SecretPaths
from herder.core.errors import HerderError
from herder.core.store import ConfigCache, default_config_path


def _config_path(ctx: click.Context) -> Path:
    return Path((ctx.find_root().obj or {}).get("config_path") or default_config_path())


def _key(ctx: click.Context, hmac_key: Path | None) -> bytes:
    return envelope.load_key(hmac_key or SecretPaths.beside(_config_path(ctx)).hmac_key)


@click.group(invoke_without_command=True)
@click.option("--bind", "binds", multiple=True, metavar="ADDR",
              help="Address to listen on (repeatable; default: every IPv4 and IPv6 address).")
@click.option("--port", type=click.IntRange(0, 65535), default=ports.CONFD,
              show_default=True,
              help="UDP port (0: any free port, printed at start).")
@click.option("--hmac-key", type=click.Path(dir_okay=False, path_type=Path),
              help="Cluster HMAC key file (default: hmac.key beside the config).")
@click.option("--max-clock-skew", type=click.FloatRange(0), default=confd_protocol.MAX_CLOCK_SKEW,
              show_default=True, help="Seconds a request's timestamp may be off.")
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("/run/herder"), show_default=True,
              help="Directory of confd.pid (where mond's daemon collector looks).")
@click.option("--debug", is_flag=True, help="Log at debug level (every dropped packet).")
@click.pass_context
def confd(ctx: click.Context, binds: tuple[str, ...], port: int, hmac_key: Path | None,
          max_clock_skew: float, run_dir: Path, debug: bool) -> None:
    """The configuration query daemon (Ganeti's confd protocol, UDP port 1814).

    Without a subcommand, runs the daemon in the foreground until SIGTERM/SIGINT, answering
    HMAC-signed queries from the cluster config (reloaded when the file changes). Run it on
    every master candidate.

    \b
    Ask it:  herder confd query ping
             herder confd query node_role_byname node1.example.com --all
             herder confd query node_drbd node2.example.com --json
    """
    if ctx.invoked_subcommand is not None:
        return
    from herder.confd.server import ConfdProcessor, default_binds, serve

    faults.enable()  # a fatal signal leaves a traceback (core.faults)
    logging.basicConfig(level=logging.DEBUG if debug else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    config_path = _config_path(ctx)
    key = _key(ctx, hmac_key)
    cache = ConfigCache(config_path)
    processor = ConfdProcessor(cache, key, max_skew=max_clock_skew,
                               error_source=lambda: cache.error)
    addresses = [(b, port) for b in binds] if binds else default_binds(port)

    def ready(bound: list[tuple[str, int]]) -> None:
        where = ", ".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in bound)
        click.echo(f"herder confd: listening on udp {where} (config {config_path})", err=True)

    serve_helper.run(lambda stop: serve(processor, addresses, stop=stop, ready=ready,
                                        run_dir=run_dir))


def _parse_arg(text: str | None) -> Any:
    """JSON if it parses (dicts, lists, numbers), else the plain string (a name, a path)."""
    if text is None:
        return None
    try:
        return untrusted.loads(text)
    except untrusted.BadDocument:
        return text


def confd_client(ctx: click.Context, peers: tuple[str, ...] = (), port: int = ports.CONFD,
                 timeout: float = 2.0, hmac_key: Path | None = None
                 ) -> confd_protocol.ConfdClient:
    """A client of the given confd peers, by default the master candidates of the local
    config, else of this node's ssconf (Ganeti's clients ask the same ones)."""
    peer_list: list[str] = list(peers)
    if not peer_list:
        from herder.core import ssconf
        from herder.core.store import FileStore

        store = FileStore(_config_path(ctx))
        peer_list = (confd_protocol.peers_from_config(store.load()) if store.exists()
                     else ssconf.master_candidates_ips(store.directory))
        if not peer_list:
            raise HerderError("no master candidates in the config or ssconf; give --peer")
    return confd_protocol.ConfdClient(peer_list, _key(ctx, hmac_key), port=port,
                                      timeout=timeout)


@confd.command()
@click.argument("query_type", metavar="TYPE")
@click.argument("arg", required=False)
@click.option("--peer", "peers", multiple=True, metavar="HOST[:PORT]",
              help="A confd server to ask (repeatable; default: the master candidates in the "
                   "local config, else in this node's ssconf).")
@click.option("--all", "ask_all", is_flag=True, help="Ask every peer (coverage -1).")
@click.option("--coverage", type=int, default=0, show_default=True,
              help="How many peers to ask (0: up to 6, -1: all).")
@click.option("--port", type=click.IntRange(1, 65535), default=ports.CONFD,
              show_default=True, help="Port of peers given without one.")
@click.option("--timeout", type=click.FloatRange(0.01), default=2.0, show_default=True,
              help="Seconds to wait for answers.")
@click.option("--hmac-key", type=click.Path(dir_okay=False, path_type=Path),
              help="Cluster HMAC key file (default: hmac.key beside the config).")
@click.option("--json", "as_json", is_flag=True, help="Print the whole result as JSON.")
@click.pass_context
def query(ctx: click.Context, query_type: str, arg: str | None, peers: tuple[str, ...],
          ask_all: bool, coverage: int, port: int, timeout: float, hmac_key: Path | None,
          as_json: bool) -> None:
    """Ask confd: TYPE is a name or number, ARG the query (JSON or a plain string).

    \b
    Types: ping(0) node_role_byname(1) node_pip_by_instance_ip(2) cluster_master(3)
           node_pip_list(4) mc_pip_list(5) instances_ips_list(6) node_drbd(7)
           node_instances(8) instance_disks(9) config_query(10) data_collectors(11)
           herder's: mc_list(100) offline_nodes(101) instance_list(102)
           instance_primary_node(103)
    Examples: cluster_master '{"3": [0, 1, 2]}'   node_pip_by_instance_ip '{"1": "192.0.2.7"}'
              config_query /cluster/master_ip
    Keeps the answer with the highest serial; exits 1 on an error answer or no answer.
    """
    rtype = confd_protocol.request_type(query_type)
    client = confd_client(ctx, peers, port, timeout, hmac_key)
    result = client.query(rtype, _parse_arg(arg), coverage=-1 if ask_all else coverage)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, sort_keys=True))
    else:
        answer = result.answer
        if isinstance(answer, str):
            click.echo(answer)
        else:
            click.echo(json.dumps(answer, indent=2, sort_keys=True))
        notes = [f"serial {result.serial}", f"{result.received}/{result.sent} peer(s) answered"]
        if result.timed_out:
            notes.append(f"fewer than the {result.needed} needed")
        if not result.consistent:
            notes.append("INCONSISTENT answers with the same serial")
        click.echo(f"({', '.join(notes)}; from {result.peer})", err=True)
    if not result.ok:
        raise HerderError(f"confd answered an error (status {result.status}): {result.answer}")
