"""What `cluster verify` asks a node about its libvirtd (issue 34): where its TLS port listens,
the modes of its unix sockets, the CAs and certificate its TLS uses, a DN list if someone set
one, and whether QEMU's user can traverse the storage directories to its disks. The node only
reports (`LibvirtFacts`); the master judges (`herder.core.nodeverify`)."""

from __future__ import annotations

import contextlib
import grp
import ipaddress
import os
import pwd
import re
import stat
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from herder.core import libvirtd_conf, node_certs
from herder.core.rpcdefs.node_calls import LibvirtFacts
from herder.noded import libvirt_systemd, libvirt_tls

PROC_NET = Path("/proc/net")
TCP_LISTEN = "0A"  # /proc/net/tcp's st of a listening socket
RUN_DIR = Path("/run/libvirt")
SOCKETS = (RUN_DIR / "libvirt-sock", RUN_DIR / "libvirt-sock-ro")
QEMU_CONF = Path("/etc/libvirt/qemu.conf")
# the user Debian's libvirt (and most distributions') runs QEMU as when qemu.conf says none
DEFAULT_QEMU_USER = "libvirt-qemu"


def _address(hex_address: str) -> str:
    """An address of /proc/net/tcp{,6}: 32-bit words in host (little-endian) byte order."""
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw[::-1]))
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    return f"[{ipaddress.IPv6Address(words)}]"


def listening_in(text: str, port: int) -> list[str]:
    """"ADDRESS:PORT" of each socket listening on `port` in a /proc/net/tcp{,6} table."""
    found = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4 or fields[3] != TCP_LISTEN:
            continue
        address, _, port_hex = fields[1].partition(":")
        with contextlib.suppress(ValueError):
            if int(port_hex, 16) == port:
                found.append(f"{_address(address)}:{port}")
    return found


def listening(port: int, proc_net: Path = PROC_NET) -> list[str]:
    """Who listens on `port` in this node's network namespace (whichever process: systemd
    holds a socket-activated libvirtd's sockets)."""
    found: list[str] = []
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            found += listening_in((proc_net / table).read_text(), port)
    return sorted(set(found))


def socket_modes(paths: Iterable[Path]) -> dict[str, int | None]:
    """Path -> permission bits of each unix socket (None: there is none)."""
    modes: dict[str, int | None] = {}
    for path in paths:
        try:
            modes[str(path)] = stat.S_IMODE(os.stat(path).st_mode)
        except OSError:
            modes[str(path)] = None
    return modes


_SETTING = r'^\s*{}\s*=\s*(\[[^\]]*\]|"[^"]*")'


def setting(text: str, name: str) -> str | list[str] | None:
    """A string or list setting of a libvirt configuration file (the last one wins, as
    libvirt reads it); None when unset."""
    found = re.findall(_SETTING.format(re.escape(name)), text, re.MULTILINE)
    if not found:
        return None
    value = found[-1]
    if value.startswith("["):
        return re.findall(r'"([^"]*)"', value)
    return str(value[1:-1])


def qemu_user(conf_text: str, user_exists: Callable[[str], bool]) -> str:
    """The user QEMU runs as: qemu.conf's `user`, else libvirt's built-in default (Debian's
    `libvirt-qemu` where that user exists, root otherwise). A `+UID` counts as that UID."""
    configured = setting(conf_text, "user")
    if isinstance(configured, str) and configured:
        return configured
    return DEFAULT_QEMU_USER if user_exists(DEFAULT_QEMU_USER) else "root"


def _identity(user: str) -> tuple[int, set[int]] | None:
    """(uid, gids) of a user name or `+UID`; None when unknown."""
    try:
        entry = pwd.getpwuid(int(user[1:])) if user.startswith("+") else pwd.getpwnam(user)
    except (KeyError, ValueError):
        return None
    groups = set(os.getgrouplist(entry.pw_name, entry.pw_gid))
    return entry.pw_uid, groups


def may_traverse(st: os.stat_result, uid: int, gids: set[int]) -> bool:
    """Whether `uid` (in `gids`) may search a directory of this stat (the owner's, the
    group's or the others' x bit: only the first class that matches counts)."""
    if uid == 0:
        return True
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid in gids:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def _below(base: Path) -> list[Path]:
    """The instances' directories right below a storage directory."""
    with contextlib.suppress(OSError):
        return sorted(p for p in base.iterdir() if p.is_dir() and not p.is_symlink())
    return []


