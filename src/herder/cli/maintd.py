"""`herder maintd`: run the maintenance daemon on the master, or ask a running one."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from herder.cli.httpjson import call
from herder.core import faults, ports
from herder.core.errors import HerderError
from herder.maintd.settings import (
    EXIT_NOTMASTER,
    GANETI_DATA,
    GANETI_STATE,
    MaintdSettings,
    NotMaster,
)

if TYPE_CHECKING:
    from herder.core.rapi import RapiClient

DEFAULT_URL = f"http://127.0.0.1:{ports.MAINTD}"


@click.group(invoke_without_command=True)
@click.option("--bind", help="Address to listen on (default: the cluster's master IP, else the "
                             "master node's primary IP).")
@click.option("--port", type=click.IntRange(0, 65535), default=ports.MAINTD, show_default=True,
              help="TCP port (0: any free port, printed at start).")
@click.option("--node", "node_name", help="This node's name (default: FQDN); maintd exits "
                                          "with code 11 unless it is the master.")
@click.option("--state", "state_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Keep the state in this JSON file instead of the cluster config.")
@click.option("--mond-port", type=click.IntRange(1, 65535), default=ports.MOND, show_default=True)
@click.option("--round-delay", type=click.FloatRange(0), help="Seconds between the end of a "
              "round and the next one (default: the cluster's maintenance roundDelay).")
@click.option("--poll-interval", type=click.FloatRange(0.05), default=10.0, show_default=True,
              help="Seconds between two polls of the agents.")
@click.option("--harep", is_flag=True, help="Also do harep's instance repairs (policy from "
              "the ganeti:watcher:autorepair:* tags) whatever the cluster's maintenance harep "
              "setting (`cluster modify --maintd-harep`, read at start) says.")
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("/run/herder"), show_default=True,
              help="Directory of maintd.pid (where mond's daemon collector looks).")
@click.option("--notify-port", type=click.IntRange(0, 65535), default=ports.MAINTD_NOTIFY,
              show_default=True, help="HTTPS port (cluster certificate) of POST "
              "/1/notifications, instmon's failure notifications (0: no HTTPS listener).")
@click.option("--notify-insecure", is_flag=True, help="Also accept notifications on the plain "
              "HTTP port (else 403 there).")
@click.option("--failure-table", type=click.Path(dir_okay=False, path_type=Path),
              help="TOML file: which notified events are failures ([failures] "
                   "\"EVENT.VIR_DOMAIN_EVENT\" = \"crash\"|\"io-error\"|\"stop\"|\"ignore\"; "
                   "replace = true drops the defaults; [actions] \"hung\" and "
                   "\"paused-io-error\" = \"restart\"|\"failover\"|\"notify\"; hung_polls = N "
                   "reports).")
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
@click.option("--rapi-users", type=click.Path(dir_okay=False, path_type=Path),
              help="RAPI users file: its users with the write option may cancel incidents "
                   "over HTTPS (default: rapi_users beside the config; Ganeti mode: "
                   f"{GANETI_DATA}/rapi/users).")
@click.option("--watcher/--no-watcher", default=None, help="Restart down instances and "
              "activate disks (default: on for herder, off for Ganeti, whose watcher does it).")
@click.option("--node-recovery/--no-node-recovery", default=True, show_default=True,
              help="Declare nodes whose liveness lease ran out failed (with a majority of the "
                   "master candidates), fence them and fail their instances over "
                   "(docs/ha.md \"Node failure\").")
@click.option("--node-failure-time", type=click.FloatRange(6.0, 600.0), default=12.0,
              show_default=True, help="Seconds without a lease renewal before a node is "
                                      "suspected (at least the lease time, 6 s).")
@click.option("--local-dir", type=click.Path(file_okay=False, path_type=Path),
              help="etcd backend: the directory of the cluster secrets (default "
                   "/var/lib/herder), as masterd's.")
@click.option("--debug", is_flag=True, help="Log at debug level.")
@click.pass_context
def maintd(ctx: click.Context, bind: str | None, port: int, node_name: str | None,
           state_file: Path | None, mond_port: int, round_delay: float | None,
           poll_interval: float, harep: bool, run_dir: Path, notify_port: int,
           notify_insecure: bool, failure_table: Path | None, failure_window: float,
           ganeti_rapi: str | None, rapi_user: str, rapi_password_file: Path | None,
           rapi_ca: Path | None, hmac_key: Path | None, cert_file: Path | None,
           rapi_users: Path | None, watcher: bool | None, node_recovery: bool,
           node_failure_time: float, local_dir: Path | None, debug: bool) -> None:
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
            /1/notifications   /status.html (live status page)   (reads only)
    HTTPS (port 1817): the same, plus POST /1/notifications (instmon's token) and
            POST /1/cancel/UUID (a RAPI user that may write)
    Ask a running daemon:  herder maintd status | herder maintd cancel UUID

    On a Ganeti cluster (docs/ganeti.md), on its master:
      herder maintd --ganeti-rapi https://MASTER:5080 --rapi-password-file FILE
                    --mond-port 1825   (herder mond beside Ganeti's)
    """
    if ctx.invoked_subcommand is not None:
        return
    from herder.cli import remote
    from herder.maintd.startup import run

    faults.enable()  # a fatal signal leaves a traceback (core.faults)
    logging.basicConfig(level=logging.DEBUG if debug else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.DEBUG if debug else logging.WARNING)
    settings = MaintdSettings(
        config_path=(ctx.find_root().obj or {}).get("config_path"),
        masterd_url=None if ganeti_rapi else remote.masterd_url(ctx),
        bind=bind, port=port, node_name=node_name, state_file=state_file, mond_port=mond_port,
        round_delay=round_delay, poll_interval=poll_interval, harep=harep, run_dir=run_dir,
        notify_port=notify_port, notify_insecure=notify_insecure, failure_table=failure_table,
        failure_window=failure_window, ganeti_rapi=ganeti_rapi, rapi_user=rapi_user,
        rapi_password_file=rapi_password_file, rapi_ca=rapi_ca, hmac_key=hmac_key,
        cert_file=cert_file, watcher=watcher, rapi_users=rapi_users,
        node_recovery=node_recovery, node_failure_time=node_failure_time,
        local_dir=local_dir)
    try:
        run(settings, say=lambda line: click.echo(line, err=True))
    except NotMaster as err:
        click.echo(f"herder maintd: {err}", err=True)
        sys.exit(EXIT_NOTMASTER)


