"""mond's local config file (`/etc/herder/mond.toml`, read when it exists; `--config FILE` names
another): what Ganeti's config has no field for, on a node without herder's cluster config.

TOML, every key optional::

    node = "node1.example.com"        # this node's name (default: FQDN)
    bind = "0.0.0.0"
    port = 1815
    diagnose_command = "check-node"   # file name in diagnose_dir (the cluster config wins)
    diagnose_dir = "/etc/ganeti/node-diagnose-commands"
    diagnose_interval = 60            # seconds, unless the cluster config or confd says
    hmac_key = "/var/lib/ganeti/hmac.key"   # signs diagnose reports, verifies POST /1/repair
    confd = ["192.0.2.1", "192.0.2.2:1814"]
    confd_key = "/var/lib/ganeti/hmac.key"
    confd_cache_seconds = 15          # how long a confd answer is reused (Ganeti's mond: 15)
    libvirt_uri = "qemu:///system"
    run_dir = "/run/herder"

    [repair]                          # POST /1/repair (herder extension)
    enabled = false
    commands_dir = "/etc/ganeti/node-repair-commands"
    timeout = 300                     # seconds
    max_skew = 300                    # seconds

The file is validated once, here, into `LocalConfig` (`core.settingsfile`); an unknown key, a
wrong type or a bad value is a `HerderError` with a one-line message naming the file and the key.
Command-line flags override the file (`resolve`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import msgspec

from herder.core import settingsfile
from herder.core.confd import parse_peer
from herder.mond.collector import MondSettings, RepairSettings

_Positive = Annotated[float, msgspec.Meta(gt=0)]
_Port = Annotated[int, msgspec.Meta(ge=0, le=65535)]
_Text = Annotated[str, msgspec.Meta(min_length=1)]


class RepairConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    enabled: bool = False
    commands_dir: _Text = str(RepairSettings.commands_dir)
    timeout: _Positive = RepairSettings.timeout
    max_skew: _Positive = RepairSettings.max_skew


class LocalConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The file's contents, typed. None: the key is absent (TOML has no null)."""

    node: _Text | None = None
    bind: _Text | None = None
    port: _Port | None = None
    diagnose_command: str | None = None  # "" is the built-in "all is well"
    diagnose_dir: _Text | None = None
    diagnose_interval: _Positive | None = None
    hmac_key: _Text | None = None
    confd: list[str] | None = None
    confd_key: _Text | None = None
    confd_cache_seconds: _Positive | None = None
    libvirt_uri: _Text | None = None
    run_dir: _Text | None = None
    repair: RepairConfig = RepairConfig()


WHAT = "mond config"


def parse(text: str, path: Path) -> LocalConfig:
    """Validate a config file's text; HerderError (one line) when it is unusable."""
    return _checked(settingsfile.decode(text, path, LocalConfig, WHAT), path)


# read without --config when it exists: the file the operator's guide and the systemd unit
# (`herder mond`, no flags) expect a node's settings in
DEFAULT_PATH = Path("/etc/herder/mond.toml")


def chosen(path: Path | None) -> Path | None:
    """The local config file mond reads: the one given, else DEFAULT_PATH if it exists."""
    if path is not None:
        return path
    return DEFAULT_PATH if DEFAULT_PATH.is_file() else None


def load(path: str | Path) -> LocalConfig:
    path = Path(path)
    return _checked(settingsfile.load(path, LocalConfig, WHAT), path)


def _checked(config: LocalConfig, path: Path) -> LocalConfig:
    """What the types do not say: the diagnose command is a file name, confd peers parse."""
    if config.diagnose_command and ("/" in config.diagnose_command
                                    or config.diagnose_command in (".", "..")):
        raise settingsfile.problem(path, WHAT, "diagnose_command",
                                   f"{config.diagnose_command!r} must be a file name, not a path")
    for peer in config.confd or ():
        try:
            host, port = parse_peer(peer)
        except ValueError:
            host, port = "", 0
        if not host or not 0 < port < 65536:
            raise settingsfile.problem(path, WHAT, "confd", f"{peer!r} is not HOST[:PORT]")
    return config


def _path(value: str | None) -> Path | None:
    return Path(value) if value is not None else None


def apply(config: LocalConfig, settings: MondSettings) -> MondSettings:
    """`settings` with the file's values where the file has them (the caller then applies
    the command-line flags that were given explicitly)."""
    changes: dict[str, Any] = {}
    for key, attr in (("diagnose_dir", "diagnose_dir"), ("run_dir", "run_dir"),
                      ("hmac_key", "hmac_key_file"), ("confd_key", "confd_key_file")):
        value = _path(getattr(config, key))
        if value is not None:
            changes[attr] = value
    if config.libvirt_uri is not None:
        changes["libvirt_uri"] = config.libvirt_uri
    if config.confd is not None:
        changes["confd_peers"] = list(config.confd)
    if config.diagnose_command is not None:
        changes["diagnose_command"] = config.diagnose_command
    if config.confd_cache_seconds is not None:
        changes["confd_cache_seconds"] = config.confd_cache_seconds
    if config.diagnose_interval is not None:
        changes["default_intervals"] = {**settings.default_intervals,
                                        "diagnose": config.diagnose_interval}
    rep = config.repair
    changes["repair"] = RepairSettings(enabled=rep.enabled, commands_dir=Path(rep.commands_dir),
                                       timeout=rep.timeout, max_skew=rep.max_skew)
    return replace(settings, **changes)


# Local-config key -> MondSettings attribute, for the keys a command-line flag can also give.
_SETTING_OF = {"diagnose_dir": "diagnose_dir", "run_dir": "run_dir", "libvirt_uri": "libvirt_uri",
               "confd": "confd_peers", "confd_key": "confd_key_file",
               "hmac_key": "hmac_key_file"}
DEFAULT_BIND = "0.0.0.0"


@dataclass(frozen=True)
class Resolved:
    """What mond runs with: the defaults, then the file, then explicit command-line flags."""

    node: str | None  # None: this host's FQDN
    bind: str
    port: int
    settings: MondSettings


def resolve(config: LocalConfig | None, settings: MondSettings, flags: Mapping[str, Any], *,
            default_port: int, default_bind: str = DEFAULT_BIND) -> Resolved:
    """Merge: `settings` (defaults and flag-only settings) < the file < `flags`, the flags
    given on the command line, by local-config key (node, bind, port, diagnose_dir, run_dir,
    libvirt_uri, confd, confd_key, hmac_key)."""
    unknown = set(flags) - {"node", "bind", "port", *_SETTING_OF}
    if unknown:
        raise ValueError(f"not local-config keys: {', '.join(sorted(unknown))}")
    config = config or LocalConfig()
    merged = apply(config, settings)
    # values of several MondSettings types, by field name
    changes: dict[str, Any] = {_SETTING_OF[k]: (list(v) if k == "confd" else v)
                               for k, v in flags.items() if k in _SETTING_OF}
    merged = replace(merged, **changes)
    return Resolved(
        node=flags.get("node", config.node),
        bind=flags.get("bind", config.bind if config.bind is not None else default_bind),
        port=flags.get("port", config.port if config.port is not None else default_port),
        settings=merged,
    )
