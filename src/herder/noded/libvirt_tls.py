"""libvirtd on a joined node: TLS only, trusting exactly the cluster's current nodes (`herder
node libvirt-tls` once on a new node; the master keeps it current through node RPCs).

Trust (docs/security.md "libvirt is never open on the network"): libvirt's CA is not the cluster
CA (every node holds `server.pem`, a removed one too) but a CA of libvirt's own whose key only
the master holds (`masterd.libvirt_trust`): it issues each node's libvirt certificate from a
request the node makes (`request`: the node's key never leaves it; `install`), and a new CA
(a rotation: every node a new certificate) whenever a node is removed and at `renew-crypto`.
The CAs to trust come as ssconf `herder_libvirt_cas` (two during a rotation); when they change
`refresh` writes them as libvirt's `cacert.pem` and makes libvirtd load them without a restart
(`virt-admin server-update-tls`, which reads libvirt's default paths under /etc/pki: they are
links to the files here). So a removed node's certificate, of a CA no node trusts any more, and
any certificate someone holding the cluster CA issues, are refused by every libvirtd.

Files of the PKI directory (`core.libvirtd_conf.LibvirtPki`, the `pkipath` of migration URIs):
`cacert.pem` (the CAs), `servercert.pem`/`clientcert.pem` (this node's certificate, both
ways), `serverkey.pem`/`clientkey.pem` (its key), `request-key.pem` (the key of a request not
yet installed). libvirtd.conf (`core.libvirtd_conf.libvirtd_conf`): TLS on the node's primary IP,
client certificates required, no TCP socket. A libvirtd herder's supervisor runs must run with
`--listen`; on a systemd host (Debian's socket-activated libvirtd) the sockets' units decide
instead, and `noded.libvirt_systemd` writes their drop-ins. Either way the refresh above is
`virt-admin`'s, through libvirtd's admin socket (under systemd `libvirtd-admin.socket`, which
starts libvirtd if it is not running: it then reads the new files at its start).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from herder.core import libvirtd_conf, node_certs, ssconf
from herder.core.errors import HerderError
from herder.core.store import FileStore, atomic_write, atomic_write_if_changed

log = logging.getLogger("herder.noded")
LIBVIRTD_CONF = Path("/etc/libvirt/libvirtd.conf")
SSCONF_NAME = libvirtd_conf.SSCONF_CAS
RELOAD = ("virt-admin", "-c", "libvirtd:///system", "server-update-tls", "libvirtd")
RELOAD_TIMEOUT = 30.0


@dataclass(frozen=True)
class Installed:
    pki: libvirtd_conf.LibvirtPki
    conf: Path
    listen_address: str
    trusted: int  # CAs in cacert.pem
    changed: bool = True  # libvirtd.conf or cacert.pem written anew (libvirtd must restart)


def request_key(pki: libvirtd_conf.LibvirtPki) -> Path:
    return pki.directory / "request-key.pem"


def request(node_name: str, pki: libvirtd_conf.LibvirtPki) -> bytes:
    """A new key for this node's libvirt certificate (kept here, 0600) and the certificate
    signing request the master signs (PEM)."""
    key_pem, csr_pem = node_certs.new_request(node_name)
    pki.directory.mkdir(parents=True, exist_ok=True)
    os.chmod(pki.directory, 0o700)
    atomic_write(request_key(pki), key_pem, 0o600)
    return csr_pem


def install_certificate(node_name: str, pki: libvirtd_conf.LibvirtPki,
                        certificate: bytes) -> None:
    """The master's certificate for the last `request`: it and its key become this node's
    libvirt certificate (server and client). Refused unless it is for that key and this node."""
    try:
        key_pem = request_key(pki).read_bytes()
    except OSError:
        raise HerderError("no libvirt certificate request is pending on this node") from None
    try:
        named = node_certs.common_name(certificate)
    except node_certs.CertificateError as err:
        raise HerderError(f"the libvirt certificate: {err}") from None
    if named != node_name or not node_certs.matches_key(certificate, key_pem):
        raise HerderError(f"the libvirt certificate is for {named}, or not for the key of "
                          f"this node's request ({node_name})")
    for path in (pki.server_cert, pki.client_cert):
        atomic_write(path, certificate, 0o644)
    for path in (pki.server_key, pki.client_key):
        atomic_write(path, key_pem, 0o600)
    request_key(pki).unlink()


def trusted_cas(data_dir: Path) -> bytes | None:
    """The libvirt CAs of ssconf (PEM), None when the master sent none (a cluster not yet on
    libvirt's own CA: libvirtd's trust is left as it is)."""
    text = ssconf.read(SSCONF_NAME, data_dir)
    return (text + "\n").encode() if text else None


def write_trust(pki: libvirtd_conf.LibvirtPki, cas: bytes) -> bool:
    """libvirt's `cacert.pem`; whether it changed."""
    return atomic_write_if_changed(pki.ca_cert, cas, 0o644)


