"""`/etc/herder/node.toml`: what `herder supervise` runs on this host.

TOML, every key optional::

    [supervise]
    socket = "/run/herder/supervise.sock"   # the control socket (daemon-util talks to it)
    log_dir = "/var/log/herder"             # each daemon's output: <log_dir>/<daemon>.log
    restart_delay = 1.0                     # first restart of a crashed daemon after 1 s,
    restart_delay_max = 60.0                # doubled on every further crash, up to this
    stop_timeout = 15.0                     # SIGTERM, then SIGKILL after this many seconds

    [daemons.noded]                         # herder's daemons: noded confd mond instmon
    enabled = true                          # masterd maintd, and libvirtd
    args = ["--debug"]                      # appended to the daemon's command
    environment = { LANG = "C.UTF-8" }

    [daemons.site-agent]                    # any other program needs its command
    enabled = true
    command = ["/usr/local/sbin/site-agent", "--foreground"]
    output = "/var/log/site-agent.log"

`enabled` daemons start with the supervisor; every known daemon (and every one in the file)
can be started later through the control socket (`herder daemon-util start-master` starts
masterd and maintd that way). The file is validated once, here: an unknown key, a wrong type or
a bad value is a `HerderError` with one line naming the file and the key (`core.settingsfile`).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import msgspec

from herder.core import settingsfile

DEFAULT_PATH = Path("/etc/herder/node.toml")
WHAT = "node settings"
DEFAULT_SOCKET = Path("/run/herder/supervise.sock")
LIBVIRTD = "/usr/sbin/libvirtd"
# herder's own daemons, started as `herder <name>` with the supervisor's own interpreter.
HERDER_DAEMONS = ("noded", "confd", "mond", "instmon", "masterd", "maintd")
# Start order (stop order is the reverse): libvirtd before the daemons that connect to it,
# the master's daemons last.
KNOWN_DAEMONS = ("libvirtd", "noded", "confd", "mond", "instmon", "masterd", "maintd")
MASTER_DAEMONS = ("masterd", "maintd")
NAME = re.compile(r"[a-z][a-z0-9-]{0,31}")

_Positive = Annotated[float, msgspec.Meta(gt=0)]
_Text = Annotated[str, msgspec.Meta(min_length=1)]
_AbsolutePath = Annotated[str, msgspec.Meta(pattern="^/")]


class SuperviseSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    socket: _AbsolutePath = str(DEFAULT_SOCKET)
    log_dir: _AbsolutePath = "/var/log/herder"
    restart_delay: _Positive = 1.0
    restart_delay_max: _Positive = 60.0
    stop_timeout: _Positive = 15.0


class DaemonSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    enabled: bool = False
    command: Annotated[list[_Text], msgspec.Meta(min_length=1)] | None = None
    args: list[str] = []
    environment: dict[str, str] = {}
    output: _AbsolutePath | None = None


class NodeSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    supervise: SuperviseSettings = SuperviseSettings()
    daemons: dict[str, DaemonSettings] = {}


@dataclass(frozen=True)
class DaemonSpec:
    """One daemon as the supervisor runs it."""

    name: str
    argv: tuple[str, ...]
    environment: tuple[tuple[str, str], ...]
    output: Path
    enabled: bool


def default_command(name: str) -> list[str]:
    """The command of a known daemon: herder's through this interpreter (the installed herder),
    libvirtd in the foreground in system mode."""
    if name == "libvirtd":
        return [LIBVIRTD]
    return [sys.executable, "-m", "herder.cli.main", name]


class _File(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The file as read: the daemons' tables are checked one by one (so errors name them)."""

    supervise: SuperviseSettings = SuperviseSettings()
    daemons: dict[str, Any] = {}


def _daemons(path: Path, tables: dict[str, Any]) -> dict[str, DaemonSettings]:
    """Each [daemons.NAME] table validated, under its own name in an error."""
    fields = [(f"daemon{i}", DaemonSettings) for i in range(len(tables))]
    names = {f"daemon{i}": name for i, name in enumerate(tables)}
    each = msgspec.defstruct("Daemons", fields, forbid_unknown_fields=True, rename=names)
    wrapper = msgspec.defstruct("NodeDaemons", [("daemons", each)], forbid_unknown_fields=True)
    try:
        decoded = msgspec.structs.asdict(msgspec.convert({"daemons": tables}, wrapper))
    except msgspec.ValidationError as err:
        raise settingsfile.one_line(path, WHAT, wrapper, err) from None
    return {name: getattr(decoded["daemons"], field) for field, name in names.items()}


def _checked(path: Path, read: _File) -> NodeSettings:
    for name in read.daemons:
        if not NAME.fullmatch(name):
            raise settingsfile.problem(path, WHAT, "daemons", f"{name!r} is not a daemon name "
                                       "(lower-case letters, digits and '-', at most 32)")
    settings = NodeSettings(supervise=read.supervise, daemons=_daemons(path, read.daemons))
    sup = settings.supervise
    if sup.restart_delay > sup.restart_delay_max:
        raise settingsfile.problem(path, WHAT, "supervise", f"restart_delay "
                                   f"({sup.restart_delay:g}) is above restart_delay_max "
                                   f"({sup.restart_delay_max:g})")
    for name, daemon in settings.daemons.items():
        if name not in KNOWN_DAEMONS and daemon.command is None:
            raise settingsfile.problem(path, WHAT, f"daemons.{name}", "not one of herder's "
                                       f"daemons ({', '.join(KNOWN_DAEMONS)}), so it needs a "
                                       "command")
    return settings


def parse(text: str, path: Path) -> NodeSettings:
    """Validate the file's text; HerderError (one line) when it is unusable."""
    return _checked(path, settingsfile.decode(text, path, _File, WHAT))


def load(path: Path = DEFAULT_PATH) -> NodeSettings:
    """The host's settings; a missing file means the defaults (nothing enabled)."""
    if not path.exists():
        return NodeSettings()
    return _checked(path, settingsfile.load(path, _File, WHAT))


def control_socket(path: Path = DEFAULT_PATH) -> Path:
    """Where the supervisor of this host listens: the settings' `[supervise] socket`."""
    return Path(load(path).supervise.socket)


def daemon_specs(settings: NodeSettings) -> list[DaemonSpec]:
    """Every daemon the supervisor knows, in start order: herder's (configured or not), then
    the file's others in the file's order."""
    names = [*KNOWN_DAEMONS, *(n for n in settings.daemons if n not in KNOWN_DAEMONS)]
    log_dir = Path(settings.supervise.log_dir)
    specs = []
    for name in names:
        conf = settings.daemons.get(name, DaemonSettings())
        command = list(conf.command) if conf.command is not None else default_command(name)
        specs.append(DaemonSpec(
            name=name, argv=(*command, *conf.args),
            environment=tuple(sorted(conf.environment.items())),
            output=Path(conf.output) if conf.output else log_dir / f"{name}.log",
            enabled=conf.enabled))
    return specs
