"""`herder cluster renew-crypto`: a new cluster CA, node certificates and HMAC key, without
stopping an instance (docs/real-nodes.md "Joining a node"; Ganeti's `gnt-cluster renew-crypto
--new-cluster-certificate --new-node-certificates --new-cluster-domain-secret`, which stops the
cluster's daemons; herder keeps them running).

Run on the master, through the node daemons, in two halves so that every call is accepted
at every moment:

1. every online node gets the list of node certificates with the old and the new digests;
2. every node installs the new CA, its new certificate and the new key, the old ones staying
   accepted (`noded.trust.rotate`; the master's node last). The calls of this half show the
   old certificate and sign with the old key, and trust both CAs;
3. the config records the new digests (`cluster.node_certs`; from step 1 to here they are
   `cluster.node_certs_renewing`, which redistributions list too);
4. every node gets the list of the new digests only, then (with the new key and the master's
   new certificate) retires the old key and CA and restarts the daemons that read the key at
   start (confd, mond, instmon; masterd and maintd on the master);
5. libvirt's own CA is renewed (`masterd.libvirt_trust`): every node a new libvirt key and
   certificate, trusting the old and the new CA meanwhile, then only the new.

The RAPI certificate is the cluster CA's (`server.pem`): clients pinning it fetch it again.
An offline node is skipped; it must join again (its certificate is no longer listed).
"""

from __future__ import annotations

import base64
import tempfile
from collections.abc import Callable
from pathlib import Path

from herder.core import envelope, libvirtd_conf, model, node_certs, ports
from herder.core.cluster_secrets import SecretPaths, self_signed_certificate
from herder.core.errors import HerderError
from herder.core.noderpc import HttpNodeRpc, NodeRpc
from herder.core.rpcdefs import file_calls, role_calls
from herder.core.rpcdefs.base import AnswerT, Call
from herder.core.store import FileStore
from herder.masterd import libvirt_trust


class RenewError(HerderError):
    pass


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _each(rpc: NodeRpc, nodes: list[model.Node],
          request: Callable[[model.Node], Call[AnswerT]], what: str) -> None:
    for node in nodes:
        try:
            rpc.call(node, request(node), timeout=60)
        except HerderError as err:
            raise RenewError(f"renew-crypto stopped at {what} on {node.name}: {err} (the "
                             "cluster accepts the old and the new secrets; run it again)") from None