def link_defaults(pki: libvirtd_conf.LibvirtPki, root: Path = Path("/")) -> None:
    """libvirt's default server paths, which `server-update-tls` reads, as links to the PKI
    directory's files (libvirtd.conf names those directly)."""
    for default, target in libvirtd_conf.default_server_pki(pki).items():
        path = root / default.relative_to("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() and Path(os.readlink(path)) == target:
            continue
        temporary = path.with_name(f".{path.name}.herder-{uuid.uuid4().hex[:8]}")
        temporary.symlink_to(target)
        temporary.replace(path)


def configured(conf: Path = LIBVIRTD_CONF) -> bool:
    """Whether libvirtd runs herder's TLS configuration here (`install` wrote it)."""
    try:
        return conf.read_text().startswith(libvirtd_conf.HEADER)
    except OSError:
        return False


def reload_libvirtd() -> str | None:
    """libvirtd takes the files as they are now, without a restart (running guests and
    migrations go on); why it could not, None: it did."""
    try:
        done = subprocess.run(RELOAD, capture_output=True, text=True, timeout=RELOAD_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{' '.join(RELOAD)}: {err}"
    if done.returncode != 0:
        return f"{' '.join(RELOAD)}: {(done.stderr or done.stdout).strip()}"
    return None


def refresh(data_dir: Path, pki: libvirtd_conf.LibvirtPki | None = None,
            conf: Path = LIBVIRTD_CONF) -> str | None:
    """After ssconf or this node's certificate changed: libvirt trusts the master's CAs and
    serves the node's certificate now. Nothing on a node whose libvirtd herder does not
    configure, or before the master sent CAs. Why libvirtd could not take them, else None."""
    pki = pki or libvirtd_conf.LibvirtPki(data_dir / "libvirt-pki")
    cas = trusted_cas(data_dir)
    if cas is None or not configured(conf):
        return None
    write_trust(pki, cas)
    problem = reload_libvirtd()
    if problem is not None:
        log.warning("libvirtd did not take its new TLS files: %s", problem)
    return problem


def _nodes(data_dir: Path) -> dict[str, str]:
    """Node name -> primary IP: from the config copy of the master or a candidate (the newest
    view: the master's own ssconf may predate the last node add), else ssconf."""
    store = FileStore(data_dir / "config.json")
    with contextlib.suppress(HerderError, OSError, ValueError):
        if store.exists():
            return {node.name: node.primary_ip for node in store.load().nodes.values()}
    found = {}
    for line in ssconf.read_lines("node_primary_ips", data_dir) or []:
        name, _, address = line.partition(" ")
        if name and address.strip():
            found[name] = address.strip()
    return found


def host_uuid(node_name: str) -> str:
    """A stable UUID per node for libvirt (nodes sharing one machine's SMBIOS UUID, as the
    simulated ones do, could not migrate to each other)."""
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"libvirt.{node_name}"))


def install(node_name: str, data_dir: Path = Path("/var/lib/herder"),
            pki: libvirtd_conf.LibvirtPki | None = None,
            conf: Path = LIBVIRTD_CONF, listen_address: str | None = None,
            root: Path = Path("/")) -> Installed:
    """libvirtd.conf, the trusted CAs and the links of libvirt's default paths, on a node
    whose libvirt certificate the master has issued (at `node add`)."""
    pki = pki or libvirtd_conf.LibvirtPki(data_dir / "libvirt-pki")
    if not (pki.server_cert.is_file() and pki.server_key.is_file()):
        raise HerderError(f"this node has no libvirt certificate in {pki.directory} yet: the "
                          "master issues it when it adds the node (on a cluster made before: "
                          "herder cluster renew-crypto)")
    cas = trusted_cas(data_dir)
    if cas is None:
        raise HerderError(f"this node has no ssconf {SSCONF_NAME} yet: the master sends it "
                          "when it adds the node (on a cluster made before: herder cluster "
                          "renew-crypto)")
    if listen_address is None:
        listen_address = _nodes(data_dir).get(node_name)
    if not listen_address:
        try:  # a node's name resolves to its primary IP (Ganeti's rule)
            listen_address = socket.gethostbyname(node_name)
        except OSError:
            raise HerderError(f"no primary IP known for {node_name} (ssconf, config, "
                              "DNS)") from None
    changed = write_trust(pki, cas)
    link_defaults(pki, root)
    text = libvirtd_conf.libvirtd_conf(listen_address=listen_address, pki=pki,
                                       host_uuid=host_uuid(node_name)).encode()
    conf_changed = atomic_write_if_changed(conf, text, 0o644)
    return Installed(pki, conf, listen_address, cas.count(b"BEGIN CERTIFICATE"),
                     changed=changed or conf_changed)