def untraversable(storage_paths: Sequence[str], user: str) -> dict[str, str]:
    """Storage path -> why QEMU (running as `user`) cannot reach disks in it: a directory on
    the way (from /), the path itself or an instance's directory below it it may not search."""
    identity = _identity(user)
    if identity is None or identity[0] == 0:
        return {}
    uid, gids = identity
    found: dict[str, str] = {}
    for path in storage_paths:
        base = Path(os.path.normpath(path))
        for directory in [*reversed(base.parents), base, *_below(base)]:
            try:
                st = os.stat(directory)
            except OSError:
                continue  # a missing path is the storage path check's (ENODE...UNUSABLE)
            if not may_traverse(st, uid, gids):
                found[path] = (f"Path '{directory}' cannot be traversed by QEMU's user {user} "
                               f"(mode {stat.S_IMODE(st.st_mode):04o}, owner "
                               f"{_name(st.st_uid, st.st_gid)})")
                break
    return found


def grant_traversal(storage_paths: Sequence[str], user: str) -> list[Path]:
    """The x bit QEMU's user needs (of its class: owner, group or others) on each storage
    directory and each instance's directory below it that lacks it; the directories changed.
    Directories above a storage path are the operator's: `untraversable` reports them."""
    identity = _identity(user)
    if identity is None or identity[0] == 0:
        return []
    uid, gids = identity
    changed = []
    for path in storage_paths:
        base = Path(os.path.normpath(path))
        for directory in [base, *_below(base)]:
            try:
                st = os.stat(directory)
            except OSError:
                continue
            if may_traverse(st, uid, gids):
                continue
            bit = stat.S_IXUSR if st.st_uid == uid else \
                stat.S_IXGRP if st.st_gid in gids else stat.S_IXOTH
            os.chmod(directory, stat.S_IMODE(st.st_mode) | bit)
            changed.append(directory)
    return changed


def qemu_user_here(local: Callable[[Path], Path] = lambda p: p) -> str:
    """The user this node's QEMU runs as (its qemu.conf)."""
    text = ""
    with contextlib.suppress(OSError):
        text = local(QEMU_CONF).read_text()
    return qemu_user(text, lambda name: _identity(name) is not None)


def _name(uid: int, gid: int) -> str:
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    try:
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        group = str(gid)
    return f"{user}:{group}"


def facts(data_dir: Path, storage_paths: Sequence[str], *,
          local: Callable[[Path], Path] = lambda p: p,
          proc_net: Path = PROC_NET) -> LibvirtFacts:
    """The node's libvirtd as `cluster verify` judges it (`local`: where a path of the node
    is, under the simulator's file root)."""
    conf = local(libvirt_tls.LIBVIRTD_CONF)
    conf_text = ""
    with contextlib.suppress(OSError):
        conf_text = conf.read_text()
    pki = libvirtd_conf.LibvirtPki(data_dir / "libvirt-pki")
    found = LibvirtFacts(systemd=libvirt_systemd.applies(local(Path("/"))),
                         configured=libvirt_tls.configured(conf),
                         tls_listen=listening(libvirtd_conf.LIBVIRT_TLS_PORT, proc_net),
                         sockets=socket_modes(local(p) for p in SOCKETS))
    dn_list = setting(conf_text, "tls_allowed_dn_list")
    if dn_list is not None:
        found.dn_list = dn_list if isinstance(dn_list, list) else [dn_list]
    try:
        found.ca_digests = node_certs.bundle_digests(pki.ca_cert.read_bytes())
    except FileNotFoundError:
        pass
    except (OSError, node_certs.CertificateError) as err:
        found.certificate_error = f"{pki.ca_cert}: {err}"
    try:
        found.certificate = node_certs.certificate_pem(pki.server_cert.read_bytes()).decode()
    except FileNotFoundError:
        pass
    except (OSError, node_certs.CertificateError) as err:
        found.certificate_error = f"{pki.server_cert}: {err}"
    found.qemu_user = qemu_user_here(local)
    found.untraversable = untraversable(storage_paths, found.qemu_user)
    return found
