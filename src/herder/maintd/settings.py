"""maintd's settings (`herder maintd`'s options) and the constants its CLI shows, apart from
`startup` so that the CLI's status commands do not import the daemon."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from herder.core import ports
from herder.core.errors import HerderError

EXIT_NOTMASTER = 11
GANETI_DATA = "/var/lib/ganeti"
GANETI_STATE = "/var/lib/herder/maintd-state.json"


class NotMaster(HerderError):
    """This node is not the cluster's master."""


@dataclass(frozen=True)
class MaintdSettings:
    """What `herder maintd` was asked to run with (its options)."""

    config_path: str | Path | None = None  # herder: the cluster config (None: the default)
    masterd_url: str | None = None  # herder: masterd's RAPI
    bind: str | None = None  # None: the cluster's master IP, else the master's primary IP
    port: int = ports.MAINTD
    node_name: str | None = None  # None: this host's FQDN
    state_file: Path | None = None
    mond_port: int = ports.MOND
    round_delay: float | None = None  # None: the cluster's maintenance roundDelay
    poll_interval: float = 10.0
    harep: bool = False
    run_dir: Path = Path("/run/herder")
    notify_port: int = ports.MAINTD_NOTIFY  # 0: no HTTPS listener
    notify_insecure: bool = False
    failure_table: Path | None = None
    failure_window: float = 600.0
    ganeti_rapi: str | None = None  # maintain a Ganeti cluster through this RAPI
    rapi_user: str = "admin"
    rapi_password_file: Path | None = None
    rapi_ca: Path | None = None
    hmac_key: Path | None = None
    cert_file: Path | None = None
    watcher: bool | None = None  # None: on for herder, off for Ganeti
    # herder: dead nodes detected, fenced and their instances recovered (maintd.nodefail)
    node_recovery: bool = True
    node_failure_time: float = 12.0  # seconds without a lease renewal before a node is suspect
    # who may cancel over HTTPS (None: herder's rapi_users beside the config, Ganeti's
    # rapi/users on a Ganeti cluster)
    rapi_users: Path | None = None
    local_dir: Path | None = None  # etcd backend: the secrets' directory (default /var/lib/herder)
