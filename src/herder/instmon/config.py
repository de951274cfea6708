"""instmon's settings: `Settings` (what the monitor runs with), its TOML file (docs/instmon.md),
the command line and, on a node with the cluster config, what that config says (this node's
libvirt URI, the master's maintd, the certificate and the notification token).

The file is decoded once into `InstmonConfig` (`core.settingsfile`): an unknown key or a wrong
type is refused in one line naming the file and the key. `resolve` merges the command line over
the file over the cluster's defaults into `Settings`.
"""

from __future__ import annotations

import contextlib
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import msgspec

from herder.core import ports, settingsfile
from herder.core.errors import HerderError
from herder.instmon.events import EventFilter, FilterError

WHAT = "instmon config"
DEFAULT_RUN_DIR = Path("/run/herder")
DEFAULT_SPOOL = Path("/var/lib/herder/instmon-spool")


@dataclass
class Settings:
    """What the monitor runs with (`resolve` makes it from the options and the files)."""

    hostname: str
    libvirt_uri: str
    notify_url: str
    run_dir: Path
    spool_dir: Path
    token: str | None = None
    ca_file: Path | None = None
    check_hostname: bool = False
    # the node's certificate (node.pem), shown to the cluster's own maintd (issue 35)
    client_cert: Path | None = None
    filter: EventFilter = field(default_factory=EventFilter.preset)
    collapse_delay: float = 0.1
    collapse_window: float = 2.0
    spool_max_entries: int = 10000
    spool_max_bytes: int = 64 * 2**20
    state_interval: float = 0.5
    backoff_base: float = 0.5
    backoff_max: float = 60.0
    control_socket: bool = True


_Text = Annotated[str, msgspec.Meta(min_length=1)]
_Positive = Annotated[float, msgspec.Meta(gt=0)]
_NonNegative = Annotated[float, msgspec.Meta(ge=0)]
_Count = Annotated[int, msgspec.Meta(ge=1)]


