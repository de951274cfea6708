"""The streams of a move between clusters (Ganeti's remote import/export,
lib/masterd/instance.py `RemoteImport` and `TransferInstanceData`), for `lu/create`'s mode
`remote-import` and `lu/backup`'s OP_BACKUP_EXPORT mode `remote`.

The target cluster's job has its new instance's primary listen for each disk
(`remote_import_prepare`: a port of its own, a one-time token, only a client certificate of
the source cluster's CA, which that cluster signed), then says where, in a job log entry of
Ganeti's type `remote-import` ({"disks": each disk's signed `(host, port, magic, hmac, salt)`,
"x509_ca": this cluster's CA, signed}), which `move-instance` hands to the source cluster's
export job; it then waits for every stream to end. The source's job streams each disk of the
shut-down instance from its primary, through the OS `export` script, straight to its
destination, checking the target node's certificate against the destination's CA."""

from __future__ import annotations

import time
from collections.abc import Callable

from herder.core import diskobjects, model, remote_export
from herder.core.errors import HerderError, OpExecError
from herder.core.rpcdefs import backup_calls, disk_calls
from herder.core.rpcdefs.payload import instance_payload
from herder.masterd.lu.base import MasterEnv
from herder.masterd.lu.exports import Destination, cluster_ca_pem, domain_secret, progress_line

REMOTE_IMPORT_LOG = "remote-import"  # Ganeti's constants.ELOG_REMOTE_IMPORT
POLL_INTERVAL = 1.0  # seconds between two looks at a stream's progress
# seconds the source cluster has to connect, besides its instance's shutdown (Ganeti's)
RIE_CONNECT_TIMEOUT = 180

Feedback = Callable[[str], None]
LogEntry = Callable[[str, object], None]


def receive_disks(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
                  node: model.Node, source_ca: str, shutdown_timeout: int,
                  feedback: Feedback, log_entry: LogEntry) -> None:
    """Every disk of the new instance `inst` (its primary `node`) from the source cluster:
    listened for (the source has Ganeti's connect timeout and its shutdown's to begin),
    announced in the job log, waited for; OpExecError (one line) when one
    stream fails or never comes, every listener then closed."""
    cds = domain_secret(env)
    payload = instance_payload(config, inst)
    listening: list[backup_calls.RemoteImportListening] = []
    try:
        for index, disk in enumerate(inst.disks):
            listening.append(env.rpc.call(node, backup_calls.RemoteImportPrepare(
                disk=diskobjects.disk_object(config, inst, disk, node.uuid),
                instance=inst.name, os_instance=payload, idx=index, address=node.primary_ip,
                peer_ca=source_ca, connect_timeout=RIE_CONNECT_TIMEOUT + shutdown_timeout)))
        salt = remote_export.generate_salt()
        disks = [list(remote_export.compute_disk_info(cds, salt, index, node.primary_ip,
                                                      found.port, found.token))
                 for index, found in enumerate(listening)]
        feedback(f"{node.name} listens for {len(disks)} disks of {inst.name} from the source "
                 "cluster")
        log_entry(REMOTE_IMPORT_LOG, {
            "disks": disks, "x509_ca": remote_export.sign_certificate(cds, cluster_ca_pem(env))})
        for index, found in enumerate(listening):
            _wait_stream(env, node, inst.disks[index].iv_name, found.token, feedback)
    except HerderError as err:
        for found in listening:
            try:
                env.rpc.call(node, backup_calls.RemoteImportAbort(token=found.token))
            except HerderError as abort_err:
                feedback(f"could not close a listener on {node.name}: {abort_err}")
        raise OpExecError(f"remote import of {inst.name} failed: {err}") from None


def _wait_stream(env: MasterEnv, node: model.Node, what: str, token: str,
                 feedback: Feedback) -> None:
    """Until one disk's stream ended: its progress line, or HerderError naming why not."""
    started = time.monotonic()
    while True:
        progress = env.rpc.call(node, backup_calls.RemoteImportStatus(token=token))
        if progress.state == "done":
            feedback(progress_line(what, progress.bytes or 0, time.monotonic() - started))
            return
        if progress.state == "failed":
            raise OpExecError(f"{what}: {progress.error}")
        time.sleep(POLL_INTERVAL)


def send_disks(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
               source: model.Node, destinations: list[Destination], destination_ca: str,
               feedback: Feedback) -> list[bool]:
    """Every disk of the shut-down `inst` from its primary `source`, through its OS `export`
    script, to its destination in the other cluster (whose node certificate
    `destination_ca` issued); HerderError when one fails."""
    payload = instance_payload(config, inst)
    results = []
    for index, (disk, where) in enumerate(zip(inst.disks, destinations, strict=True)):
        feedback(f"exporting {disk.iv_name} ({disk.size} MiB) to {where.address}:{where.port} "
                 "in the other cluster")
        started = time.monotonic()
        sent = env.rpc.call(source, disk_calls.BlockdevExport(
            disk=diskobjects.disk_object(config, inst, disk, source.uuid), instance=inst.name,
            idx=index, token=where.magic, os_instance=payload, peer_ca=destination_ca,
            target=disk_calls.ExportTarget(address=where.address, port=where.port)),
            timeout=backup_calls.STREAM_TIMEOUT)
        feedback(progress_line(disk.iv_name, sent.bytes or 0, time.monotonic() - started))
        results.append(True)
    return results
