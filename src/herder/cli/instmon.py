"""`herder instmon`: watch this node's VMs from the hypervisor and notify the recovery workflow;
or ask a running one, or check a filter configuration."""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import socket
import threading
import tomllib
from pathlib import Path
from typing import Any

import click

from herder.core.errors import HerderError
from herder.core.pidfile import pid_file

DEFAULT_RUN_DIR = Path("/run/herder")
DEFAULT_SPOOL = Path("/var/lib/herder/instmon-spool")
NOTIFY_PORT = 1817
CONFIG_KEYS = {"hostname", "libvirt_uri", "notify", "filter", "spool", "collapse"}
TABLE_KEYS = {  # the [filter] table is checked by the filter itself
    "notify": {"url", "ca_file", "check_hostname", "token", "token_file", "backoff_base",
               "backoff_max"},
    "spool": {"dir", "max_entries", "max_bytes"},
    "collapse": {"delay", "window"},
}


def load_config(path: Path | None) -> dict[str, Any]:
    """The TOML config file as a dict (HerderError with the reason when unusable)."""
    if path is None:
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise HerderError(f"cannot read {path}: {err}") from None
    unknown = set(data) - CONFIG_KEYS
    if unknown:
        raise HerderError(f"{path}: unknown keys {', '.join(sorted(unknown))} "
                          f"(known: {', '.join(sorted(CONFIG_KEYS))})")
    for table, known in TABLE_KEYS.items():
        section = data.get(table, {})
        if not isinstance(section, dict):
            raise HerderError(f"{path}: [{table}] must be a table")
        unknown = set(section) - known
        if unknown:
            raise HerderError(f"{path}: unknown keys {', '.join(sorted(unknown))} in "
                              f"[{table}] (known: {', '.join(sorted(known))})")
    return data


def build_filter(config: dict[str, Any]) -> Any:
    from herder.instmon.events import EventFilter, FilterError

    try:
        return EventFilter.from_config(config.get("filter"))
    except FilterError as err:
        raise HerderError(f"event filter: {err}") from None


@click.group(invoke_without_command=True)
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              help="TOML file: hostname, libvirt_uri, [notify] url/ca_file/token_file/"
                   "backoff_base/backoff_max, [filter] preset/default/rules, [spool] dir/"
                   "max_entries/max_bytes, [collapse] delay/window (docs/instmon.md).")
@click.option("--node", "hostname", help="The hostname sent in notifications (default: the "
              "config file's, else this node's FQDN); maintd matches it to the node name.")
@click.option("--libvirt-uri", help="Hypervisor to watch (default: the node's libvirt_uri "
              "node parameter, else qemu:///system).")
@click.option("--notify-url", help="Where to POST notifications (default: "
              f"https://<master ip>:{NOTIFY_PORT}/1/notifications, maintd).")
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
    from herder.instmon.daemon import InstanceMonitor, Settings

    logging.basicConfig(level=logging.DEBUG if debug else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.DEBUG if debug else logging.WARNING)
    config = load_config(config_path)
    filt = build_filter(config)
    notify = dict(config.get("notify") or {})
    spool = dict(config.get("spool") or {})
    collapse = dict(config.get("collapse") or {})
    cluster = _cluster_defaults(ctx, hostname or config.get("hostname"))
    hostname = hostname or config.get("hostname") or cluster.get("hostname") or socket.getfqdn()
    uri = libvirt_uri or config.get("libvirt_uri") or cluster.get("libvirt_uri") \
        or "qemu:///system"
    url = notify_url or notify.get("url") or cluster.get("notify_url")
    if not url:
        raise HerderError("no notification URL: give --notify-url or [notify] url (no cluster "
                          "config to find maintd in)")
    ca = ca_file or (Path(notify["ca_file"]) if notify.get("ca_file") else None)
    if ca is None and url.startswith("https:") and cluster.get("ca_file"):
        ca = cluster["ca_file"]
    token = notify.get("token")
    tfile = token_file or (Path(notify["token_file"]) if notify.get("token_file") else None)
    if tfile is not None:
        try:
            token = tfile.read_text().strip()
        except OSError as err:
            raise HerderError(f"cannot read the token file {tfile}: {err.strerror}") from None
    token = token or cluster.get("token")
    if ca is not None and not Path(ca).is_file():
        raise HerderError(f"CA file {ca} does not exist")
    try:
        settings = Settings(
            hostname=str(hostname), libvirt_uri=str(uri), notify_url=str(url),
            run_dir=run_dir, spool_dir=spool_dir or Path(spool.get("dir", DEFAULT_SPOOL)),
            token=token, ca_file=Path(ca) if ca else None,
            check_hostname=bool(notify.get("check_hostname", False)), filter=filt,
            collapse_delay=float(collapse.get("delay", 0.1)),
            collapse_window=float(collapse.get("window", 2.0)),
            spool_max_entries=int(spool.get("max_entries", 10000)),
            spool_max_bytes=int(spool.get("max_bytes", 64 * 2**20)),
            backoff_base=float(notify.get("backoff_base", 0.5)),
            backoff_max=float(notify.get("backoff_max", 60.0)))
    except (TypeError, ValueError) as err:
        raise HerderError(f"bad setting: {err}") from None
    run_dir.mkdir(parents=True, exist_ok=True)
    monitor = InstanceMonitor(settings)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with pid_file(run_dir, "instmon"):
        monitor.start()
        click.echo(f"herder instmon: watching {uri} as {hostname}; notifying {url}", err=True)
        try:
            stop.wait()
        finally:
            monitor.stop()


def _cluster_defaults(ctx: click.Context, hostname: str | None) -> dict[str, Any]:
    """What the cluster config (when there is one here) says: this node's libvirt URI, the
    master's maintd, its certificate and the token derived from the HMAC key."""
    from herder.cli.common import store_from
    from herder.core import envelope
    from herder.core.cluster_secrets import CERT_FILE, HMAC_KEY_FILE
    from herder.core.notification import token_for

    try:
        store = store_from(ctx)
        if not store.exists():
            return {}
        cfg = store.load()
    except Exception:
        return {}
    out: dict[str, Any] = {}
    name = hostname or socket.getfqdn()
    node = cfg.find_node(name) if hasattr(cfg, "find_node") else None
    if node is not None:
        out["hostname"] = node.name
        uri = (node.ndparams or {}).get("libvirt_uri")
        if uri:
            out["libvirt_uri"] = uri
    master = cfg.nodes.get(cfg.cluster.master_node)
    ip = cfg.cluster.master_ip or (master.primary_ip if master else None)
    if ip:
        host = f"[{ip}]" if ":" in ip else ip
        out["notify_url"] = f"https://{host}:{NOTIFY_PORT}/1/notifications"
    cert = store.directory / CERT_FILE
    if cert.is_file():
        out["ca_file"] = cert
    with contextlib.suppress(OSError, ValueError):
        out["token"] = token_for(envelope.load_key(store.directory / HMAC_KEY_FILE))
    return out


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
    filt = build_filter(load_config(path))
    for key, verdict in sorted(filt.rules.items()):
        click.echo(f"{key:40} {verdict}")
    click.echo(f"{'(anything else)':40} {filt.default}")
