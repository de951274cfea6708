"""`herder instmon`: watch this node's VMs from the hypervisor and notify the recovery workflow;
or ask a running one, or check a filter configuration."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import click

from herder.core import faults, ports
from herder.core.errors import HerderError
from herder.instmon.config import DEFAULT_RUN_DIR, DEFAULT_SPOOL


@click.group(invoke_without_command=True)
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              help="TOML file (default: /etc/herder/instmon.toml when it exists): hostname, "
                   "libvirt_uri, [notify] url/ca_file/token_file/"
                   "backoff_base/backoff_max, [filter] preset/default/rules, [spool] dir/"
                   "max_entries/max_bytes, [collapse] delay/window (docs/instmon.md).")
@click.option("--node", "hostname", help="The hostname sent in notifications (default: the "
              "config file's, else this node's FQDN); maintd matches it to the node name.")
@click.option("--libvirt-uri", help="Hypervisor to watch (default: the node's libvirt_uri "
              "node parameter, else qemu:///system).")
@click.option("--notify-url", help="Where to POST notifications (default: "
              f"https://<master ip>:{ports.MAINTD_NOTIFY}/1/notifications, maintd).")
@click.option("--ca-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Verify the receiver with this CA/certificate (default for herder's maintd: "
                   "the cluster's server.pem).")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path),
              help="File with the X-Auth-Token to send (default: derived from the cluster's "
                   "HMAC key, which maintd expects).")
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path),
              default=DEFAULT_RUN_DIR, show_default=True,
              help="instmon.pid, instmon.json (state), instmon.sock, and noded's markers.")
@click.option("--spool-dir", type=click.Path(file_okay=False, path_type=Path),
              help=f"Notifications not yet delivered (default: the config's, else "
                   f"{DEFAULT_SPOOL}).")
@click.option("--debug", is_flag=True, help="Log at debug level.")
@click.pass_context
def instmon(ctx: click.Context, config_path: Path | None, hostname: str | None,
            libvirt_uri: str | None, notify_url: str | None, ca_file: Path | None,
            token_file: Path | None, run_dir: Path, spool_dir: Path | None,
            debug: bool) -> None:
    """The instance monitor: libvirt events -> filter -> notifications (masakari's format).

    Runs until SIGTERM/SIGINT. Events herder itself causes (a migration, an ordered shutdown)
    are not reported; notifications wait in a spool on disk until the receiver takes them.

    \b
    Ask a running one:   herder instmon status | herder instmon inject IO_ERROR.REPORT VM
    Check a filter file: herder instmon check-config FILE
    """
    if ctx.invoked_subcommand is not None:
        return
    from herder.instmon import config
    from herder.instmon.daemon import run

    faults.enable()  # a fatal signal leaves a traceback (core.faults)
    logging.basicConfig(level=logging.DEBUG if debug else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.DEBUG if debug else logging.WARNING)
    settings = config.resolve(config.Options(
        config_file=config.chosen(config_path),
        cluster_config=(ctx.find_root().obj or {}).get("config_path"),
        hostname=hostname, libvirt_uri=libvirt_uri, notify_url=notify_url, ca_file=ca_file,
        token_file=token_file, run_dir=run_dir, spool_dir=spool_dir))
    run(settings, say=lambda line: click.echo(line, err=True))


run_dir_option = click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path),
                              default=DEFAULT_RUN_DIR, show_default=True)


def _ask(run_dir: Path, request: dict[str, Any]) -> dict[str, Any]:
    from herder.instmon.daemon import control

    try:
        answer = control(run_dir, request)
    except (OSError, ValueError) as err:
        raise HerderError(f"no instmon answers at {run_dir}/instmon.sock: {err}") from None
    if not answer.get("ok"):
        raise HerderError(str(answer.get("error") or "instmon refused the request"))
    return answer


@instmon.command()
@run_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the whole state as JSON.")
def status(run_dir: Path, as_json: bool) -> None:
    """Connection, counters, spool and the last failure per domain of a running instmon."""
    state = _ask(run_dir, {"status": True})["state"]
    if as_json:
        click.echo(json.dumps(state, indent=1))
        return
    sender = state.get("sender", {})
    click.echo(f"libvirt {state['libvirt_uri']}: "
               f"{'connected' if state['connected'] else 'DISCONNECTED'}"
               f"{' (' + state['libvirt_error'] + ')' if state.get('libvirt_error') else ''}")
    error = f", last error: {sender['last_error']}" if sender.get("last_error") else ""
    click.echo(f"notify {state['notify_url']}: spool {state['spool']['entries']} waiting, "
               f"{sender.get('sent', 0)} sent{error}")
    counts = state["counts"]
    click.echo("events " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    for uuid, dom in state["domains"].items():
        fail = dom.get("last_failure")
        last = f"last failure {fail['event']}/{fail['detail']}" if fail else "no failure"
        click.echo(f"  {dom.get('name', '?'):24} {uuid}  "
                   f"{'active' if dom.get('active') else 'inactive':8} {last}")


@instmon.command()
@click.argument("event")
@click.argument("domain")
@run_dir_option
def inject(event: str, domain: str, run_dir: Path) -> None:
    """Replay EVENT (e.g. IO_ERROR.REPORT, WATCHDOG.PAUSE, LIFECYCLE.STOPPED.FAILED) for
    DOMAIN (name or UUID) through the running monitor's filter, as if libvirt had sent it."""
    answer = _ask(run_dir, {"inject": event, "domain": domain})
    click.echo(f"injected {answer['key']} for {answer['name']} ({answer['uuid']})")


@instmon.command("check-config")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
def check_config(path: Path) -> None:
    """Validate a config file and print the effective filter rules."""
    from herder.instmon import config

    filt = config.event_filter(config.load(path))
    for key, verdict in sorted(filt.rules.items()):
        click.echo(f"{key:40} {verdict}")
    click.echo(f"{'(anything else)':40} {filt.default}")
