"""libvirt's own CA: what every node's libvirtd trusts (docs/security.md "libvirt is never open
on the network"; issue 35 item 1).

Not the cluster CA, which every node holds (`server.pem`: a removed node too, and it can issue
certificates for any name): a CA of libvirt's own, whose key only the master keeps
(`libvirt-ca.pem` beside the config, mode 0600, never distributed). It signs one certificate
per node, for a key the node makes and keeps (`noded.libvirt_tls`: the node RPC `libvirt_tls`,
stages `request` and `install`), and nothing else. The CAs to trust are the config's
`cluster.libvirt_cas`, which every node gets as ssconf `herder_libvirt_cas` and loads at once.

- A node added (or back online, or added again) gets a certificate of the current CA.
- A node removed: a new CA (a rotation) — every remaining node makes a new key and gets its
  certificate of the new CA, while the nodes trust the old and the new; then only the new:
  the removed node's certificate, and anything signed by a key it may hold, is refused.
- `renew-crypto` rotates too; and a master without the current CA's key (after a master
  failover, or on a cluster made before this CA) rotates before it issues.

A node that cannot be reached during a rotation keeps a certificate of the old CA: libvirt
migrations to and from it fail until the master issues it another (`node add --readd`).
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from pathlib import Path

from herder.core import model, node_certs
from herder.core.cluster_secrets import self_signed_certificate
from herder.core.errors import HerderError
from herder.core.noderpc import NodeRpc
from herder.core.rpcdefs import role_calls
from herder.core.store import atomic_write

CA_FILE = "libvirt-ca.pem"
TIMEOUT = 60.0
# The CAs every node is to trust now: the caller records them in the config and sends them to
# every node (ssconf) before it returns.
Publish = Callable[[list[str]], None]
Say = Callable[[str], None]
_LOCK = threading.Lock()  # one issue or rotation at a time in this master


def ca_path(config_path: Path) -> Path:
    return config_path.parent / CA_FILE


def current_ca(path: Path, trusted: list[str]) -> bytes | None:
    """The master's CA (key and certificate) when it is the newest one the nodes trust."""
    try:
        pem = path.read_bytes()
        return pem if trusted and node_certs.certificate_pem(pem).decode() == trusted[-1] \
            else None
    except (OSError, HerderError):
        return None


def eligible(config: model.ConfigData) -> list[model.Node]:
    """The nodes that run libvirt and can be asked: online and VM-capable."""
    return sorted((n for n in config.nodes.values() if n.vm_capable and not n.offline),
                  key=lambda n: n.name)


def _signed(rpc: NodeRpc, node: model.Node, ca: bytes) -> str:
    """A new key on `node` and its certificate of `ca` (not yet installed)."""
    request = rpc.call(node, role_calls.LibvirtTls(stage="request"), timeout=TIMEOUT).csr
    if request is None:
        raise HerderError(f"{node.name} answered no certificate request")
    return node_certs.sign_request(ca, request.encode(), node.name).decode()


def _install(rpc: NodeRpc, node: model.Node, certificate: str, say: Say) -> None:
    problem = rpc.call(node, role_calls.LibvirtTls(stage="install", certificate=certificate),
                       timeout=TIMEOUT).reload_problem
    if problem:  # installed, but its libvirtd serves the old files until it restarts
        say(f"{node.name}: libvirtd did not take its new certificate: {problem}")


def rotate(rpc: NodeRpc, nodes: list[model.Node], trusted: list[str], publish: Publish,
           say: Say) -> bytes:
    """A new CA and a certificate of it for every node of `nodes` that answers; the nodes
    trust the old and the new CA while they change, then only the new. Returns the new CA."""
    ca = self_signed_certificate(f"herder-libvirt-{secrets.token_hex(6)}")
    new = node_certs.certificate_pem(ca).decode()
    signed: dict[str, tuple[model.Node, str]] = {}
    for node in nodes:
        try:
            signed[node.uuid] = (node, _signed(rpc, node, ca))
        except HerderError as err:
            say(f"{node.name}: no libvirt certificate of the new CA ({err}); libvirt "
                f"migrations to and from it fail until herder node add --readd {node.name}")
    publish([*trusted[-1:], new])
    for node, certificate in signed.values():
        try:
            _install(rpc, node, certificate, say)
        except HerderError as err:
            say(f"{node.name}: its libvirt certificate of the new CA was not installed "
                f"({err}); libvirt migrations to and from it fail until herder node add "
                f"--readd {node.name}")
    publish([new])
    return ca


def issue(rpc: NodeRpc, config: model.ConfigData, config_path: Path, node: model.Node,
          publish: Publish, say: Say) -> None:
    """`node` (added, back online) gets a certificate of the current CA; a master without the
    current CA's key makes a new one for every node first."""
    with _LOCK:
        path = ca_path(config_path)
        ca = current_ca(path, config.cluster.libvirt_cas)
        if ca is None:
            atomic_write(path, rotate(rpc, eligible(config), config.cluster.libvirt_cas,
                                      publish, say), 0o600)
            return
        try:
            _install(rpc, node, _signed(rpc, node, ca), say)
        except HerderError as err:
            say(f"{node.name}: no libvirt certificate ({err}); libvirt migrations to and from "
                f"it fail until herder node add --readd {node.name}")


def renew(rpc: NodeRpc, config: model.ConfigData, config_path: Path, publish: Publish,
          say: Say) -> None:
    """A new CA and new certificates for every node (a node removed, `renew-crypto`)."""
    with _LOCK:
        atomic_write(ca_path(config_path), rotate(rpc, eligible(config),
                                                  config.cluster.libvirt_cas, publish, say),
                     0o600)
