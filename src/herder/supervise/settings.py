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
a bad value is a `HerderError` with one line naming the file and the key.
"""

from __future__ import annotations

import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import msgspec

from herder.core.errors import HerderError

DEFAULT_PATH = Path("/etc/herder/node.toml")
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


_AT = re.compile(r" - at `\$\.?([^`]*)`$")
_UNKNOWN = re.compile(r"Object contains unknown field `([^`]*)`")


def _one_line(path: Path, err: msgspec.ValidationError, table: str = "") -> str:
    text = str(err)
    match = _AT.search(text)
    where = ".".join(p for p in (table, match.group(1) if match else "") if p)
    text = _AT.sub("", text)
    unknown = _UNKNOWN.fullmatch(text)
    if unknown:
        table = f" in [{where}]" if where else ""
        return f"node settings {path}: unknown key {unknown.group(1)!r}{table}"
    text = text.replace(" | null`", "`").replace("`object`", "`table`")
    return f"node settings {path}: {where or 'the file'}: {text[0].lower()}{text[1:]}"


def default_command(name: str) -> list[str]:
    """The command of a known daemon: herder's through this interpreter (the installed herder),
    libvirtd in the foreground in system mode."""
    if name == "libvirtd":
        return [LIBVIRTD]
    return [sys.executable, "-m", "herder.cli.main", name]


def parse(text: str, path: Path) -> NodeSettings:
    """Validate the file's text; HerderError (one line) when it is unusable."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise HerderError(f"node settings {path}: not valid TOML: {err}") from None
    daemons = data.pop("daemons", {})
    try:
        settings = msgspec.convert(data, NodeSettings)
    except msgspec.ValidationError as err:
        raise HerderError(_one_line(path, err)) from None
    if not isinstance(daemons, dict):
        raise HerderError(f"node settings {path}: daemons: expected a table of daemons")
    converted = {}
    for name, table in daemons.items():
        try:
            converted[name] = msgspec.convert(table, DaemonSettings)
        except msgspec.ValidationError as err:
            raise HerderError(_one_line(path, err, f"daemons.{name}")) from None
    settings = msgspec.structs.replace(settings, daemons=converted)
    sup = settings.supervise
    if sup.restart_delay > sup.restart_delay_max:
        raise HerderError(f"node settings {path}: supervise: restart_delay "
                          f"({sup.restart_delay:g}) is above restart_delay_max "
                          f"({sup.restart_delay_max:g})")
    for name, daemon in settings.daemons.items():
        if not NAME.fullmatch(name):
            raise HerderError(f"node settings {path}: daemons: {name!r} is not a daemon name "
                              "(lower-case letters, digits and '-', at most 32)")
        if name not in KNOWN_DAEMONS and daemon.command is None:
            raise HerderError(f"node settings {path}: daemons.{name}: not one of herder's "
                              f"daemons ({', '.join(KNOWN_DAEMONS)}), so it needs a command")
    return settings


def load(path: Path = DEFAULT_PATH) -> NodeSettings:
    """The host's settings; a missing file means the defaults (nothing enabled)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return NodeSettings()
    except OSError as err:
        raise HerderError(f"cannot read node settings {path}: {err.strerror}") from None
    except UnicodeDecodeError:
        raise HerderError(f"node settings {path}: not UTF-8 text") from None
    return parse(text, path)


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