url_option = click.option("--url", help="Base URL of maintd (default: the client profile's "
                          "maintd, else the cluster's master address, port "
                          f"{ports.MAINTD}).")


def maintd_url(ctx: click.Context, url: str | None) -> str:
    """maintd runs on the master and listens on its master IP: found from the cluster."""
    if url:
        return url.rstrip("/")
    from herder.cli import remote

    found = remote.profile().maintd
    if found:
        return found.rstrip("/")
    host = remote.master_address(ctx)
    if host is None:
        return DEFAULT_URL
    return f"http://{f'[{host}]' if ':' in host else host}:{ports.MAINTD}"


@maintd.command()
@url_option
@click.option("--json", "as_json", is_flag=True, help="Print /1/status as JSON.")
@click.pass_context
def status(ctx: click.Context, url: str | None, as_json: bool) -> None:
    """List a running maintd's incidents (and, from herder's maintd, whether it handles dead
    nodes)."""
    base = maintd_url(ctx, url)
    incidents = call(f"{base}/1/status", "maintd")
    if as_json:
        click.echo(json.dumps(incidents, indent=1))
        return
    try:  # herder's extension (a Ganeti maintd has none): node names, node failures
        overview = call(f"{base}/1/overview", "maintd")
    except HerderError:
        overview = {}
    names = overview.get("node_names") or {}
    for inc in incidents:
        jobs = ",".join(str(j) for j in inc.get("jobs", [])) or "-"
        what = f"  instance {inc['instance']}" if inc.get("instance") else ""
        original = inc.get("original")
        if inc["action"] == "node-failed" and isinstance(original, dict):
            what = f"  {original.get('step')}: {original.get('detail')}"  # maintd.nodefail
        node = names.get(inc["node"]) or inc["node"]
        click.echo(f"{inc['uuid']}  {node:20} {inc['action']:18} "
                   f"{inc['repair-status']:10} jobs {jobs}  {inc['tag']}{what}")
    failures = overview.get("node_failures")
    if isinstance(failures, dict):
        click.echo(f"node failures: {failures.get('state')}")
        for note in failures.get("notes") or []:
            click.echo(f"  {note}")
    _show_backup_runs(overview.get("backups"))


