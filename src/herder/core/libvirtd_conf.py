"""libvirtd's configuration on a node: TLS only, certificates of libvirt's own CA (pure).

libvirt is never open on the network: libvirtd listens on its TLS port only (`listen_tcp = 0`,
no SASL-less TCP socket) and requires a client certificate of the CA in its `cacert.pem`
(`tls_no_verify_certificate = 0`): libvirt's own CA, whose key only the master holds and which
signs one certificate per current node (`noded.libvirt_tls`, `masterd.libvirt_trust`), so every
certificate it accepts is a current node's and no DN list is needed (libvirtd would only read
one at its start). Local clients (noded) use the unix socket. Node-to-node migration is
peer-to-peer and tunnelled: the source libvirtd connects to the target's TLS port with its own
libvirt certificate (the `pkipath` of the destination URI) and QEMU's migration stream travels
inside that connection, so no QEMU migration port is opened either.

File layout of a node's libvirt PKI directory (`LibvirtPki`), as libvirt's `pkipath` expects:
`cacert.pem` (the CAs to trust), `servercert.pem`/`serverkey.pem` and `clientcert.pem`/
`clientkey.pem` (the node's own certificate and key, used both ways).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

LIBVIRT_TLS_PORT = 16514
PKI_DIR = Path("/var/lib/herder/libvirt-pki")
HEADER = "# written by herder; changes are overwritten"
SSCONF_CAS = "herder_libvirt_cas"  # ssconf: the libvirt CAs every node trusts (PEM)
# where libvirtd's `server-update-tls` (a reload without a restart) reads its files, whatever
# libvirtd.conf says
DEFAULT_CA_CERT = Path("/etc/pki/CA/cacert.pem")
DEFAULT_SERVER_CERT = Path("/etc/pki/libvirt/servercert.pem")
DEFAULT_SERVER_KEY = Path("/etc/pki/libvirt/private/serverkey.pem")
MIGRATION_KEEPALIVE_INTERVAL = 5  # qemu.conf: seconds between keepalives to a migration peer
MIGRATION_KEEPALIVE_COUNT = 3  # ... unanswered ones before the connection is closed


@dataclass(frozen=True)
class LibvirtPki:
    """A directory in the layout of libvirt's `pkipath`."""

    directory: Path = PKI_DIR

    @property
    def ca_cert(self) -> Path:
        return self.directory / "cacert.pem"

    @property
    def server_cert(self) -> Path:
        return self.directory / "servercert.pem"

    @property
    def server_key(self) -> Path:
        return self.directory / "serverkey.pem"

    @property
    def client_cert(self) -> Path:
        return self.directory / "clientcert.pem"

    @property
    def client_key(self) -> Path:
        return self.directory / "clientkey.pem"


def _quote(value: str) -> str:
    """libvirt's configuration syntax: a double-quoted string."""
    if '"' in value or "\n" in value:
        raise ValueError(f"cannot put {value!r} in a libvirt configuration file")
    return f'"{value}"'


def _render(settings: Mapping[str, str | int | list[str]]) -> str:
    lines = [HEADER]
    for key, value in settings.items():
        if isinstance(value, bool):
            raise TypeError(f"{key}: libvirt wants 0 or 1, not a bool")
        if isinstance(value, int):
            lines.append(f"{key} = {value}")
        elif isinstance(value, list):
            lines.append(f"{key} = [{', '.join(_quote(item) for item in value)}]")
        else:
            lines.append(f"{key} = {_quote(value)}")
    return "\n".join(lines) + "\n"


def default_server_pki(pki: LibvirtPki) -> dict[Path, Path]:
    """libvirt's default server paths -> the PKI directory's files (`server-update-tls`)."""
    return {DEFAULT_CA_CERT: pki.ca_cert, DEFAULT_SERVER_CERT: pki.server_cert,
            DEFAULT_SERVER_KEY: pki.server_key}


def libvirtd_conf(*, listen_address: str, pki: LibvirtPki, tls_port: int = LIBVIRT_TLS_PORT,
                  unix_sock_dir: Path | None = None, host_uuid: str | None = None,
                  log_file: Path | None = None) -> str:
    """libvirtd.conf of a node (libvirtd must run with `--listen` to open the TLS port)."""
    settings: dict[str, str | int | list[str]] = {
        "listen_tls": 1,
        "listen_tcp": 0,
        "listen_addr": listen_address,
        "tls_port": str(tls_port),
        "auth_tls": "none",  # the client certificate is the authentication
        "tls_no_verify_certificate": 0,
        "tls_no_sanity_certificate": 0,
        "ca_file": str(pki.ca_cert),
        "cert_file": str(pki.server_cert),
        "key_file": str(pki.server_key),
        # root on the unix socket only (noded); no read-only socket for other local users
        "unix_sock_ro_perms": "0700",
        "unix_sock_rw_perms": "0700",
        "auth_unix_ro": "none",
        "auth_unix_rw": "none",
        "keepalive_interval": 5,
        "keepalive_count": 5,
        # noded, mond and instmon each keep one connection used by several threads; during a
        # migration their queries of that domain wait for its job (up to 30 s). At libvirt's
        # default of 5 requests in flight libvirtd stops reading such a client, its keepalive
        # replies with it ("Client hit max requests limit 5. This may result in keep-alive
        # timeouts"), and the client then drops the connection mid-migration
        "max_client_requests": 16,
        "max_workers": 48,  # the pool those requests share (libvirt's default: 20)
    }
    if unix_sock_dir is not None:
        settings["unix_sock_dir"] = str(unix_sock_dir)
    if host_uuid is not None:
        # Several libvirtds on one machine (the simulator) would share the SMBIOS UUID, and
        # libvirt refuses to migrate "to the same host".
        settings["host_uuid"] = host_uuid
    if log_file is not None:
        settings["log_outputs"] = f"3:file:{log_file}"
    return _render(settings)


def qemu_conf(*, run_as_root: bool = True, log_stdio_to_file: bool = True) -> str:
    """qemu.conf of a node.

    `keepalive_interval`/`keepalive_count` bound the peer-to-peer migration connection.
    QEMU runs as root unless a domain's `<seclabel model='dac'>` names a uid-pool user
    (Ganeti's security_model=pool/user). `stdio_handler = "file"`: QEMU writes its own log and
    the serial log file, no virtlogd needed (hosts without systemd, the simulator).
    """
    settings: dict[str, str | int | list[str]] = {
        # the peer-to-peer migration's connection to the target's libvirtd: a target that
        # stops answering (killed, its host gone) ends the migration within about 5 x 3 s
        # instead of leaving the source's job waiting
        "keepalive_interval": MIGRATION_KEEPALIVE_INTERVAL,
        "keepalive_count": MIGRATION_KEEPALIVE_COUNT,
    }
    if run_as_root:
        settings["user"] = "root"
        settings["group"] = "root"
    if log_stdio_to_file:
        settings["stdio_handler"] = "file"
    return _render(settings)


def tls_listen(address: str, port: int = LIBVIRT_TLS_PORT) -> str:
    """ADDRESS:PORT of a node's TLS socket, as systemd's ListenStream= and `cluster verify`
    (from /proc/net/tcp{,6}) write it: an IPv6 address in brackets."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def tls_uri(address: str, port: int = LIBVIRT_TLS_PORT, pki: LibvirtPki | None = None) -> str:
    """The URI of a node's libvirtd over TLS, as the source of a migration connects to it."""
    host = f"[{address}]" if ":" in address else address
    uri = f"qemu+tls://{host}:{port}/system"
    if pki is not None:
        uri += f"?pkipath={quote(str(pki.directory), safe='/')}"
    return uri