class NotifyTable(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    url: _Text | None = None
    ca_file: _Text | None = None
    check_hostname: bool = Settings.check_hostname
    token: _Text | None = None
    token_file: _Text | None = None
    backoff_base: _Positive = Settings.backoff_base
    backoff_max: _Positive = Settings.backoff_max


class FilterTable(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Checked further by `EventFilter.from_config` (presets, rule keys, verdicts)."""

    preset: str = "masakari"
    default: str = "drop"
    rules: dict[str, str] = {}


class SpoolTable(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    dir: _Text | None = None
    max_entries: _Count = Settings.spool_max_entries
    max_bytes: _Count = Settings.spool_max_bytes


class CollapseTable(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    delay: _NonNegative = Settings.collapse_delay
    window: _NonNegative = Settings.collapse_window


class InstmonConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The file's contents, typed; every key is optional."""

    hostname: _Text | None = None
    libvirt_uri: _Text | None = None
    notify: NotifyTable = NotifyTable()
    filter: FilterTable | None = None  # None: the masakari preset
    spool: SpoolTable = SpoolTable()
    collapse: CollapseTable = CollapseTable()


# read without --config when it exists (the systemd unit runs `herder instmon` without flags)
DEFAULT_PATH = Path("/etc/herder/instmon.toml")


def chosen(path: Path | None) -> Path | None:
    """The config file instmon reads: the one given, else DEFAULT_PATH if it exists."""
    if path is not None:
        return path
    return DEFAULT_PATH if DEFAULT_PATH.is_file() else None


def load(path: Path | None) -> InstmonConfig:
    """The config file, validated (None: no file, every default)."""
    return InstmonConfig() if path is None else settingsfile.load(path, InstmonConfig, WHAT)


def event_filter(config: InstmonConfig) -> EventFilter:
    table = config.filter
    try:
        return EventFilter.from_config(None if table is None else msgspec.structs.asdict(table))
    except FilterError as err:
        raise HerderError(f"event filter: {err}") from None


@dataclass(frozen=True)
class Options:
    """`herder instmon`'s options (None: not given)."""

    config_file: Path | None = None
    cluster_config: str | None = None  # the cluster config's location (None: the default)
    hostname: str | None = None
    libvirt_uri: str | None = None
    notify_url: str | None = None
    ca_file: Path | None = None
    token_file: Path | None = None
    run_dir: Path = DEFAULT_RUN_DIR
    spool_dir: Path | None = None


def resolve(options: Options) -> Settings:
    """The monitor's settings: the command line, else the file, else the cluster's defaults.
    HerderError (one line) when they are unusable."""
    config = load(options.config_file)
    filt = event_filter(config)
    notify, spool, collapse = config.notify, config.spool, config.collapse
    cluster = cluster_defaults(options.cluster_config, options.hostname or config.hostname)
    hostname = options.hostname or config.hostname or cluster.get("hostname") \
        or socket.getfqdn()
    uri = options.libvirt_uri or config.libvirt_uri or cluster.get("libvirt_uri") \
        or "qemu:///system"
    url = options.notify_url or notify.url or cluster.get("notify_url")
    if not url:
        raise HerderError("no notification URL: give --notify-url or [notify] url (no cluster "
                          "config to find maintd in)")
    ca = options.ca_file or (Path(notify.ca_file) if notify.ca_file else None)
    if ca is None and url.startswith("https:") and cluster.get("ca_file"):
        ca = cluster["ca_file"]
    token = notify.token
    token_file = options.token_file or (Path(notify.token_file) if notify.token_file else None)
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as err:
            raise HerderError(f"cannot read the token file {token_file}: "
                              f"{err.strerror}") from None
    token = token or cluster.get("token")
    # the node certificate goes to the cluster's own maintd only, not to another receiver
    client_cert = cluster.get("client_cert") if url == cluster.get("notify_url") else None
    if ca is not None and not Path(ca).is_file():
        raise HerderError(f"CA file {ca} does not exist")
    return Settings(
        hostname=str(hostname), libvirt_uri=str(uri), notify_url=str(url),
        run_dir=options.run_dir,
        spool_dir=options.spool_dir or (Path(spool.dir) if spool.dir else DEFAULT_SPOOL),
        token=token, ca_file=Path(ca) if ca else None, check_hostname=notify.check_hostname,
        client_cert=client_cert,
        filter=filt, collapse_delay=collapse.delay, collapse_window=collapse.window,
        spool_max_entries=spool.max_entries, spool_max_bytes=spool.max_bytes,
        backoff_base=notify.backoff_base, backoff_max=notify.backoff_max)


def cluster_defaults(location: str | None, hostname: str | None) -> dict[str, Any]:
    """What this node knows of its cluster: its config copy (a master candidate), else its
    ssconf files (any node): this node's libvirt URI, the master's maintd (at the master IP),
    the cluster certificate, the node certificate and the token derived from the HMAC key."""
    from herder.core import envelope, node_certs, ssconf
    from herder.core.cluster_secrets import CERT_FILE, HMAC_KEY_FILE
    from herder.core.notification import token_for
    from herder.core.store import FileStore, open_store

    try:
        store = open_store(location)
    except Exception:  # no usable cluster location here: nothing to default from
        return {}
    name = hostname or socket.getfqdn()
    out: dict[str, Any] = {}
    ip: str | None = None
    if store.exists():
        try:
            cfg = store.load()
        except Exception:  # a broken copy: nothing to default from
            return {}
        node = next((n for n in cfg.nodes.values()
                     if n.name == name or n.name.split(".")[0] == name), None)
        if node is not None:
            out["hostname"] = node.name
            uri = cfg.filled_ndparams(node).get("libvirt_uri")
            if uri:
                out["libvirt_uri"] = uri
        master = cfg.nodes.get(cfg.cluster.master_node)
        ip = cfg.cluster.master_ip or (master.primary_ip if master else None)
    elif isinstance(store, FileStore):
        values = ssconf.node_params(name, store.directory)
        if values is not None and values.get("libvirt_uri"):
            out["libvirt_uri"] = values["libvirt_uri"]
        ip = ssconf.master_ip(store.directory)
    if not out and ip is None:
        return {}
    if ip:
        host = f"[{ip}]" if ":" in ip else ip
        out["notify_url"] = f"https://{host}:{ports.MAINTD_NOTIFY}/1/notifications"
    cert = store.directory / CERT_FILE
    if cert.is_file():
        out["ca_file"] = cert
    shown = node_certs.node_certificate_beside(cert)
    if shown.is_file():
        out["client_cert"] = shown
    with contextlib.suppress(OSError, ValueError):
        out["token"] = token_for(envelope.load_key(store.directory / HMAC_KEY_FILE))
    return out
