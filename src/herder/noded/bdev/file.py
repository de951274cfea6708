"""`file` and `sharedfile`: a sparse file per disk, under the cluster's (shared) file-storage
directory, in one directory per instance (the master names the path), as Ganeti.

Every path must be accepted by Ganeti's allowed-paths file (`file-storage-paths`: one
absolute directory per line, `#` comments): absolute, not under a system directory (`/boot`,
`/dev`, `/etc`, `/bin`, ...), and below one of the listed directories. The instance
directories are made and removed by `create_storage_dir`/`remove_storage_dir`/
`rename_storage_dir` (Ganeti's `file_storage_dir_*` RPCs), which the same check guards.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from pathlib import Path

from herder.core.diskobjects import Disk
from herder.noded.bdev.base import BlockDev, BlockDevError, Host

MIB = 1024 * 1024


def _forbidden_prefixes() -> frozenset[str]:
    paths = {"/boot", "/dev", "/etc", "/home", "/proc", "/root", "/sys"}
    for prefix in ("", "/usr", "/usr/local"):
        paths.update(f"{prefix}/{sub}" for sub in ("bin", "lib", "lib32", "lib64", "sbin"))
    return frozenset(os.path.normpath(p) for p in paths)


FORBIDDEN_PREFIXES = _forbidden_prefixes()


def is_below_dir(root: str, path: str) -> bool:
    """`path` is strictly below `root` (both absolute), after normalisation."""
    norm_path = os.path.normpath(path)
    if norm_path == os.sep:
        return False
    norm_root = os.path.normpath(root)
    prefix = norm_root if norm_root == os.sep else norm_root + os.sep
    return norm_path.startswith(prefix)


def allowed_paths(host: Host) -> list[str]:
    """The allowed-paths file's directories (none when it cannot be read)."""
    try:
        text = host.read_text(host.file_storage_paths_file)
    except OSError:
        return []
    return [line for line in (raw.strip() for raw in text.splitlines())
            if line and not line.startswith("#")]


def check_path(host: Host, path: str, *, exact_match_ok: bool = False) -> None:
    """Raise unless `path` is acceptable for file storage (Ganeti's rules)."""
    allowed = allowed_paths(host)
    if not allowed:
        raise BlockDevError(f"No paths are valid or path file"
                            f" '{host.file_storage_paths_file}' was not accessible.")
    norm = os.path.normpath(path)
    if not os.path.isabs(path) or norm in FORBIDDEN_PREFIXES or any(
            is_below_dir(prefix, norm) for prefix in FORBIDDEN_PREFIXES):
        raise BlockDevError(f"Path '{path}' uses a forbidden prefix")
    for root in allowed:
        if not os.path.isabs(root):
            continue  # Ganeti ignores relative entries
        if exact_match_ok and os.path.normpath(root) == norm:
            return
        if is_below_dir(root, path):
            return
    raise BlockDevError(f"Path '{path}' is not acceptable for file storage (allowed:"
                        f" {', '.join(allowed)})")


def create_storage_dir(host: Host, path: str) -> None:
    """Make an instance's file-storage directory (mode 0711: Ganeti's 0750 plus traversal,
    so QEMU running as libvirt-qemu, as Debian's libvirt runs it, reaches the disk files
    libvirt hands over to it; nobody but root lists the directory), if missing."""
    check_path(host, path, exact_match_ok=True)
    norm = os.path.normpath(path)
    if os.path.exists(norm):
        if not os.path.isdir(norm):
            raise BlockDevError(f"Specified storage dir '{norm}' is not a directory")
        return
    try:
        os.makedirs(norm, 0o711)
    except OSError as err:
        raise BlockDevError(f"Cannot create file storage directory '{norm}':"
                            f" {err.strerror}") from None


def remove_storage_dir(host: Host, path: str) -> None:
    """Remove an instance's file-storage directory; it must be empty."""
    check_path(host, path, exact_match_ok=True)
    norm = os.path.normpath(path)
    if not os.path.exists(norm):
        return
    if not os.path.isdir(norm):
        raise BlockDevError(f"Specified Storage directory '{norm}' is not a directory")
    try:
        os.rmdir(norm)
    except OSError as err:
        raise BlockDevError(f"Cannot remove file storage directory '{norm}':"
                            f" {err.strerror}") from None


