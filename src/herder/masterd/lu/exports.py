"""Helpers of exports and imports (`lu/backup`'s LUs, `lu/create`'s mode import): a disk
streamed from its node into an export being written on another node, a node's streaming
address, the progress line of the job log, the nodes holding an export, an export's
config.ini read from its node; for moves between clusters (`core.remote_export`), the
signed answer of a remote export's preparation and the checks of the other cluster's
messages."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from herder.core import diskobjects, exportconf, model, node_certs, ports, remote_export
from herder.core.cluster_secrets import SecretPaths
from herder.core.errors import HerderError, OpPrereqError
from herder.core.rpcdefs import backup_calls, disk_calls
from herder.core.rpcdefs.payload import instance_payload
from herder.masterd.lu.base import MasterEnv
from herder.masterd.lu.common import config_path_of


def progress_line(what: str, copied: int, seconds: float) -> str:
    """A disk's progress line in the job log: bytes, time, rate."""
    rate = copied / seconds / 2**20 if seconds > 0 else 0.0
    return f"{what}: {copied} bytes ({copied / 2**20:.1f} MiB) in {seconds:.1f} s, " \
           f"{rate:.1f} MiB/s"


def node_target(env: MasterEnv, node: model.Node) -> disk_calls.ExportTarget:
    """Where a node's noded takes streams (`POST /import/<token>`)."""
    return disk_calls.ExportTarget(name=node.name, address=node.primary_ip,
                                   port=getattr(env.rpc, "port", ports.NODED))


def stream_disk(env: MasterEnv, config: model.ConfigData, inst: model.Instance, index: int,
                source: model.Node, target: model.Node, device: model.Disk | None = None
                ) -> int:
    """Disk `index` of `inst` from its device on `source` (or `device`: its snapshot's
    volume, for an export of a running instance), through its OS's `export` script, into the
    export being written on `target`; the bytes the target confirmed (with the checksum of
    what was sent)."""
    disk = inst.disks[index]
    prepared = env.rpc.call(target, backup_calls.ExportPrepareDump(instance=inst.name,
                                                                   dump=disk.uuid))
    sent = env.rpc.call(source, disk_calls.BlockdevExport(
        disk=diskobjects.disk_object(config, inst, device or disk, source.uuid),
        instance=inst.name, idx=index, token=prepared.token, target=node_target(env, target),
        os_instance=instance_payload(config, inst)), timeout=backup_calls.STREAM_TIMEOUT)
    return sent.bytes or 0


def find_exports(env: MasterEnv, config: model.ConfigData, name: str,
                 feedback: Callable[[str], None]) -> list[model.Node]:
    """The online nodes holding an export named `name`."""
    found = []
    for node in sorted(config.nodes.values(), key=lambda n: n.name):
        if node.offline:
            continue
        try:
            names = env.rpc.call(node, backup_calls.ExportList())
        except HerderError as err:
            feedback(f"could not list the exports of {node.name}: {err}")
            continue
        if name in names:
            found.append(node)
    return found


def import_export_info(env: MasterEnv, node: model.Node, name: str
                       ) -> exportconf.ExportInfo:
    """The export `name` on `node`, read from its config.ini (Ganeti's ExportInfo)."""
    try:
        return exportconf.parse(env.rpc.call(node, backup_calls.ExportInfo(name=name)))
    except HerderError as err:
        raise OpPrereqError(f"cannot read export {name} on {node.name}: {err}",
                            "wrong_input") from None


def domain_secret(env: MasterEnv) -> str:
    """The cluster domain secret beside the config; a prerequisite error when it is missing."""
    try:
        return remote_export.read_domain_secret(config_path_of(env).parent)
    except remote_export.RemoteExportError as err:
        raise OpPrereqError(str(err), "environment_error") from None


def remote_preparation(env: MasterEnv, config: model.ConfigData, inst: model.Instance
                       ) -> dict[str, Any]:
    """Ganeti's LUBackupPrepare in mode remote: the handshake, the X509 key name and the CA
    certificate the destination cluster checks, each signed with the cluster domain secret.
    herder's key is the primary node's certificate (named by its digest), which the source
    shows when it streams, and the CA is the cluster's, which issued it (Ganeti makes a
    certificate for the one export; docs/compat.md B64)."""
    cds = domain_secret(env)
    digest = config.cluster.node_certs.get(inst.primary_node)
    if not digest:
        raise OpPrereqError(f"the primary node of {inst.name} has no node certificate: it "
                            "cannot stream to another cluster", "wrong_state")
    return {"handshake": list(remote_export.compute_handshake(cds)),
            "x509_key_name": list(remote_export.sign_key_name(cds, digest)),
            "x509_ca": remote_export.sign_certificate(cds, cluster_ca_pem(env))}


def cluster_ca_pem(env: MasterEnv) -> str:
    """This cluster's CA certificate (PEM, without its key): what issued its nodes'
    certificates."""
    ca_path = SecretPaths.beside(config_path_of(env)).certificate
    try:
        return node_certs.certificate_pem(ca_path.read_bytes()).decode("ascii")
    except OSError as err:
        raise OpPrereqError(f"cannot read the cluster certificate {ca_path}: {err.strerror}",
                            "environment_error") from None


@dataclass(frozen=True)
class Destination:
    """Where one disk goes in the other cluster (a remote export)."""

    address: str
    port: int
    magic: str  # the listener's one-time token


@dataclass(frozen=True)
class RemoteTarget:
    """A remote export's checked destination: each disk's, and the CA of its nodes."""

    disks: list[Destination]
    ca_pem: str


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode("ascii")


def check_remote_export(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
                        key_name: object, destination_ca: str,
                        destinations: Sequence[object]
                        ) -> RemoteTarget:
    """Ganeti's LUBackupExport checks of mode remote: the key name this cluster's preparation
    signed (the primary's node certificate), the destination cluster's CA and each disk's
    destination, all signed with the cluster domain secret."""
    cds = domain_secret(env)
    what = f"remote export of {inst.name}"
    if len(destinations) != len(inst.disks):
        raise OpPrereqError(f"{what}: {len(destinations)} destinations for "
                            f"{len(inst.disks)} disks", "wrong_input")
    try:
        key = remote_export.check_key_name(cds, key_name)
        ca = remote_export.load_signed_certificate(cds, destination_ca)
        found = [remote_export.check_disk_info(cds, index, info)
                 for index, info in enumerate(destinations)]
        for host, _, magic in found:
            disk_calls.ExportTarget(address=host, port=1)
            disk_calls.import_token(magic)
    except (remote_export.RemoteExportError, ValueError) as err:
        raise OpPrereqError(f"{what}: {err}", "wrong_input") from None
    if key != config.cluster.node_certs.get(inst.primary_node):
        raise OpPrereqError(f"{what}: x509_key_name is not the certificate of its primary "
                            "node (prepare the export again)", "wrong_input")
    return RemoteTarget([Destination(host, port, magic) for host, port, magic in found],
                        _pem(ca))


def check_remote_import(env: MasterEnv, name: str, handshake: object, source_ca: str) -> str:
    """Ganeti's LUInstanceCreate checks of mode remote-import: the source cluster's handshake
    and CA, signed with the same cluster domain secret; the CA's PEM (what the source nodes'
    certificates are issued by)."""
    cds = domain_secret(env)
    try:
        remote_export.check_handshake(cds, handshake)
        return _pem(remote_export.load_signed_certificate(cds, source_ca))
    except remote_export.RemoteExportError as err:
        raise OpPrereqError(f"remote import of {name}: {err}", "wrong_input") from None
