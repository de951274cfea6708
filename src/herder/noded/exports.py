"""The node's export directory (Ganeti's EXPORT_DIR, here /srv/herder/export): one directory per
export, named by its instance, holding `config.ini` and one dump file per disk; an export being
written is `<instance>.new` until its config.ini is in place (backend.FinalizeExport).

The RPCs of an export's life: the target expects a dump (`export_prepare_dump`: the file made
empty in `<instance>.new`, a one-time token for the source's stream: `noded.disk_transfer`, the
same transport as an instance move), the source streams its disk (`blockdev_export`), the
target finalizes (`export_finalize`) or drops the partial export (`export_remove`); listing
(`export_list`), reading (`export_info`) and sending a dump to a node importing it
(`export_send`)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from herder.core import exportconf, paths
from herder.core.errors import HerderError
from herder.noded import disk_transfer

PARTIAL = ".new"  # the suffix of an export being written (Ganeti's)
_OLD = ".old"  # a replaced export, removed once the new one is in place


class ExportFailure(HerderError):
    """An export RPC could not be carried out; the message goes back to the master."""


def export_path(root: Path, name: str) -> Path:
    """The directory of export `name` (an instance name, or it with `.new`) under `root`."""
    return paths.child(root, name, what="export")


def write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "w", encoding="utf-8") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)


def finalize(root: Path, instance: str, config_ini: str) -> None:
    """config.ini into `<instance>.new`, which then replaces the export of that instance."""
    partial = export_path(root, instance + PARTIAL)
    final, old = export_path(root, instance), export_path(root, instance + _OLD)
    if not partial.is_dir():
        raise ExportFailure(f"no export of {instance} is being written on this node")
    write_atomically(partial / exportconf.CONF_FILE, config_ini)
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(partial, final)
    shutil.rmtree(old, ignore_errors=True)
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def list_exports(root: Path) -> list[str]:
    """The finished exports (directories with a config.ini), by name."""
    if not root.is_dir():
        return []
    return sorted(entry.name for entry in root.iterdir()
                  if not entry.name.startswith(".") and (entry / exportconf.CONF_FILE).is_file())


class ExportRpcs:
    """Mixed into `NodeDaemon`, which sets these."""

    settings: Any
    imports: disk_transfer.Imports
    trust: Any  # noded.trust.NodeTrust: this node's certificate and the cluster CA

    def local(self, path: str | Path) -> Path:
        raise NotImplementedError  # NodeDaemon's

    @property
    def export_root(self) -> Path:
        return self.local(exportconf.EXPORT_DIR)

    def rpc_export_prepare_dump(self, args: dict[str, Any]) -> dict[str, Any]:
        """Expect one dump of an export being written: the file, empty, and the token of
        `POST /import/<token>` for its bytes (what the OS export script writes: its size is
        the OS's; the export directory's filesystem bounds it)."""
        partial = export_path(self.export_root, str(args["instance"]) + PARTIAL)
        dump = paths.child(partial, str(args["dump"]), what="dump file")
        try:
            partial.mkdir(parents=True, exist_ok=True)
            with open(dump, "wb"):
                pass
        except OSError as err:
            raise ExportFailure(f"cannot write the export's file {dump}: "
                                f"{err.strerror}") from None
        return {"token": self.imports.add(str(dump), sys.maxsize), "path": str(dump)}

    def rpc_export_finalize(self, args: dict[str, Any]) -> None:
        try:
            finalize(self.export_root, str(args["instance"]), str(args["config_ini"]))
        except OSError as err:
            raise ExportFailure(f"cannot finalize the export of {args['instance']}: "
                                f"{err}") from None

    def rpc_export_remove(self, args: dict[str, Any]) -> dict[str, Any]:
        """Remove an export (or a partial one, `NAME.new`); whether there was one."""
        target = export_path(self.export_root, str(args["name"]))
        if not target.exists():
            return {"removed": False}
        try:
            shutil.rmtree(target)
        except OSError as err:
            raise ExportFailure(f"error while removing the export: {err}") from None
        return {"removed": True}

    def rpc_export_list(self, args: dict[str, Any]) -> list[str]:
        return list_exports(self.export_root)

    def rpc_export_info(self, args: dict[str, Any]) -> str:
        """The export's config.ini (checked to be one: Ganeti's ExportInfo)."""
        conf = export_path(self.export_root, str(args["name"])) / exportconf.CONF_FILE
        try:
            text = conf.read_text(encoding="utf-8")
        except OSError as err:
            raise ExportFailure(f"no export {args['name']} on this node: "
                                f"{err.strerror}") from None
        except UnicodeDecodeError:
            raise ExportFailure(f"export {args['name']}: config.ini is not text") from None
        exportconf.parse(text)
        return text

    def rpc_export_send(self, args: dict[str, Any]) -> dict[str, Any]:
        """Stream one dump of an export to another node's prepared import (`target`,
        `token`); the bytes and checksum the target confirmed."""
        directory = export_path(self.export_root, str(args["name"]))
        dump = paths.child(directory, str(args["dump"]), what="dump file")
        try:
            size = dump.stat().st_size
        except OSError as err:
            raise ExportFailure(f"export {args['name']}: no dump {args['dump']}: "
                                f"{err.strerror}") from None
        target = args["target"]
        url, context = disk_transfer.import_url(self.trust, target, str(args["token"]))
        try:
            return disk_transfer.send(str(dump), size, url, context)
        except disk_transfer.TransferError as err:
            raise ExportFailure(f"sending {dump.name} to {target['address']}: {err}") from None
