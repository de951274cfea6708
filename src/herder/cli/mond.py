"""`herder mond`: run the node monitoring agent, or ask a running one."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import click
from click.core import ParameterSource

from herder.cli.httpjson import call
from herder.core import faults, ports, ssconf
from herder.core.locations import local_config_path
from herder.mond.collector import MondSettings
from herder.mond.localconf import DEFAULT_BIND

DEFAULT_URL = f"http://127.0.0.1:{ports.MOND}"


@click.group(invoke_without_command=True)
@click.option("--config", "local_config", type=click.Path(dir_okay=False, path_type=Path),
              help="mond's local TOML config (not the cluster config; default: "
                   "/etc/herder/mond.toml when it exists): node, bind, port, "
                   "diagnose_command, diagnose_dir, diagnose_interval, hmac_key, confd, "
                   "confd_key, libvirt_uri, run_dir, "
                   "[repair] enabled/commands_dir/timeout/max_skew. Flags override it.")
@click.option("--bind", default=DEFAULT_BIND, show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=ports.MOND, show_default=True,
              help="TCP port (0: any free port, printed at start).")
@click.option("--node", "node_name", help="This node's name in the cluster (default: FQDN).")
@click.option("--plugin-dir", type=click.Path(file_okay=False, path_type=Path),
              default=MondSettings.plugin_dir, show_default=True)
@click.option("--diagnose-dir", type=click.Path(file_okay=False, path_type=Path),
              default=MondSettings.diagnose_dir, show_default=True,
              help="White-list directory of self-diagnose commands.")
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path),
              default=MondSettings.run_dir, show_default=True,
              help="Where pid files (and the last repair timestamp) live.")
@click.option("--libvirt-uri", help="libvirt URI (default: libvirt's default for this host).")
@click.option("--collector-timeout", type=click.FloatRange(0.1), default=30.0,
              show_default=True, help="Seconds after which a running collector counts as hung.")
@click.option("--confd", "confd_peers", multiple=True, metavar="HOST[:PORT]",
              help="On a node without the cluster config, ask this confd (herder's or "
                   "Ganeti's; repeatable) for collector settings and DRBD minors.")
@click.option("--confd-key", type=click.Path(dir_okay=False, path_type=Path),
              help="confd's HMAC key file (default: the cluster key, --hmac-key).")
@click.option("--hmac-key", type=click.Path(dir_okay=False, path_type=Path),
              help="The cluster HMAC key: signs the diagnose report, verifies POST /1/repair "
                   "(default: hmac.key beside the cluster config; Ganeti: "
                   "/var/lib/ganeti/hmac.key).")
@click.option("--debug", is_flag=True, help="Log at debug level.")
@click.pass_context
def mond(ctx: click.Context, local_config: Path | None, bind: str, port: int,
         node_name: str | None, plugin_dir: Path, diagnose_dir: Path, run_dir: Path,
         libvirt_uri: str | None, collector_timeout: float, confd_peers: tuple[str, ...],
         confd_key: Path | None, hmac_key: Path | None, debug: bool) -> None:
    """The node monitoring agent: JSON over HTTP (protocol v1, port 1815).

    Without a subcommand, runs the agent in the foreground until SIGTERM/SIGINT. Every
    collector runs on its own (adaptive) interval from the cluster config's data_collectors;
    requests are answered from the cache. On a node without the config, --confd names confd
    servers to ask instead (answers cached 15 s), e.g. an existing Ganeti cluster's; what
    Ganeti's config has no field for (the diagnose command, the repair route) comes from
    --config FILE. A bad file (unknown key, wrong type) stops mond before it starts.

    \b
    On a Ganeti node:  herder mond  (reads /etc/herder/mond.toml:)
        node = "node1.example.com"
        confd = ["MASTER_IP"]
        hmac_key = "/var/lib/ganeti/hmac.key"
        diagnose_command = "check-node"
        [repair]
        enabled = true

    \b
    Routes: /  /1  /1/list/collectors  /1/report/all  /1/report/CATEGORY/NAME[?verbose=1]
            /metrics (Prometheus)  /openapi.json
            POST /1/repair  (herder extension, off unless [repair] enabled = true): run a
              white-listed repair command from [repair] commands_dir for maintd; body
              HMAC-signed with the cluster key (herder.core.envelope), message
              {command, input, event, timestamp (int ns)}; 403 disabled/bad signature/
              replay, 400 malformed, 404 unknown command, 409 busy; 200 {event, command,
              exit_code, stdout, stderr, duration, timed_out}
    Ask a running agent:  herder mond list | herder mond report storage drbd --verbose
    """
    if ctx.invoked_subcommand is not None:
        return
    from herder.mond import localconf
    from herder.mond.server import run

    local_config = localconf.chosen(local_config)
    file_config = localconf.load(local_config) if local_config is not None else None
    flag_values = {"node": node_name, "bind": bind, "port": port, "diagnose_dir": diagnose_dir,
                   "run_dir": run_dir, "libvirt_uri": libvirt_uri,
                   "confd": confd_settings(confd_peers), "confd_key": confd_key,
                   "hmac_key": hmac_key}
    param_of = {"node": "node_name", "confd": "confd_peers"}
    flags = {key: value for key, value in flag_values.items()
             if _given(ctx, param_of.get(key, key))}
    resolved = localconf.resolve(
        file_config, MondSettings(plugin_dir=plugin_dir, collector_timeout=collector_timeout),
        flags, default_port=ports.MOND, default_bind=DEFAULT_BIND)
    faults.enable()  # a fatal signal leaves a traceback (core.faults)
    logging.basicConfig(level=logging.DEBUG if debug else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # the node's own files (its config copy, ssconf, HMAC key): on the etcd backend, whose
    # location a host's /etc/herder/environment gives every unit (docs/install.md), they are
    # in the local directory, not "beside" the etcd location (mond reads no etcd)
    run(resolved, local_config_path((ctx.find_root().obj or {}).get("config_path")),
        local_config, say=lambda line: click.echo(line, err=True))


def _given(ctx: click.Context, param: str) -> bool:
    """Whether a flag was given (command line or environment), not left at its default."""
    source = ctx.get_parameter_source(param)
    return source is not None and source not in (ParameterSource.DEFAULT,
                                                 ParameterSource.DEFAULT_MAP)


def confd_settings(peers: tuple[str, ...]) -> list[str]:
    """`--confd` values, checked: HOST, HOST:PORT, [V6]:PORT or a bare IPv6 address."""
    from herder.core.confd import parse_peer

    for peer in peers:
        try:
            host, port = parse_peer(peer)
        except ValueError:
            raise click.BadParameter(f"{peer!r} is not HOST[:PORT]", param_hint="--confd") from None
        if not host or not 0 < port < 65536:
            raise click.BadParameter(f"{peer!r} is not HOST[:PORT]", param_hint="--confd")
    return list(peers)


def url_option(func: click.decorators.FC) -> click.decorators.FC:
    func = click.option("--node", "node_name", metavar="NODE",
                        help="Ask this node's agent (found from the cluster: its primary IP, "
                             "or the client profile's address for it).")(func)
    return click.option("--url", help="Base URL of the agent (default: --node's; without it "
                        "this node's when it is a cluster node, else the master's).")(func)


def agent_url(ctx: click.Context, url: str | None, node: str | None) -> str:
    """The agent to ask: --url, else --node's address, else this node's (a node of a
    cluster), else the master's (a machine outside the cluster, e.g. with a client profile)."""
    if url:
        return url.rstrip("/")
    from herder.cli import remote

    if node is not None:
        config = remote.config_source(ctx).load()
        found = config.find_node(node)
        address = remote.profile().node_address(found.name, found.primary_ip)
    else:
        store = remote.store_from(ctx)
        here = store.exists() or ssconf.master_node(store.directory) is not None
        address = "127.0.0.1" if here else remote.master_address(ctx)
    if not address:
        return DEFAULT_URL
    return f"http://{f'[{address}]' if ':' in address else address}:{ports.MOND}"


