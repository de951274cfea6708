"""The node's export directory (Ganeti's EXPORT_DIR, here /srv/herder/export): one directory per
export, named by its instance, holding `config.ini` and one dump file per disk; an export being
written is `<instance>.new` until its config.ini is in place (backend.FinalizeExport). With a
retention count (herder's, `keep`) the export it replaces is kept beside it as
`<instance>@YYYYMMDD-HHMMSS` (its own time), a complete Ganeti export too, and the oldest of
those beyond the count go once the new one is in place. And the OS `export`/`import` script a
disk's stream goes through (`os_stream`), and the stream of a disk without a device path here
(a userspace rbd image or snapshot) from the command that writes its bytes
(`send_command_output`), and where a stream goes into a disk here (`import_pending`: its
device, or the command that writes a userspace rbd image).

The handlers of an export's RPCs (`core.rpcdefs.backup_calls`) are `noded.rpc.backup`; a
disk's own stream, through its OS's script, is `noded.rpc.disks`' `blockdev_export` and
`blockdev_import_prepare` (`noded.disk_transfer`, the transport of an instance move)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import ssl
import subprocess
import sys
from pathlib import Path

from herder.core import exportconf, names, paths
from herder.core.diskobjects import Disk
from herder.core.errors import HerderError
from herder.core.rpcdefs import disk_calls
from herder.core.rpcdefs.backup_calls import PARTIAL
from herder.core.rpcdefs.payload import InstancePayload
from herder.noded import disk_transfer, osdef
from herder.noded.bdev.base import BlockDevError, ImportSink
from herder.noded.node import Node, RpcFailure

# The $EXPORT_DEVICE of an OS export script reading a disk that has no device path here: the
# bytes of its export command on the script's stdin (herder's: Ganeti gives such a script
# only EXPORT_DISK_URI; compat B58)
STDIN_DEVICE = "/dev/stdin"
# The $IMPORT_DEVICE of an OS import script writing a disk that has no device path here: its
# stdout, which the disk's import command reads (herder's, as STDIN_DEVICE: compat B67)
STDOUT_DEVICE = "/dev/stdout"
# seconds an export command is given to end once its reader is gone
COMMAND_END_WAIT = 30.0


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


def _sync_directory(root: Path) -> None:
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def finalize(root: Path, instance: str, config_ini: str, keep: int | None = None
             ) -> list[str]:
    """config.ini into `<instance>.new`, which then replaces the export of that instance;
    with `keep` (above 1) the replaced one is kept under its dated name, and the oldest
    dated ones beyond `keep` exports in all are removed (`keep` 1: all of them). The names
    removed."""
    partial = export_path(root, instance + PARTIAL)
    final, old = export_path(root, instance), export_path(root, instance + _OLD)
    if not partial.is_dir():
        raise ExportFailure(f"no export of {instance} is being written on this node")
    write_atomically(partial / exportconf.CONF_FILE, config_ini)
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, _free_dated(root, instance, export_time(final))
                   if keep is not None and keep > 1 else old)
    os.replace(partial, final)
    shutil.rmtree(old, ignore_errors=True)
    _sync_directory(root)
    if keep is None:
        return []
    removed = prune(root, instance, keep)
    if removed:
        _sync_directory(root)
    return removed


def export_time(export: Path) -> float:
    """When an export was made: its config.ini's timestamp, else the file's time."""
    conf = export / exportconf.CONF_FILE
    try:
        stamp = exportconf.parse(conf.read_text(encoding="utf-8")).timestamp
    except (OSError, UnicodeDecodeError, exportconf.ExportConfError):
        stamp = 0
    try:
        return float(stamp) if stamp > 0 else conf.stat().st_mtime
    except OSError:
        return export.stat().st_mtime


def _free_dated(root: Path, instance: str, made: float) -> Path:
    """The dated name of an older export made at `made`: the next free second when two
    exports share one."""
    while True:
        dated = export_path(root, names.dated_export_name(instance, made))
        if not dated.exists():
            return dated
        made += 1


def kept_exports(root: Path, instance: str) -> list[str]:
    """The older exports of `instance` kept under dated names, oldest first."""
    prefix = instance + names.EXPORT_DATED
    return sorted(name for name in list_exports(root) if name.startswith(prefix))


def prune(root: Path, instance: str, keep: int) -> list[str]:
    """The oldest dated exports of `instance` removed until, with its newest, `keep` are
    left; the names removed."""
    kept = kept_exports(root, instance)
    removed = kept[:max(0, len(kept) - (keep - 1))]
    for name in removed:
        shutil.rmtree(export_path(root, name))
    return removed


def remove_partial(root: Path) -> list[str]:
    """The exports being written (`NAME.new`) removed: run when noded starts, as their
    streams (tokens in the daemon's memory) died with the daemon before it, so none of them
    can be finished (a master that finalized one would be told so in one line). Except one
    whose finalize the daemon died in, between keeping the export it replaced under its
    dated name and putting it in place (its config.ini written, no export named NAME): it
    is put in place. The names removed (or, with " (put in place)", finished)."""
    if not root.is_dir():
        return []
    done = []
    for entry in sorted(root.iterdir()):
        if not entry.name.endswith(PARTIAL) or entry.name.startswith(".") or \
                not entry.is_dir():
            continue
        final = entry.with_name(entry.name.removesuffix(PARTIAL))
        if (entry / exportconf.CONF_FILE).is_file() and not final.exists():
            os.replace(entry, final)
            done.append(f"{entry.name} (put in place)")
        else:
            shutil.rmtree(entry, ignore_errors=True)
            done.append(entry.name)
    if done:
        _sync_directory(root)
    return done


def list_exports(root: Path) -> list[str]:
    """The finished exports (directories with a config.ini), by name."""
    if not root.is_dir():
        return []
    return sorted(entry.name for entry in root.iterdir()
                  if not entry.name.startswith(".") and (entry / exportconf.CONF_FILE).is_file())


def export_root(node: Node) -> Path:
    return node.local(exportconf.EXPORT_DIR)


def os_stream(node: Node, inst: InstancePayload, script: osdef.OsScript, index: int,
              device: str) -> disk_transfer.OsStream:
    """The OS `export` or `import` script of disk `index` (at `device`) of the instance, with
    Ganeti's environment (EXPORT_/IMPORT_DEVICE and _INDEX) and its log file."""
    try:
        definition = osdef.find_os(osdef.split_os_name(inst.os)[0], list(node.settings.os_path))
        with node.disks.os_disk_paths(inst, install=False) as os_disks:
            env = osdef.os_environment(definition,
                                       osdef.OsInstanceData.from_payload(inst, os_disks))
        env.update(osdef.script_variables(script, disk_index=index, disk_path=device))
    except osdef.OsError as err:
        raise RpcFailure(f"OS {inst.os!r} for {inst.name}: {err}") from None
    log_dir = node.settings.state_dir / "os-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    return disk_transfer.OsStream(
        definition=definition, script=script, env=env, timeout=node.settings.os_timeout,
        log_file=paths.child(log_dir, inst.name, prefix=f"{script}-", suffix=f"-{index}.log",
                             what="instance name"))


