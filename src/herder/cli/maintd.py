"""`herder maintd`: run the maintenance daemon on the master, or ask a running one."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import socket
import ssl
import sys
from pathlib import Path
from typing import Any

import click

from herder.cli.httpjson import call
from herder.core.errors import HerderError
from herder.core.pidfile import pid_file

DEFAULT_PORT = 1816
DEFAULT_NOTIFY_PORT = 1817
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"
EXIT_NOTMASTER = 11
GANETI_DATA = "/var/lib/ganeti"
GANETI_STATE = "/var/lib/herder/maintd-state.json"


@click.group(invoke_without_command=True)
@click.option("--bind", help="Address to listen on (default: the cluster's master IP, else the "
                             "master node's primary IP).")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="TCP port (0: any free port, printed at start).")
@click.option("--node", "node_name", help="This node's name (default: FQDN); maintd exits "
                                          "with code 11 unless it is the master.")
@click.option("--state", "state_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Keep the state in this JSON file instead of the cluster config.")
@click.option("--mond-port", type=click.IntRange(1, 65535), default=1815, show_default=True)
@click.option("--round-delay", type=click.FloatRange(0), help="Seconds between the end of a "
              "round and the next one (default: the cluster's maintenance roundDelay).")
@click.option("--poll-interval", type=click.FloatRange(0.05), default=10.0, show_default=True,
              help="Seconds between two polls of the agents.")
@click.option("--harep", is_flag=True, help="Also do harep's instance repairs (policy from "
              "the ganeti:watcher:autorepair:* tags; until the cluster config has a setting).")
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("/run/herder"), show_default=True,
              help="Directory of maintd.pid (where mond's daemon collector looks).")
@click.option("--notify-port", type=click.IntRange(0, 65535), default=DEFAULT_NOTIFY_PORT,
              show_default=True, help="HTTPS port (cluster certificate) of POST "
              "/1/notifications, instmon's failure notifications (0: no HTTPS listener).")
@click.option("--notify-insecure", is_flag=True, help="Also accept notifications on the plain "
              "HTTP port (else 403 there).")
@click.option("--failure-table", type=click.Path(dir_okay=False, path_type=Path),
              help="TOML file: which notified events are failures ([failures] "
                   "\"EVENT.VIR_DOMAIN_EVENT\" = \"crash\"|\"io-error\"|\"stop\"|\"ignore\"; "
                   "replace = true drops the defaults).")
@click.option("--failure-window", type=click.FloatRange(0), default=600.0, show_default=True,
              help="Seconds: a second failure of an instance within them relocates it "
                   "instead of restarting it in place.")
@click.option("--ganeti-rapi", metavar="URL", help="Maintain a Ganeti cluster through its "
              "RAPI (e.g. https://MASTER:5080) instead of herder's masterd; state in --state "
              f"(default {GANETI_STATE}).")
@click.option("--rapi-user", default="admin", show_default=True, help="Ganeti RAPI user.")
@click.option("--rapi-password-file", type=click.Path(dir_okay=False, path_type=Path),
              help="File with the RAPI user's password (Ganeti mode).")
@click.option("--rapi-ca", type=click.Path(dir_okay=False, path_type=Path),
              help="Pin Ganeti's RAPI certificate (default "
                   f"{GANETI_DATA}/rapi.pem when readable; the host name is not checked).")
@click.option("--hmac-key", type=click.Path(dir_okay=False, path_type=Path),
              help="Cluster HMAC key (herder: hmac.key beside the config; Ganeti mode: "
                   f"{GANETI_DATA}/hmac.key).")
@click.option("--cert", "cert_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Key and certificate (one PEM) of the HTTPS port (herder: server.pem beside "
                   f"the config; Ganeti mode: {GANETI_DATA}/server.pem).")
@click.option("--watcher/--no-watcher", default=None, help="Restart down instances and "
              "activate disks (default: on for herder, off for Ganeti, whose watcher does it).")
@click.option("--debug", is_flag=True, help="Log at debug level.")
@click.pass_context
def maintd(ctx: click.Context, bind: str | None, port: int, node_name: str | None,
           state_file: Path | None, mond_port: int, round_delay: float | None,
           poll_interval: float, harep: bool, run_dir: Path, notify_port: int,
           notify_insecure: bool, failure_table: Path | None, failure_window: float,
           ganeti_rapi: str | None, rapi_user: str, rapi_password_file: Path | None,
           rapi_ca: Path | None, hmac_key: Path | None, cert_file: Path | None,
           watcher: bool | None, debug: bool) -> None:
    """The maintenance daemon: turns the nodes' self-diagnoses into tracked repairs.

    Runs on the master only (exit code 11 elsewhere) until SIGTERM/SIGINT. It polls every
    node's mond (`/1/report/node/diagnose`, HMAC-checked), keeps incidents, and submits the
    repair jobs round by round through masterd's RAPI.

    Instance failures: `herder instmon` on every node POSTs masakari-format notifications
    (token derived from the cluster HMAC key) to the HTTPS port; a failure of an admin-up
    instance becomes an instance incident (restart, relocate or drain-relocate) unless the
    instance is tagged herder:instmon:norecover.

    \b
    Routes (port 1816): /  /1/status  /1/jobs  /1/evacuated  /1/reports  /1/overview
            /1/notifications  POST /1/cancel/UUID   /status.html (live status page)
    HTTPS (port 1817): the same, plus POST /1/notifications
    Ask a running daemon:  herder maintd status | herder maintd cancel UUID

    On a Ganeti cluster (docs/ganeti.md), on its master:
      herder maintd --ganeti-rapi https://MASTER:5080 --rapi-password-file FILE
                    --mond-port 1825   (herder mond beside Ganeti's)
    """
    if ctx.invoked_subcommand is not None:
        return
    from herder.cli import remote
    from herder.cli.common import store_from
    from herder.core import envelope
    from herder.core import notification as N
    from herder.core.cluster_secrets import CERT_FILE, HMAC_KEY_FILE
    from herder.maintd.daemon import Maintd, RapiCluster
    from herder.maintd.server import NotifySettings, make_app
    from herder.maintd.sources import DiagnoseSource
    from herder.maintd.state import FileState, RapiState, StateStore

    logging.basicConfig(level=logging.DEBUG if debug else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.DEBUG if debug else logging.WARNING)
    try:
        table = N.load_failure_table(failure_table)
    except N.NotificationError as err:
        raise HerderError(str(err).replace("\n", " ")) from None
    if ganeti_rapi:
        from herder.maintd.ganeti import GanetiCluster, repair_via_mond

        client = ganeti_client(ganeti_rapi, rapi_user, rapi_password_file, rapi_ca)
        me = node_name or socket.getfqdn()
        try:
            info = client.get_info()
            nodes = client.get_nodes(bulk=True)
        except Exception as err:
            raise HerderError(f"cannot ask Ganeti's RAPI at {ganeti_rapi}: "
                              f"{_rapi_problem(err, rapi_user)}") from None
        master = info.get("master")
        if master != me:
            click.echo(f"herder maintd: this node ({me}) is not the master ({master})", err=True)
            sys.exit(EXIT_NOTMASTER)
        if bind is None:
            bind = next((n.get("pip") for n in nodes if n.get("name") == me), None) or "0.0.0.0"
        key_path = hmac_key or Path(GANETI_DATA) / "hmac.key"
        cert = cert_file or Path(GANETI_DATA) / "server.pem"
        maint: dict = {}
        state: StateStore = FileState(state_file or Path(GANETI_STATE))
    else:
        store = store_from(ctx)
        client = remote.client(ctx)
        me = node_name or socket.getfqdn()
        try:
            info = client.get_info()
            master = info.get("master")
            maint = client.get_herder("maintenance")
            nodes = client.get_nodes(bulk=True)
        except Exception as err:
            raise HerderError(f"cannot ask masterd: {err}") from None
        voted = master_vote(store, me)
        if voted is not None:
            master = voted
        if master != me:
            click.echo(f"herder maintd: this node ({me}) is not the master ({master})", err=True)
            sys.exit(EXIT_NOTMASTER)
        if bind is None:
            cluster_ip = store.load().cluster.master_ip if store.exists() else None
            master_pip = next((n.get("pip") for n in nodes if n.get("name") == me), None)
            bind = _bindable(cluster_ip) or master_pip or "0.0.0.0"
        key_path = hmac_key or store.directory / HMAC_KEY_FILE
        cert = cert_file or store.directory / CERT_FILE
        if state_file is not None:
            state = FileState(state_file)
        else:
            state = RapiState(client, FileState(store.directory / "maintd-state.json"))

    def key() -> bytes | None:
        try:
            return envelope.load_key(key_path)
        except (OSError, ValueError):
            return None

    delay = float(maint.get("roundDelay", 300)) if round_delay is None else round_delay
    cluster = GanetiCluster(client, repair=repair_via_mond(key, mond_port)) if ganeti_rapi \
        else RapiCluster(client)
    daemon = Maintd(cluster, state, [DiagnoseSource(key, port=mond_port)],
                    round_delay=delay, interval=poll_interval,
                    enabled=bool(maint.get("enabled", True)),
                    harep=harep or bool(maint.get("harep", False)),
                    watcher=(not ganeti_rapi) if watcher is None else watcher,
                    failure_table=table, failure_window=failure_window)
    context = None
    if notify_port:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(cert)
        except (OSError, ssl.SSLError) as err:
            raise HerderError(f"cannot load the cluster certificate {cert} for the "
                              f"notification port: {err} (--notify-port 0 disables it)") \
                from None
    settings = NotifySettings(key, https_port=notify_port, insecure=notify_insecure)

    async def main() -> None:
        from aiohttp import web

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await daemon.start()
        runner = web.AppRunner(make_app(daemon, settings), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, bind, port)
        await site.start()
        bound = runner.addresses[0][1]
        if context is not None:
            try:
                await web.TCPSite(runner, bind, notify_port, ssl_context=context).start()
            except OSError as err:
                raise HerderError(f"cannot listen on {bind}:{notify_port} (--notify-port): "
                                  f"{err.strerror}") from None
            settings.https_port = runner.addresses[-1][1]
        click.echo(f"herder maintd: listening on http://{bind}:{bound}/ "
                   f"(status page http://{bind}:{bound}/status.html)", err=True)
        if context is not None:
            click.echo(f"herder maintd: notifications: listening on "
                       f"https://{bind}:{settings.https_port}/1/notifications", err=True)
        task = asyncio.create_task(daemon.run())
        try:
            with pid_file(run_dir, "maintd"):
                await stop.wait()
        finally:
            task.cancel()
            await runner.cleanup()

    try:
        asyncio.run(main())
    except OSError as err:
        raise HerderError(f"cannot listen on {bind}:{port}: {err.strerror}") from None


def ganeti_client(url: str, user: str, password_file: Path | None, ca: Path | None) -> Any:
    """A RAPI client for a Ganeti cluster: its users file's credentials, its pinned
    certificate (the host name is not checked: Ganeti's certificate names the cluster)."""
    from herder.core.rapi import RapiClient

    if password_file is None:
        raise HerderError("--ganeti-rapi needs --rapi-password-file (the RAPI user's password)")
    try:
        password = password_file.read_text().strip()
    except OSError as err:
        raise HerderError(f"cannot read {password_file}: {err.strerror}") from None
    if ca is None and Path(GANETI_DATA, "rapi.pem").is_file():
        ca = Path(GANETI_DATA, "rapi.pem")
    verify: Any = str(ca) if ca is not None else True
    if ca is not None and not ca.is_file():
        raise HerderError(f"RAPI certificate {ca} does not exist")
    return RapiClient(url, user, password, verify=verify, check_hostname=ca is None,
                      timeout=60.0)


def _rapi_problem(err: Exception, user: str) -> str:
    status = getattr(err, "status", None)
    if status in (401, 403):
        return (f"the credentials of RAPI user {user!r} were refused ({status}); check "
                "--rapi-user and --rapi-password-file against Ganeti's rapi/users file")
    return str(err)


def _bindable(address: str | None) -> str | None:
    if not address:
        return None
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((address, 0))
    except OSError:
        return None
    return address


url_option = click.option("--url", default=DEFAULT_URL, show_default=True,
                          help="Base URL of maintd.")


@maintd.command()
@url_option
@click.option("--json", "as_json", is_flag=True, help="Print /1/status as JSON.")
def status(url: str, as_json: bool) -> None:
    """List a running maintd's incidents."""
    incidents = call(f"{url.rstrip('/')}/1/status", "maintd")
    if as_json:
        click.echo(json.dumps(incidents, indent=1))
        return
    for inc in incidents:
        jobs = ",".join(str(j) for j in inc.get("jobs", [])) or "-"
        what = f"  instance {inc['instance']}" if inc.get("instance") else ""
        click.echo(f"{inc['uuid']}  {inc['node']:20} {inc['action']:18} "
                   f"{inc['repair-status']:10} jobs {jobs}  {inc['tag']}{what}")


@maintd.command()
@click.argument("uuid")
@url_option
def cancel(uuid: str, url: str) -> None:
    """Cancel an incident: nothing more is done for it; it is forgotten once no longer
    observed."""
    answer = call(f"{url.rstrip('/')}/1/cancel/{uuid}", "maintd", "POST")
    click.echo(f"{answer['uuid']}: {answer['repair-status']}")


def master_vote(store, me: str) -> str | None:
    """Ask the master candidates' confd who the master is; a majority of the candidates must
    name the same node. None when no confd answers (then masterd's own answer is used)."""
    import logging

    from herder.core import confd as C
    from herder.core import envelope
    from herder.core.cluster_secrets import HMAC_KEY_FILE

    log = logging.getLogger("herder.maintd")
    if not store.exists():
        return None
    config = store.load()
    peers = C.peers_from_config(config)
    try:
        client = C.ConfdClient(peers, envelope.load_key(store.directory / HMAC_KEY_FILE),
                               timeout=2.0)
        result = client.query(C.REQ_CLUSTER_MASTER, None, coverage=-1)
    except Exception as err:  # no confd anywhere: fall back to masterd
        log.warning("master vote: no confd answered (%s); trusting masterd", err)
        return None
    votes: dict[str, int] = {}
    for reply in result.replies.values():
        if reply.status == 0 and isinstance(reply.answer, str):
            votes[reply.answer] = votes.get(reply.answer, 0) + 1
    winner, count = max(votes.items(), key=lambda kv: kv[1], default=(None, 0))
    if winner is None or count * 2 <= len(peers):
        raise HerderError(f"master vote: no majority of the {len(peers)} master candidates "
                          f"agrees on a master ({votes or 'no answers'})")
    if winner != me:
        log.warning("master vote: %d of %d master candidates name %s", count, len(peers), winner)
    return winner