def renew(config_path: Path, say: Callable[[str], None], *,
          port: int = ports.NODED) -> dict[str, str]:
    """Rotate; returns node name -> its new certificate's digest."""
    store = FileStore(config_path)
    config = store.load()
    secrets = SecretPaths.beside(config_path)
    master_uuid = config.cluster.master_node
    nodes = sorted((n for n in config.nodes.values() if not n.offline),
                   key=lambda n: (n.uuid == master_uuid, n.name))  # the master last
    old_ca = secrets.certificate.read_bytes()
    old_key = envelope.load_key(secrets.hmac_key)
    node_pem = node_certs.node_certificate_beside(secrets.certificate)
    if not node_pem.exists():
        raise RenewError(f"{node_pem} is missing: run renew-crypto on the master")
    new_ca = self_signed_certificate(config.cluster.name)
    new_key = envelope.generate_key()
    issued = {n.uuid: node_certs.issue(new_ca, n.name) for n in nodes}
    new_digests = {uuid: node_certs.digest(pem) for uuid, pem in issued.items()}
    names = {n.uuid: n.name for n in config.nodes.values()}
    old_rows = node_certs.list_rows(config.cluster.node_certs, names)
    new_rows = node_certs.list_rows(new_digests, names)
    epoch = config.cluster.master_epoch
    with store.update() as changed:  # masterd's redistributions list both from now on
        changed.cluster.node_certs_renewing = {uuid: digest for uuid, digest in
                                               new_digests.items() if uuid in changed.nodes}
    with tempfile.TemporaryDirectory(prefix="herder-renew-") as scratch:
        both_cas = Path(scratch) / "cas.pem"
        both_cas.write_bytes(node_certs.certificate_pem(old_ca)
                             + node_certs.certificate_pem(new_ca))
        shown = Path(scratch) / "node.pem"  # the master's old certificate, replaced in step 2
        shown.write_bytes(node_pem.read_bytes())
        rotation = HttpNodeRpc(old_key, both_cas, client_certificate=shown, port=port,
                               epoch=epoch, timeout=60, connect_timeout=5)
        final: HttpNodeRpc | None = None
        try:
            both = node_certs.format_list(old_rows + new_rows)
            _each(rotation, nodes,
                  lambda n: file_calls.WriteSsconf(values={node_certs.SSCONF_NAME: both}),
                  "the list of both")
            say(f"{len(nodes)} nodes accept the old and the new node certificates")
            _each(rotation, nodes, lambda n: role_calls.RenewCrypto(
                stage="install", ca=_b64(new_ca), node_certificate=_b64(issued[n.uuid]),
                hmac_key=_b64(new_key)), "installing the new secrets")
            say("every node shows its new certificate and accepts the new key")
            with store.update() as changed:
                changed.cluster.node_certs = {uuid: digest for uuid, digest in
                                              new_digests.items() if uuid in changed.nodes}
                changed.cluster.node_certs_renewing = {}
            # made now: it reads the master's new CA and certificate, installed in step 2
            final = HttpNodeRpc(new_key, secrets.certificate, port=port, epoch=epoch,
                                timeout=60, connect_timeout=5)
            only_new = node_certs.format_list(new_rows)
            for node in nodes:
                _retire(rotation, final, node, only_new)
            _renew_libvirt(final, store, config_path, nodes, say)
        finally:
            rotation.close()
            if final is not None:
                final.close()
    say("the old CA, node certificates and key are retired; daemons that read the key at start "
        "restart")
    return {names[uuid]: digest for uuid, digest in new_digests.items()}


def _renew_libvirt(rpc: NodeRpc, store: FileStore, config_path: Path, nodes: list[model.Node],
                   say: Callable[[str], None]) -> None:
    """Step 5: libvirt's CA renewed; each list of CAs recorded and sent to every node."""
    def publish(cas: list[str]) -> None:
        with store.update() as changed:
            changed.cluster.libvirt_cas = list(cas)
        for node in nodes:
            try:
                rpc.call(node, file_calls.WriteSsconf(
                    values={libvirtd_conf.SSCONF_CAS: "".join(cas)}), timeout=60)
            except HerderError as err:  # as any node that misses its certificate
                say(f"{node.name}: the libvirt CAs were not sent ({err}); libvirt migrations "
                    f"to and from it fail until herder node add --readd {node.name}")

    libvirt_trust.renew(rpc, store.load(), config_path, publish, say)
    say("libvirt trusts its new CA only")


def _retire(rotation: NodeRpc, final: NodeRpc, node: model.Node, only_new: str) -> None:
    """The new list, then the old secrets retired on one node. masterd redistributes the list
    from the config meanwhile (the new digests, or both), and a redistribution that read the
    config before the rotation may still land with the old ones: the list goes with whichever
    certificate the node's current list accepts, the new one first."""
    values = file_calls.WriteSsconf(values={node_certs.SSCONF_NAME: only_new})
    try:
        final.call(node, values, timeout=60)
    except HerderError:
        try:
            rotation.call(node, values, timeout=60)
        except HerderError as err:
            raise RenewError(f"renew-crypto stopped at the new list on {node.name}: {err} (the "
                             "cluster accepts the old and the new secrets; run it again)") from None
    try:
        final.call(node, role_calls.RenewCrypto(stage="retire"))
    except HerderError as err:
        raise RenewError(f"renew-crypto stopped at retiring the old secrets on {node.name}: "
                         f"{err} (the cluster accepts the old and the new secrets; run it "
                         "again)") from None
