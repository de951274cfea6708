"""The node's role in the cluster (Ganeti's names): the master's daemons and the master IP, a
master candidate's demotion, a node taken over by another cluster (cluster merge), and the
rotation of the cluster's secrets.

As Ganeti's backend runs its `daemon-util` and master-IP setup script, these run
`herder daemon-util` on this node (systemd where it runs herder's units, else the supervisor):
the node daemon never starts daemons itself (`herder.noded.node_role`)."""

from __future__ import annotations

import base64
import contextlib
import shutil
from pathlib import Path

from herder.core import master_daemons, node_certs, ssconf
from herder.core.cluster_secrets import SecretPaths
from herder.core.errors import HerderError
from herder.core.libvirtd_conf import LibvirtPki
from herder.core.rpcdefs import role_calls
from herder.core.store import atomic_write
from herder.noded import libvirt_tls as noded_libvirt_tls
from herder.noded import node_role
from herder.noded.node import Node, RpcFailure

# After a rotation, the daemons that read the cluster key or certificate once, at start.
RENEW_RESTART = ("confd", "mond", "instmon")
RENEW_RESTART_MASTER = ("masterd", "maintd")


def node_start_master_daemons(node: Node, call: role_calls.NodeStartMasterDaemons) -> str:
    """Start masterd and maintd here (Ganeti: `daemon-util start-master`)."""
    return master_daemons.start_master_daemons()


def node_stop_master(node: Node, call: role_calls.NodeStopMaster) -> str:
    """Stop maintd and masterd here (Ganeti: `daemon-util stop-master`)."""
    return master_daemons.daemon_util("stop-master") or "master daemons stopped"


def node_activate_master_ip(node: Node, call: role_calls.NodeActivateMasterIp) -> str:
    return master_daemons.daemon_util("activate-master-ip", *call.options())


def node_deactivate_master_ip(node: Node, call: role_calls.NodeDeactivateMasterIp) -> str:
    return master_daemons.daemon_util("deactivate-master-ip", *call.options())


def node_demote_from_mc(node: Node, call: role_calls.NodeDemoteFromMc
                        ) -> role_calls.DemoteAnswer:
    """No longer a master candidate (Ganeti's DemoteFromMC): the config copy is kept as
    `config.json.demoted` and removed, with the job queue copy, so that nothing here (confd,
    mond) reads a config that no longer follows the master's."""
    return role_calls.DemoteAnswer(removed=demote(node.data_dir))


def demote(data_dir: Path) -> list[str]:
    config = data_dir / "config.json"
    removed = []
    if config.exists():
        shutil.copy2(config, config.with_name("config.json.demoted"))
        config.unlink()
        removed.append(str(config))
    queue = data_dir / "queue"
    if queue.is_dir():
        shutil.rmtree(queue)
        removed.append(str(queue))
    return removed


def node_adopt(node: Node, call: role_calls.NodeAdopt) -> role_calls.AdoptAnswer:
    """This node now belongs to the cluster whose secrets come with the call (cluster
    merge; signed with the key of the cluster the node leaves): the new HMAC key,
    cluster certificate and this node's certificate (issued by it) replace the old ones,
    the config and job queue copies and the ssconf files go (the new master pushes its
    own), the master epoch record starts afresh, the master's daemons stop, and the
    daemons that hold the secrets restart."""
    secrets = SecretPaths.beside(node.data_dir / "config.json")
    blobs: dict[Path, bytes] = {}
    for value, target, what in (
            (call.hmac_key, secrets.hmac_key, "hmac_key"),
            (call.certificate, secrets.certificate, "certificate"),
            (call.node_certificate, node.data_dir / node_certs.NODE_CERT_FILE,
             "node_certificate")):
        if not value:
            raise RpcFailure(f"node_adopt needs {what}")
        blobs[target] = base64.b64decode(value, validate=True)
    demote(node.data_dir)
    for stale in node.data_dir.glob("ssconf_*"):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()
    for target, data in blobs.items():
        atomic_write(target, data, 0o600)
    with contextlib.suppress(FileNotFoundError):
        node.epoch_file.unlink()
    with contextlib.suppress(master_daemons.RoleFailure):
        master_daemons.daemon_util("stop", *node_role.ADOPT_STOP)
    node_role.restart_later(node_role.ADOPT_RESTART)
    return role_calls.AdoptAnswer(secrets=sorted(str(p) for p in blobs),
                                  restarting=list(node_role.ADOPT_RESTART))


def libvirt_tls(node: Node, call: role_calls.LibvirtTls) -> role_calls.LibvirtTlsAnswer:
    """This node's libvirt certificate (`masterd.libvirt_trust`): stage `request` makes a new
    key (kept here) and answers its certificate signing request (`csr`, PEM); stage `install`
    takes the master's `certificate` for it, which libvirtd then serves and shows (reloaded
    without a restart where herder configures it)."""
    pki = LibvirtPki(node.data_dir / "libvirt-pki")
    if call.stage == "request":
        return role_calls.LibvirtTlsAnswer(csr=noded_libvirt_tls.request(node.name, pki).decode())
    try:
        noded_libvirt_tls.install_certificate(node.name, pki, (call.certificate or "").encode())
    except HerderError as err:
        raise RpcFailure(str(err)) from None
    problem = noded_libvirt_tls.refresh(node.data_dir, pki,
                                        conf=node.local(noded_libvirt_tls.LIBVIRTD_CONF))
    return role_calls.LibvirtTlsAnswer(installed=True, reload_problem=problem)


def renew_crypto(node: Node, call: role_calls.RenewCrypto) -> role_calls.RenewAnswer:
    """`herder cluster renew-crypto` (`masterd.renew`): stage `install` takes the new CA
    (`ca`, base64 of server.pem), this node's new certificate (`node_certificate`, key and
    certificate) and the new HMAC key (`hmac_key`), the old ones staying accepted; stage
    `retire` stops accepting the old ones and restarts the daemons that read the key at
    start (those that run). noded applies the files without a restart (the server
    refreshes its TLS context after this call)."""
    if call.stage == "install":
        blobs = [base64.b64decode(value or "", validate=True)
                 for value in (call.ca, call.node_certificate, call.hmac_key)]
        node.trust.rotate(*blobs)
        return role_calls.RenewAnswer(stage=call.stage)
    retired = node.trust.retire()
    master = ssconf.master_node(node.data_dir) == node.name
    restarting = node_role.restart_running(RENEW_RESTART + (RENEW_RESTART_MASTER if master
                                                            else ()))
    return role_calls.RenewAnswer(stage=call.stage, retired=retired, restarting=restarting)
