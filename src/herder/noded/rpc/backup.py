"""Exports on this node (`core.rpcdefs.backup_calls`): the dumps of an export being written,
finalizing or removing it, listing and reading exports, and streaming a dump to a node that
imports it; the listeners of a move between clusters (`noded.remote_import`). The export
directory's layout is `noded.exports`."""

from __future__ import annotations

import shutil
import sys

from herder.core import exportconf, paths
from herder.core.rpcdefs import backup_calls, disk_calls
from herder.noded import disk_transfer, exports, remote_import
from herder.noded.exports import ExportFailure, export_path, export_root
from herder.noded.node import Node


def export_prepare_dump(node: Node, call: backup_calls.ExportPrepareDump
                        ) -> backup_calls.PreparedDump:
    """Expect one dump of an export being written: the file, empty, and the token of `POST
    /import/<token>` for its bytes (what the OS export script writes: its size is the OS's;
    the export directory's filesystem bounds it)."""
    partial = export_path(export_root(node), call.instance + backup_calls.PARTIAL)
    dump = paths.child(partial, call.dump, what="dump file")
    try:
        partial.mkdir(parents=True, exist_ok=True)
        with open(dump, "wb"):
            pass
    except OSError as err:
        raise ExportFailure(f"cannot write the export's file {dump}: {err.strerror}") from None
    return backup_calls.PreparedDump(token=node.imports.add(str(dump), sys.maxsize),
                                     path=str(dump))


def export_finalize(node: Node, call: backup_calls.ExportFinalize) -> list[str]:
    try:
        return exports.finalize(export_root(node), call.instance, call.config_ini, call.keep)
    except OSError as err:
        raise ExportFailure(f"cannot finalize the export of {call.instance}: {err}") from None


def export_remove(node: Node, call: backup_calls.ExportRemove) -> bool:
    """Remove an export (or a partial one, `NAME.new`); whether there was one."""
    target = export_path(export_root(node), call.name)
    if not target.exists():
        return False
    try:
        shutil.rmtree(target)
    except OSError as err:
        raise ExportFailure(f"error while removing the export: {err}") from None
    return True


def export_list(node: Node, call: backup_calls.ExportList) -> list[str]:
    return exports.list_exports(export_root(node))


def export_info(node: Node, call: backup_calls.ExportInfo) -> str:
    """The export's config.ini (checked to be one: Ganeti's ExportInfo)."""
    conf = export_path(export_root(node), call.name) / exportconf.CONF_FILE
    try:
        text = conf.read_text(encoding="utf-8")
    except OSError as err:
        raise ExportFailure(f"no export {call.name} on this node: {err.strerror}") from None
    except UnicodeDecodeError:
        raise ExportFailure(f"export {call.name}: config.ini is not text") from None
    exportconf.parse(text)
    return text


def export_send(node: Node, call: backup_calls.ExportSend) -> disk_calls.Transferred:
    """Stream one dump of an export to another node's prepared import; the bytes and checksum
    the target confirmed."""
    dump = paths.child(export_path(export_root(node), call.name), call.dump, what="dump file")
    try:
        size = dump.stat().st_size
    except OSError as err:
        raise ExportFailure(f"export {call.name}: no dump {call.dump}: {err.strerror}") from None
    url, context = disk_transfer.import_url(node.trust, call.target, call.token)
    try:
        return disk_transfer.send(str(dump), size, url, context)
    except disk_transfer.TransferError as err:
        raise ExportFailure(f"sending {dump.name} to {call.target.address}: {err}") from None


def remote_import_prepare(node: Node, call: backup_calls.RemoteImportPrepare
                          ) -> backup_calls.RemoteImportListening:
    """Listen for disk `idx` from a node of another cluster (its certificate issued by
    `peer_ca`), written through the instance's OS `import` script."""
    pending = exports.import_pending(node, call.disk, call.instance, call.idx,
                                     call.os_instance)
    try:
        context = remote_import.server_context(node.trust.node_certificate, call.peer_ca)
        listener = node.remote_imports.add(pending, context, call.address,
                                           call.connect_timeout, call.instance)
    except disk_transfer.TransferError as err:
        raise ExportFailure(f"remote import of {call.disk.label}: {err}") from None
    return backup_calls.RemoteImportListening(port=listener.port, token=listener.token)


def remote_import_status(node: Node, call: backup_calls.RemoteImportStatus
                         ) -> backup_calls.RemoteImportProgress:
    try:
        listener = node.remote_imports.find(call.token)
    except disk_transfer.TransferError as err:
        raise ExportFailure(str(err)) from None
    progress = listener.progress()
    if progress.state in ("done", "failed"):
        node.remote_imports.forget(call.token)
    return progress


def remote_import_abort(node: Node, call: backup_calls.RemoteImportAbort) -> None:
    try:
        listener = node.remote_imports.find(call.token)
    except disk_transfer.TransferError:
        return  # gone already: nothing listens
    listener.abort("aborted by the master")
    node.remote_imports.forget(call.token)