def _show_backup_runs(backups: object) -> None:
    """The scheduled backups' runs (herder's maintd.backups), newest last."""
    if not isinstance(backups, dict) or not backups.get("runs"):
        return
    from herder.core.backupsched import utc_text

    click.echo("scheduled backups:")
    for run in backups["runs"]:
        jobs = ",".join(str(j) for j in run.get("jobs") or []) or "-"
        error = f"  {run['error']}" if run.get("error") else ""
        click.echo(f"{run['uuid']}  {run['schedule']:16} {run['instance']:20} "
                   f"{run['status']:8} jobs {jobs}  to {run['targetNode']}  "
                   f"{utc_text(run.get('start') or 0)} .. {utc_text(run.get('end') or 0)}"
                   f"{error}")


@maintd.command()
@click.argument("uuid")
@click.option("--url", help="maintd's HTTPS base URL (default: https://MASTER_IP:"
                            f"{ports.MAINTD_NOTIFY}, the master's address as masterd's).")
@click.option("--rapi-user", help="RAPI user that may write (default: the first such user of "
                                  "the cluster's rapi_users).")
@click.option("--rapi-password-file", type=click.Path(dir_okay=False, path_type=Path),
              help="File with --rapi-user's password (a Ganeti cluster: its rapi/users user).")
@click.option("--rapi-ca", type=click.Path(dir_okay=False, path_type=Path),
              help="maintd's certificate to trust (default: the cluster's server.pem; with "
                   f"--rapi-password-file {GANETI_DATA}/server.pem).")
@click.pass_context
def cancel(ctx: click.Context, uuid: str, url: str | None, rapi_user: str | None,
           rapi_password_file: Path | None, rapi_ca: Path | None) -> None:
    """Cancel an incident: nothing more is done for it; it is forgotten once no longer
    observed.

    A change: over HTTPS (maintd's notification port) as a RAPI user with the write option,
    whose credentials come from the client profile, else the cluster's rapi_users file (or
    --rapi-user and --rapi-password-file)."""
    from herder.core.rapi import RapiError

    with _writer_client(ctx, url, rapi_user, rapi_password_file, rapi_ca) as client:
        try:
            answer = client.request("POST", f"/1/cancel/{uuid}")
        except RapiError as err:  # the RAPI client's words, about maintd's HTTPS port
            raise HerderError(str(err).replace("RAPI", "maintd", 1)) from None
    click.echo(f"{answer['uuid']}: {answer['repair-status']}")


def _writer_client(ctx: click.Context, url: str | None, user: str | None,
                   password_file: Path | None, ca: Path | None) -> RapiClient:
    """A client of maintd's HTTPS port with the credentials of a RAPI user that may write."""
    from herder.cli import remote
    from herder.cli.common import store_from
    from herder.core.rapi import RapiClient

    store = store_from(ctx)
    if url is None:  # maintd follows the master IP: found as masterd is
        host = remote.master_address(ctx) or "127.0.0.1"
        url = f"https://{f'[{host}]' if ':' in host else host}:{ports.MAINTD_NOTIFY}"
    found = remote.profile()
    if password_file is None and found.has_credentials and user in (None, found.user):
        assert found.ca is not None  # a machine with a client profile: its user
        return RapiClient(url, found.user or "admin", found.password(),
                          verify=str(ca or found.ca), check_hostname=False, timeout=30.0)
    if password_file is not None:
        try:
            password = password_file.read_text().strip()
        except OSError as err:
            raise HerderError(f"cannot read {password_file}: {err.strerror}") from None
        return RapiClient(url, user or "admin", password,
                          verify=str(ca or Path(GANETI_DATA) / "server.pem"),
                          check_hostname=False, timeout=30.0)
    client = RapiClient.for_herder_cluster(store.directory, url, user=user, timeout=30.0)
    if ca is not None:
        client.close()
        raise HerderError("--rapi-ca needs --rapi-password-file (herder's credentials come "
                          "with the cluster's own certificate)")
    return client
