"""libvirtd on a joined node: TLS only, with the node's own certificate (`herder node
libvirt-tls`, run on the node after the join and after nodes are added or removed).

From the node's cluster files (`node.pem`: its key and certificate; `server.pem`: the cluster
CA; ssconf `node_list` and `node_primary_ips`) it writes libvirt's PKI directory
(`core.libvirtd_conf.LibvirtPki`, the `pkipath` of migration URIs) and libvirtd.conf
(`core.libvirtd_conf.libvirtd_conf`: TLS on the node's primary IP, client certificates of the
cluster CA whose subject is one of the cluster's nodes, no TCP socket). libvirtd must then run
with `--listen` (restarted; running guests are not affected).
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path

from herder.core import libvirtd_conf, ssconf
from herder.core.errors import HerderError
from herder.core.store import FileStore, atomic_write

LIBVIRTD_CONF = Path("/etc/libvirt/libvirtd.conf")


@dataclass(frozen=True)
class Installed:
    pki: libvirtd_conf.LibvirtPki
    conf: Path
    listen_address: str
    nodes: list[str]


def _pem_blocks(text: str, kind: str) -> str:
    """The PEM blocks whose header names `kind` (CERTIFICATE, PRIVATE KEY ...)."""
    blocks, current, inside = [], [], False
    for line in text.splitlines(keepends=True):
        if line.startswith("-----BEGIN ") and kind in line:
            inside = True
        if inside:
            current.append(line)
        if inside and line.startswith("-----END "):
            blocks.append("".join(current))
            current, inside = [], False
    return "".join(blocks)


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
    for name in ssconf.read_lines("node_list", data_dir) or []:
        found.setdefault(name, "")
    return found


def host_uuid(node_name: str) -> str:
    """A stable UUID per node for libvirt (nodes sharing one machine's SMBIOS UUID, as the
    simulated ones do, could not migrate to each other)."""
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"libvirt.{node_name}"))


def install(node_name: str, data_dir: Path = Path("/var/lib/herder"),
            pki: libvirtd_conf.LibvirtPki | None = None,
            conf: Path = LIBVIRTD_CONF, listen_address: str | None = None) -> Installed:
    pki = pki or libvirtd_conf.LibvirtPki(data_dir / "libvirt-pki")
    try:
        node_pem = (data_dir / "node.pem").read_text()
        ca_pem = (data_dir / "server.pem").read_text()
    except OSError as err:
        raise HerderError(f"this node has no node certificate yet ({err.filename}): join it "
                          "to the cluster first") from None
    certificate = _pem_blocks(node_pem, "CERTIFICATE")
    key = _pem_blocks(node_pem, "PRIVATE KEY")
    ca = _pem_blocks(ca_pem, "CERTIFICATE")
    if not (certificate and key and ca):
        raise HerderError(f"{data_dir / 'node.pem'} or {data_dir / 'server.pem'} lacks a key "
                          "or certificate")
    known = _nodes(data_dir)
    nodes = sorted(known) or [node_name]
    if listen_address is None:
        listen_address = known.get(node_name)
    if not listen_address:
        try:  # a node's name resolves to its primary IP (Ganeti's rule)
            listen_address = socket.gethostbyname(node_name)
        except OSError:
            raise HerderError(f"no primary IP known for {node_name} (ssconf, config, "
                              "DNS)") from None
    pki.directory.mkdir(parents=True, exist_ok=True)
    os.chmod(pki.directory, 0o700)
    atomic_write(pki.ca_cert, ca.encode(), 0o644)
    for path in (pki.server_cert, pki.client_cert):
        atomic_write(path, certificate.encode(), 0o644)
    for path in (pki.server_key, pki.client_key):
        atomic_write(path, key.encode(), 0o600)
    conf.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(conf, libvirtd_conf.libvirtd_conf(
        listen_address=listen_address, pki=pki, node_names=nodes,
        host_uuid=host_uuid(node_name)).encode(), 0o644)
    return Installed(pki, conf, listen_address, sorted(nodes))