@mond.command("list")
@url_option
@click.pass_context
def list_(ctx: click.Context, url: str | None, node_name: str | None) -> None:
    """List a running agent's active collectors: name, category, kind."""
    base = agent_url(ctx, url, node_name)
    for name, category, kind in call(f"{base}/1/list/collectors", "the agent"):
        click.echo(f"{name:24} {category:11} {kind}")


@mond.command()
@click.argument("category", metavar="CATEGORY|all")
@click.argument("name", required=False)
@click.option("--verbose", is_flag=True, help="Status collectors: all data, not just status.")
@url_option
@click.pass_context
def report(ctx: click.Context, category: str, name: str | None, verbose: bool,
           url: str | None, node_name: str | None) -> None:
    """Print a running agent's report: `report all`, or `report CATEGORY NAME`
    (category `default` for collectors without one)."""
    if category == "all":
        path = "/1/report/all"
    elif name is None:
        raise click.UsageError("give CATEGORY and NAME, or 'all'")
    else:
        path = f"/1/report/{category}/{name}"
    query = "?verbose=1" if verbose else ""
    base = agent_url(ctx, url, node_name)
    click.echo(json.dumps(call(f"{base}{path}{query}", "the agent"), indent=2))


def _summarise(data: object) -> tuple[str, str]:
    """(status, what) of one report's data, for the status table."""
    if isinstance(data, dict):
        st = data.get("status")
        if isinstance(st, dict):
            return str(st.get("code")), str(st.get("message", "")).replace("\n", "; ")
        if isinstance(st, str):  # diagnose: design-maintd's status word
            return st, json.dumps(data.get("details", ""))[:80]
        if "error" in data:
            return "error", str(data["error"])
        return "-", ", ".join(list(data)[:6])
    if isinstance(data, list):
        return "-", f"{len(data)} entries"
    return "-", str(data)[:80]


@mond.command()
@url_option
@click.pass_context
def status(ctx: click.Context, url: str | None, node_name: str | None) -> None:
    """One line per report of a running agent: category/name, kind, status, message."""
    reports = call(f"{agent_url(ctx, url, node_name)}/1/report/all", "the agent")
    assert isinstance(reports, list)
    for rep in reports:
        code, what = _summarise(rep.get("data"))
        where = f"{rep.get('category') or 'default'}/{rep.get('name')}"
        click.echo(f"{where:24} kind {rep.get('kind')}  status {code:6} {what}")