def import_pending(node: Node, disk: Disk, instance: str | None, index: int,
                   os_instance: InstancePayload | None) -> disk_transfer.PendingImport:
    """Where a stream of disk `index` goes here (its `expires` left to the caller): its
    device, through the OS `import` script with `os_instance` (an import from an export);
    for a device without a path here (a userspace rbd image), its import command (Ganeti's
    Import()), which reads the script's stdout ($IMPORT_DEVICE: STDOUT_DEVICE) or the raw
    stream."""
    target = node.disks.import_target(disk, instance)
    path = target.what if isinstance(target, ImportSink) else target
    sink = target if isinstance(target, ImportSink) else None
    if os_instance is not None:
        script = os_stream(node, os_instance, "import", index,
                           STDOUT_DEVICE if sink is not None else path)
        return disk_transfer.PendingImport(path, sys.maxsize, 0.0, script, sink)
    return disk_transfer.PendingImport(path, disk.size * 2**20, 0.0, None, sink)


def send_command_output(node: Node, argv: list[str], os_instance: InstancePayload | None,
                        index: int, url: str, context: ssl.SSLContext | None
                        ) -> disk_calls.Transferred:
    """A disk without a device path here (a userspace rbd image or snapshot) streamed from
    the command writing its bytes (Ganeti's Export()): through the OS export script, which
    reads them on its stdin, or raw. The command must succeed too."""
    try:
        proc = node.disks.host.open_stream(argv)
    except BlockDevError as err:
        raise disk_transfer.TransferError(f"reading disk/{index}: {err}") from None
    assert proc.stdout is not None and proc.stderr is not None
    try:
        with proc.stdout:
            if os_instance is not None:
                script = os_stream(node, os_instance, "export", index, STDIN_DEVICE)
                sent = disk_transfer.send_through_script(script, url, context,
                                                         stdin=proc.stdout)
            else:
                sent = disk_transfer.send_stream(proc.stdout, f"the output of {argv[0]}", url,
                                                 context)
    finally:
        returncode = _ended(proc)
        with proc.stderr:
            errors = proc.stderr.read().decode(errors="replace").strip().splitlines()
    if returncode != 0:
        raise disk_transfer.TransferError(
            f"{' '.join(argv[:2])} failed (exit code {returncode}): "
            f"{errors[-1] if errors else 'no message'}")
    return sent


def _ended(proc: subprocess.Popen[bytes]) -> int | None:
    """The command's exit code once it ended (its reader gone, it ends on a broken pipe);
    its process group killed when it does not within COMMAND_END_WAIT."""
    try:
        return proc.wait(timeout=COMMAND_END_WAIT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()