def rename_storage_dir(host: Host, old: str, new: str) -> None:
    check_path(host, old, exact_match_ok=True)
    check_path(host, new, exact_match_ok=True)
    old, new = os.path.normpath(old), os.path.normpath(new)
    if os.path.exists(new):
        if os.path.exists(old):
            raise BlockDevError(f"Cannot rename '{old}' to '{new}': both locations exist")
        return
    if not os.path.isdir(old):
        raise BlockDevError(f"Specified storage dir '{old}' is not a directory")
    try:
        os.rename(old, new)
    except OSError as err:
        raise BlockDevError(f"Cannot rename '{old}' to '{new}': {err.strerror}") from None


def space_info(path: str) -> dict[str, object]:
    """Free and total MiB of the filesystem holding `path` (Ganeti's storage info)."""
    try:
        st = os.statvfs(path)
    except OSError as err:
        raise BlockDevError(f"Failed to retrieve file system information about path: {path}"
                            f" - {err.strerror}") from None
    return {"type": "file", "name": path, "storage_size": st.f_frsize * st.f_blocks // MIB,
            "storage_free": st.f_frsize * st.f_bavail // MIB}


class FileStorage(BlockDev):
    """A file disk; `sharedfile` is the same on a directory every node mounts."""

    dev_type = "file"

    def __init__(self, disk: Disk, children: Sequence[BlockDev | None], host: Host) -> None:
        if children:
            raise BlockDevError("Invalid setup for file device: it has no children")
        super().__init__(disk, children, host)
        lid = disk.path_id
        self.driver = lid.driver
        check_path(host, lid.path)
        self.dev_path = lid.path
        self.attach()

    @classmethod
    def create(cls, disk: Disk, children: Sequence[BlockDev | None], host: Host, *,
               excl_stor: bool = False) -> FileStorage:
        if excl_stor:
            raise BlockDevError("file disks cannot be used with exclusive storage")
        path = disk.path_id.path
        check_path(host, path)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as err:
            raise BlockDevError(f"{path}: can't create: {err.strerror}") from None
        try:
            os.ftruncate(fd, disk.size * MIB)
        except OSError as err:
            os.close(fd)
            os.unlink(path)  # made by this call: take it back
            raise BlockDevError(f"{path}: can't create: {err.strerror}") from None
        os.close(fd)
        return cls(disk, children, host)

    def attach(self) -> bool:
        self.attached = os.path.isfile(self.dev_path or "")
        return self.attached

    def _require(self) -> str:
        path = self.dev_path or ""
        if not os.path.isfile(path):
            raise BlockDevError(f"{path}: No such file")
        return path

    def assemble(self) -> None:
        self._require()

    def remove(self) -> None:
        try:
            os.remove(self.dev_path or "")
        except OSError as err:
            if err.errno != errno.ENOENT:
                raise BlockDevError(f"{self.dev_path}: can't remove: {err.strerror}") from None

    def rename(self, new_logical_id: Sequence[object]) -> None:
        path = self._require()
        new_path = str(new_logical_id[1])
        check_path(self.host, new_path)
        try:
            os.rename(path, new_path)
        except OSError as err:
            raise BlockDevError(f"{path}: can't rename to {new_path}: {err.strerror}") from None
        self.dev_path = new_path

    def grow(self, amount: int, *, dryrun: bool, backingstore: bool, excl_stor: bool) -> None:
        if not backingstore or dryrun:
            return
        path = self._require()
        if amount < 0:
            raise BlockDevError(f"{path}: can't grow by negative amount")
        try:
            os.truncate(path, os.stat(path).st_size + amount * MIB)
        except OSError as err:
            raise BlockDevError(f"{path}: can't grow: {err.strerror}") from None

    def actual_size(self) -> int:
        return Path(self._require()).stat().st_size


class SharedFileStorage(FileStorage):
    dev_type = "sharedfile"
