"""The rules for names, as Ganeti 3.0 has them, checked at every edge that takes a new name.

- Instances, nodes and the cluster are host names (Ganeti's `netutils.Hostname`): lower-cased,
  1-255 of `a-z 0-9 . - _`, no empty label (`..`, a leading `.`); a trailing `.` is dropped.
  herder also refuses a leading `-` (it would read as an option to the commands a node runs).
  A new instance name must resolve unless the name check is off (`name_check`, Ganeti's
  `--no-name-check`): the resolved name must extend the given one by whole labels
  (`web1` -> `web1.example.com`) and becomes the instance's name; the IP check (`ip_check`,
  which needs the name check) then refuses a name whose address already answers on the node
  daemon's port, as Ganeti's TcpPing does.
- Node groups and networks (Ganeti: any non-empty string): herder wants printable characters,
  no `/`, no leading `-` or blank (Ganeti's own example config has a network "a network").
- OS names (Ganeti's EXT_PLUGIN_MASK, `[a-zA-Z0-9_-]+`, as they name a directory), with an
  optional `+variant`.
- Disk and NIC names (Ganeti's ValidateDeviceNames): not purely numeric (they would read as an
  index); herder: printable, no `/`, at most 255 characters.
- Instance snapshots (herder's own): 1-64 of `A-Z a-z 0-9 _ . + -`, starting with a letter or
  digit (they become part of a volume's name on the nodes).
- Exports (a directory in a node's export directory): the instance's host name (Ganeti's
  layout, the newest export), or herder's kept older exports `NAME@YYYYMMDD-HHMMSS` (the time
  of that export, UTC; `@` is in no host name, so no instance's export is mistaken for one).
- MAC prefixes (a network's, the cluster's): three octets `aa:bb:cc`, lower-cased.
- Tags: `herder.core.model.check_tag` (Ganeti's TaggableObject.ValidateTag).

Every error is a `BadName` (a ConfigError, so a ValueError msgspec reports with its path).
"""

from __future__ import annotations

import ipaddress
import re
import socket
import time
from dataclasses import dataclass

from herder.core.errors import ConfigError

_HOSTNAME = re.compile(r"[a-z0-9._-]{1,255}")
_OS_NAME = re.compile(r"[A-Za-z0-9_-]{1,255}")
_OS_VARIANT = re.compile(r"[A-Za-z0-9_+.-]{1,255}")
_DEVICE_NAME = re.compile(r"[\x21-\x2e\x30-\x7e]{1,255}")  # printable ASCII but / and space


_EXPORT_STAMP = re.compile(r"\d{8}-\d{6}")
EXPORT_DATED = "@"  # between an instance's name and the time of a kept older export


class BadName(ConfigError):
    """A name breaking its rule; the message names the rule."""


def ip_address(value: str, what: str) -> str:
    """`value` if it is an IPv4 or IPv6 address; ValueError naming `what` otherwise."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{what} {value!r} is not an IP address") from None
    return value


_MAC_PREFIX = re.compile(r"([0-9a-f]{2}:){2}[0-9a-f]{2}", re.IGNORECASE)


def mac_prefix(value: object, what: str = "MAC address prefix") -> str:
    """Ganeti's NormalizeAndValidateThreeOctetMacPrefix: three octets, lower-cased; BadName."""
    if not isinstance(value, str) or not _MAC_PREFIX.fullmatch(value):
        raise BadName(f"invalid {what} {value!r}: three hexadecimal octets (aa:00:00)")
    return value.lower()


def hostname(name: object, what: str = "host name") -> str:
    """Ganeti's Hostname.GetNormalizedName: the normalised name, or BadName."""
    if not isinstance(name, str):
        raise BadName(f"invalid {what} {name!r}: not a string")
    normal = name.lower()
    if (not _HOSTNAME.fullmatch(normal) or ".." in normal or normal.startswith(".")
            or normal.startswith("-") or normal.rstrip(".") == ""):
        raise BadName(f"invalid {what} {name!r}: a host name is 1-255 letters, digits, '.', "
                      "'-' and '_', with no empty label and no leading '-'")
    return normal.rstrip(".")


def export_name(name: object, what: str = "export name") -> str:
    """An export's directory name, normalised: an instance's host name or, for an older
    export kept beside it, `NAME@YYYYMMDD-HHMMSS`; BadName otherwise."""
    if not isinstance(name, str):
        raise BadName(f"invalid {what} {name!r}: not a string")
    instance, dated, stamp = name.partition(EXPORT_DATED)
    if dated and not _EXPORT_STAMP.fullmatch(stamp):
        raise BadName(f"invalid {what} {name!r}: an instance's name, or it with "
                      "@YYYYMMDD-HHMMSS (an older export kept)")
    return hostname(instance, what) + dated + stamp


