"""`gluster`: a file on a GlusterFS volume (logical id `[driver, path]` relative to the
volume), mounted by the node at the cluster's Gluster storage directory, as Ganeti.

The volume comes from the disk parameters `host`, `port`, `volume`; the node mounts it with
`mount -t glusterfs -o server-port=PORT HOST:/VOLUME MOUNTPOINT` when it is not mounted and
then treats the disk as a file (create makes missing directories). QEMU can read it directly
(`gluster://HOST:PORT/VOLUME/PATH`). Ganeti runs the mount command through a shell; herder
passes the same words as an argument list.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Sequence

from herder.core import paths
from herder.core.diskobjects import Disk
from herder.noded.bdev.base import BlockDev, BlockDevError, Host, check
from herder.noded.bdev.file import MIB


class GlusterVolume:
    def __init__(self, host: Host, server: str, port: int, volume: str) -> None:
        if not 0 < port < 65536:
            raise BlockDevError(f"Invalid Gluster port {port}")
        self.host, self.server, self.port, self.volume = host, server, port, volume
        self.mount_point = str(host.gluster_mount_point)

    def is_mounted(self) -> bool:
        return os.path.ismount(self.mount_point)

    def mount(self) -> None:
        if self.is_mounted():
            return
        os.makedirs(self.mount_point, exist_ok=True)
        argv = ["mount", "-t", "glusterfs", "-o", f"server-port={self.port}",
                f"{self.server}:/{self.volume}", self.mount_point]
        result = self.host.run(argv, cwd=self.mount_point)
        if not self.is_mounted():
            raise BlockDevError(f"{self.mount_point!r}: mount failure: {result.last_lines()};"
                                f" try running 'gluster volume info {self.volume}' on"
                                f" {self.server} to ensure it exists, it is started and it"
                                " is using the tcp transport")

    def kvm_uri(self, path: str) -> str:
        server = self.server
        try:
            if ipaddress.ip_address(server).version == 6:
                server = f"[{server}]"
        except ValueError:
            pass
        return f"gluster://{server}:{self.port}/{self.volume}/{path}"


def _volume(host: Host, disk: Disk) -> GlusterVolume:
    params = disk.params
    return GlusterVolume(host, str(params.get("host", "127.0.0.1")),
                         int(params.get("port", 24007)), str(params.get("volume", "gv0")))


def _inside(mount_point: str, path: str) -> str:
    """The disk file `path` (relative to the volume) under its mount point, never outside."""
    try:
        return str(paths.child(mount_point, *[part for part in path.split("/") if part],
                               what="gluster disk path"))
    except paths.UnsafeName as err:
        raise BlockDevError(str(err)) from None


class GlusterStorage(BlockDev):
    dev_type = "gluster"

    def __init__(self, disk: Disk, children: Sequence[BlockDev | None], host: Host) -> None:
        if children:
            raise BlockDevError("Invalid setup for gluster device: it has no children")
        super().__init__(disk, children, host)
        self.path = disk.path_id.path
        self.volume = _volume(host, disk)
        self.full_path = _inside(self.volume.mount_point, self.path)
        self.attach()

    @classmethod
    def create(cls, disk: Disk, children: Sequence[BlockDev | None], host: Host, *,
               excl_stor: bool = False) -> GlusterStorage:
        if excl_stor:
            raise BlockDevError("Gluster disks cannot be used with exclusive storage")
        volume = _volume(host, disk)
        volume.mount()
        full_path = _inside(volume.mount_point, disk.path_id.path)
        os.makedirs(os.path.dirname(full_path), exist_ok=True)
        try:
            fd = os.open(full_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as err:
            raise BlockDevError(f"{full_path}: can't create: {err.strerror}") from None
        try:
            os.ftruncate(fd, disk.size * MIB)
        except OSError as err:
            os.unlink(full_path)
            raise BlockDevError(f"{full_path}: can't create: {err.strerror}") from None
        finally:
            os.close(fd)
        return cls(disk, children, host)

    def attach(self) -> bool:
        self.volume.mount()
        self.dev_path = self.full_path
        self.attached = os.path.isfile(self.full_path)
        return self.attached

    def assemble(self) -> None:
        if not os.path.isfile(self.full_path):
            raise BlockDevError(f"{self.full_path}: No such file")

    def shutdown(self) -> None:
        self.dev_path = None
        self.attached = False

    def remove(self) -> None:
        self.volume.mount()
        try:
            os.remove(self.full_path)
        except FileNotFoundError:
            pass
        except OSError as err:
            raise BlockDevError(f"{self.full_path}: can't remove: {err.strerror}") from None
        finally:
            check(self.host.run(["umount", self.volume.mount_point]), "gluster umount failed")

    def grow(self, amount: int, *, dryrun: bool, backingstore: bool, excl_stor: bool) -> None:
        if not backingstore or dryrun:
            return
        if amount < 0:
            raise BlockDevError(f"{self.full_path}: can't grow by negative amount")
        try:
            os.truncate(self.full_path, os.stat(self.full_path).st_size + amount * MIB)
        except OSError as err:
            raise BlockDevError(f"{self.full_path}: can't grow: {err.strerror}") from None

    def userspace_uri(self, hypervisor: str) -> str:
        if hypervisor != "kvm":
            raise BlockDevError(f"Hypervisor {hypervisor} doesn't support Gluster userspace"
                                " access")
        return self.volume.kvm_uri(self.path)