def dated_export_name(instance: str, timestamp: float) -> str:
    """The name an older export of `instance` made at `timestamp` is kept under."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(timestamp))
    return f"{instance}{EXPORT_DATED}{stamp}"


def object_name(name: object, what: str) -> str:
    """A node group's or network's name: `name`, or BadName."""
    if (not isinstance(name, str) or not 0 < len(name) <= 255 or not name.isprintable()
            or "/" in name or name in (".", "..") or name != name.strip()
            or name.startswith("-")):
        raise BadName(f"invalid {what} {name!r}: 1-255 printable characters without '/', "
                      "not starting with '-' or a blank")
    return name


def os_name(name: object, what: str = "OS name") -> str:
    """`name` or `name+variant`, or BadName."""
    if not isinstance(name, str):
        raise BadName(f"invalid {what} {name!r}: not a string")
    base, sep, variant = name.partition("+")
    if not _OS_NAME.fullmatch(base) or (sep and (not _OS_VARIANT.fullmatch(variant)
                                                 or variant.startswith("."))):
        raise BadName(f"invalid {what} {name!r}: an OS is named with letters, digits, '_' and "
                      "'-', optionally followed by +VARIANT")
    return name


def device_name(name: object, kind: str) -> str | None:
    """A disk's or NIC's name (None and "none" mean no name): the name, or BadName."""
    if name is None or (isinstance(name, str) and name.lower() == "none"):
        return None
    if not isinstance(name, str) or not _DEVICE_NAME.fullmatch(name):
        raise BadName(f"invalid {kind} name {name!r}: 1-255 printable characters, no '/' or "
                      "space")
    if name.lstrip("+-").isdigit():
        raise BadName(f"Invalid name {name!r}. Purely numeric {kind} names are not allowed")
    return name


def plain_name(name: object, what: str) -> str:
    """A name that becomes one file name (an iallocator, a white-listed command): BadName
    unless it is one plain component of safe characters."""
    if (not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_+:@.-]{1,255}", name)
            or name in (".", "..")):
        raise BadName(f"invalid {what} {name!r}: a plain file name, without path separators "
                      "(letters, digits and _ + : @ . -)")
    return name


_SNAPSHOT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}")


def snapshot_name(name: object, what: str = "snapshot name") -> str:
    """An instance snapshot's name: `name`, or BadName."""
    if not isinstance(name, str) or not _SNAPSHOT_NAME.fullmatch(name):
        raise BadName(f"invalid {what} {name!r}: 1-64 letters, digits, '_', '.', '+' and '-', "
                      "starting with a letter or digit")
    return name


@dataclass(frozen=True)
class Resolved:
    name: str  # the normalised fully qualified name
    ip: str


def matches_component(given: str, resolved: str) -> bool:
    """Ganeti's MatchNameComponent: `resolved` is `given`, or `given` plus more labels."""
    return resolved == given or resolved.startswith(given + ".")


_DIGITS_OR_NOT = re.compile(r"\d+|\D+")


def nice_sort_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """The order Ganeti lists names in (its niceSort): runs of digits compare as numbers, so
    node2 comes before node10; a number sorts before text at the same place."""
    return tuple((0, int(run)) if run.isdigit() else (1, run)
                 for run in _DIGITS_OR_NOT.findall(name))


def resolve(name: str, what: str = "instance") -> Resolved:
    """Ganeti's name check (CheckHostnameSane): `name` must resolve, and the resolved name
    must extend it by whole labels; BadName otherwise."""
    given = hostname(name, f"{what} name")
    try:
        infos = socket.getaddrinfo(given, None, proto=socket.IPPROTO_TCP)
        fqdn = hostname(socket.getfqdn(given), f"resolved {what} name")
    except (OSError, UnicodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise BadName(f"{what} name {given!r} cannot be resolved ({reason}); check the name, "
                      "or turn the name check off (--no-name-check)") from None
    if not infos:
        raise BadName(f"{what} name {given!r} resolves to no address")
    if not matches_component(given, fqdn):
        raise BadName(f"Resolved hostname '{fqdn}' does not look the same as given hostname "
                      f"'{given}'")
    return Resolved(fqdn, str(infos[0][4][0]))


def address_answers(ip: str, port: int, timeout: float = 5.0, *,
                    live_port_needed: bool = False) -> bool:
    """Ganeti's TcpPing: does anything at `ip` answer on `port` (a connection, or without
    `live_port_needed` a refusal too, means the address is in use)?"""
    try:
        with socket.create_connection((ip, port), timeout=timeout):
            return True
    except ConnectionRefusedError:
        return not live_port_needed
    except OSError:
        return False
