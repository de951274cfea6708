"""`rbd`: a Ceph RADOS block device image (logical id `[driver, image]`, the pool from the
disk parameter `pool`), through the `rbd` tool with Ganeti 3.0.2's command lines.

create: `rbd create -p POOL NAME --size MIB`; attach: find the mapping (`rbd showmapped
--format json`, falling back to the plain listing `rbd showmapped -p POOL`) or `rbd map -p POOL
NAME`; shutdown: `rbd unmap DEV`; remove: unmap, `rbd rm -p POOL NAME`; grow: `rbd resize`.
QEMU can read the image itself (`rbd:POOL/NAME`).

Snapshots (herder's, compat B57/B63): `rbd snap create POOL/NAME@SNAP`; the snapshot is a
device of its own, logical id `[driver, NAME@SNAP]`, never mapped, removed with `rbd snap rm`;
`rbd snap rollback` only while no client watches the image (`rbd status`: neither a node's
kernel map nor a QEMU's librbd has it open), as a rollback under an open image would be undone
by the client's cache.

Deviations (docs/compat.md B7, B50-B56): with the disk parameter `access=userspace` nothing
is mapped (a node without the rbd kernel module, such as this project's test machines, still
serves the image to QEMU through librbd); attach then checks the image with `rbd info`. A
`kernelspace` map on a node without the module is refused in one line naming the cause. The
OS is installed into a userspace image from a staging file (`install_from`: `rbd import` under
a temporary name, then the image swapped in), as the OS scripts need a path to write to. An
import from another node or an export streams into `rbd import -p POOL - NAME` (Ganeti's
Import(), `import_sink`), under a temporary name swapped in the same way (compat B67). A
temporary name carries this node's tag (`IMAGE.import-NODETAG-XXXXXXXX`): a noded that died
mid-import leaves its temporary image behind, and the next import on that node removes those
of its own tag made before the daemon started that no import holds open (`rbd status`) nor
this daemon writes (`_sweep_stale_imports`); another node's are never touched.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import secrets
import socket
import time
from collections.abc import Sequence

from herder.core.diskobjects import Disk
from herder.noded.bdev.base import BlockDev, BlockDevError, Host, ImportSink, check

log = logging.getLogger("herder.noded")

RBD = "rbd"
RBD_SYSFS = "/sys/bus/rbd"  # there when the rbd kernel module is loaded
NO_KERNEL_MODULE = ("the rbd kernel module is not available on this node (no /sys/bus/rbd):"
                    " use the disk parameter access=userspace (QEMU reads the image through"
                    " librbd)")


def parse_showmapped_json(output: str, pool: str, image: str) -> str | None:
    """The device of `pool/image` in `rbd showmapped --format json`, or None."""
    try:
        devices = json.loads(output)
    except ValueError as err:
        raise BlockDevError(f"Unable to parse rbd showmapped JSON: {err}") from None
    if isinstance(devices, dict):
        devices = list(devices.values())
    found = None
    for entry in devices:
        if "name" not in entry or "pool" not in entry:
            raise BlockDevError(f"'name' or 'pool' key missing from rbd showmapped entry"
                                f" {entry}")
        if entry["name"] == image and entry["pool"] == pool:
            if found is not None:
                raise BlockDevError(f"rbd volume {image} is mapped more than once")
            found = entry["device"]
    return found


def parse_showmapped_plain(output: str, image: str) -> str | None:
    """The device of `image` in the plain `rbd showmapped` table (id pool image snap device)."""
    rows = [line.split() for line in output.splitlines()]
    if not rows:
        return None
    if len(rows[0]) != 5:
        rows = [line.split("\t") for line in output.splitlines()]
        if len(rows[0]) != 5:
            raise BlockDevError(f"Cannot parse rbd showmapped output: expected 5 fields,"
                                f" found {len(rows[0])}")
    matches = [row for row in rows if len(row) == 5 and row[2] == image]
    if len(matches) > 1:
        raise BlockDevError(f"rbd volume {image} mapped more than once")
    return matches[0][4] if matches else None


def node_tag() -> str:
    """This node's tag in its temporary import images' names (its host name hashed: a
    simulated or real node has its own), so a sweep removes only what this node left."""
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def _rbd_time(text: str) -> float | None:
    """`rbd info`'s `create_timestamp` (ctime's form in local time, as `rbd` prints it) as
    seconds since the epoch; None when it is not in that form."""
    try:
        return time.mktime(time.strptime(text, "%a %b %d %H:%M:%S %Y"))
    except (ValueError, OverflowError):
        return None


def watchers(host: Host, pool: str, image: str) -> list[str]:
    """The clients that have `pool/image` open (`rbd status`: kernel maps and librbd users
    alike), by address."""
    result = check(host.run([RBD, "status", "--format", "json", f"{pool}/{image}"]),
                   f"rbd status of {pool}/{image} failed")
    try:
        status = json.loads(result.stdout)
        return [str(watcher.get("address", "?")) for watcher in status.get("watchers", [])]
    except (ValueError, AttributeError) as err:
        raise BlockDevError(f"Unable to parse rbd status JSON of {pool}/{image}: {err}") \
            from None


def rollback(host: Host, disk: Disk, snap_name: str) -> None:
    """The image takes the content of its snapshot `snap_name` (`rbd snap rollback`), refused
    while any client has the image open. The device is not attached for it (a kernelspace
    attach would map it)."""
    pool, image = str(disk.params.get("pool", "rbd")), disk.ext_id.name
    users = watchers(host, pool, image)
    if users:
        raise BlockDevError(f"rbd image {pool}/{image} is open by {', '.join(users)}: it can"
                            " be rolled back only while no node uses it")
    check(host.run([RBD, "snap", "rollback", "--no-progress", f"{pool}/{image}@{snap_name}"],
                   timeout=max(600.0, disk.size / 16)),  # >= 16 MiB/s
          f"rbd snap rollback of {pool}/{image} to {snap_name} failed")


class RadosBlockDevice(BlockDev):
    dev_type = "rbd"

    def __init__(self, disk: Disk, children: Sequence[BlockDev | None], host: Host) -> None:
        super().__init__(disk, children, host)
        self.image = disk.ext_id.name
        self.pool = str(disk.params.get("pool", "rbd"))
        # a snapshot (`image@snap`) is only ever read through librbd: never mapped
        self.is_snapshot = "@" in self.image
        self.userspace = disk.params.get("access") == "userspace" or self.is_snapshot
        self.attach()

    @classmethod
    def create(cls, disk: Disk, children: Sequence[BlockDev | None], host: Host, *,
               excl_stor: bool = False) -> RadosBlockDevice:
        if excl_stor:
            raise BlockDevError("RBD disks cannot be used with exclusive storage")
        pool = str(disk.params.get("pool", "rbd"))
        check(host.run([RBD, "create", "-p", pool, disk.ext_id.name, "--size", str(disk.size)]),
              "rbd creation failed")
        try:
            return cls(disk, children, host)
        except BlockDevError:
            host.run([RBD, "rm", "-p", pool, disk.ext_id.name])  # nothing half-created
            raise

    def _mapped_device(self) -> str | None:
        result = self.host.run([RBD, "showmapped", "--format", "json"])
        if not result.failed:
            return parse_showmapped_json(result.stdout, self.pool, self.image)
        result = check(self.host.run([RBD, "showmapped", "-p", self.pool]),
                       "rbd showmapped failed")
        return parse_showmapped_plain(result.stdout, self.image)

    def attach(self) -> bool:
        self.attached = False
        if self.userspace:
            self.dev_path = None
            self.attached = self.image_exists()
            return self.attached
        device = self._mapped_device()
        if device is None:
            result = self.host.run([RBD, "map", "-p", self.pool, self.image])
            if result.failed and not self.host.exists(RBD_SYSFS):
                raise BlockDevError(f"rbd map of {self.pool}/{self.image} failed:"
                                    f" {NO_KERNEL_MODULE}")
            check(result, "rbd map failed")
            device = self._mapped_device()
            if device is None:
                raise BlockDevError(f"rbd map succeeded, but could not find the rbd block"
                                    f" device in output of showmapped, for volume: {self.image}")
        self.dev_path = device
        numbers = self.host.block_device_numbers(device)
        if numbers is None:
            return False
        self.major, self.minor = numbers
        self.attached = True
        return True

    def image_exists(self) -> bool:
        """`rbd info`: True when the image is there, False when the pool says it is not;
        any other failure (no monitor, no permission) is an error, never "absent"."""
        result = self.host.run([RBD, "info", "-p", self.pool, self.image])
        if not result.failed:
            return True
        # an absent image, or an absent snapshot of a present one
        if re.search(r"error (opening image|setting snapshot context).*\(2\) No such file or"
                     r" directory", result.output):
            return False
        raise BlockDevError(f"rbd info of {self.pool}/{self.image} failed:"
                            f" {result.fail_reason}: {result.last_lines()}")

    def install_from(self, path: str) -> None:
        """Put the bytes of the file `path` (what the OS scripts wrote) into the image:
        `rbd import` under a temporary name (sparse: zero blocks are not written), then the
        image removed and the import renamed to it. A failed import leaves the image as it
        was."""
        staged = self._staged_name()
        try:
            result = self.host.run([RBD, "import", "--no-progress", "--dest-pool", self.pool,
                                    path, staged],
                                   timeout=max(600.0, self.size / 16))  # >= 16 MiB/s
            if result.failed:
                self._remove_staged(staged)
                check(result, f"rbd import into {self.pool}/{self.image} failed")
            self._swap_in(staged)
        finally:
            self.host.imports_under_way.discard(f"{self.pool}/{staged}")

    def _staged_name(self) -> str:
        """A new temporary import image's name, recorded as this daemon's own while it is
        written (the caller discards it from `imports_under_way` at the end), after the
        pool's stale ones of this node were swept."""
        self._sweep_stale_imports()
        staged = f"{self.image}.import-{node_tag()}-{secrets.token_hex(4)}"
        self.host.imports_under_way.add(f"{self.pool}/{staged}")
        return staged

    def _sweep_stale_imports(self) -> None:
        """Remove the temporary import images of this node in the pool that a daemon which
        died mid-import left: made before this daemon started (whole seconds: `rbd info`'s
        resolution), written by none of its imports, and open in no client (`rbd status`:
        a running `rbd import` has its image open). Best effort: a sweep that cannot ask
        Ceph leaves them and never fails the import."""
        pattern = re.compile(rf".+\.import-{node_tag()}-[0-9a-f]{{8}}")
        listed = self.host.run([RBD, "ls", "--format", "json", "-p", self.pool])
        try:
            names = [str(name) for name in json.loads(listed.stdout)] if not listed.failed \
                else []
        except (ValueError, TypeError):
            names = []
        own = frozenset(self.host.imports_under_way)
        for name in names:
            if not pattern.fullmatch(name) or f"{self.pool}/{name}" in own:
                continue
            try:
                created = _rbd_time(str(json.loads(check(
                    self.host.run([RBD, "info", "--format", "json", "-p", self.pool, name]),
                    f"rbd info of {self.pool}/{name} failed").stdout)["create_timestamp"]))
                if created is None or created + 1 > self.host.started \
                        or watchers(self.host, self.pool, name):
                    continue
            except (BlockDevError, ValueError, KeyError, TypeError):
                continue  # gone meanwhile, or Ceph could not say: left for the next sweep
            log.warning("removing %s/%s, a temporary import image a node daemon that died "
                        "mid-import left", self.pool, name)
            self._remove_staged(name)

    def _remove_staged(self, staged: str) -> None:
        """An import's image removed (absent when its `rbd import` never created it)."""
        self.host.run([RBD, "rm", "--no-progress", "-p", self.pool, staged])

    def _swap_in(self, staged: str) -> None:
        """The image removed and the finished import `staged` renamed to it; a failed
        removal leaves the image and drops the import."""
        removed = self.host.run([RBD, "rm", "--no-progress", "-p", self.pool, self.image])
        if removed.failed:
            self._remove_staged(staged)
            check(removed, f"rbd rm of {self.pool}/{self.image} (to swap in its import) failed")
        check(self.host.run([RBD, "rename", "-p", self.pool, staged, self.image]),
              f"rbd rename of the import {self.pool}/{staged} to {self.image} failed (the"
              " imported image is under the import's name)")

    def _image_bytes(self, name: str) -> int:
        result = check(self.host.run([RBD, "info", "--format", "json", "-p", self.pool, name]),
                       f"rbd info of {self.pool}/{name} failed")
        try:
            return int(json.loads(result.stdout)["size"])
        except (ValueError, KeyError, TypeError) as err:
            raise BlockDevError(f"Unable to parse rbd info JSON of {self.pool}/{name}: {err}") \
                from None

    def import_sink(self) -> ImportSink:
        """Ganeti's RADOSBlockDevice.Import (`rbd import -p POOL - NAME`: a new image from
        stdin), into a temporary name rather than over the removed image (compat B67): a
        stream that fails or is cut leaves the image as it was, and the import is swapped in
        only once `rbd import` ended well. An import shorter than the disk (an OS import
        script that wrote less) is grown to the disk's size; a longer one is refused."""
        if self.is_snapshot:
            raise BlockDevError(f"rbd snapshot {self.pool}/{self.image} cannot be written")
        if not self.attached and not self.attach():
            raise BlockDevError(f"Can't attach to rbd device {self.image} during Import()")
        staged = self._staged_name()
        argv = [RBD, "import", "--no-progress", "-p", self.pool, "-", staged]
        disk_bytes = self.size * 2**20

        def finish() -> None:
            try:
                written = self._image_bytes(staged)
                if written > disk_bytes:
                    raise BlockDevError(f"the import into {self.pool}/{self.image} holds "
                                        f"{written} bytes, more than the disk's {disk_bytes}")
                if written < disk_bytes:
                    check(self.host.run([RBD, "resize", "--no-progress", "-p", self.pool,
                                         staged, "--size", str(self.size)]),
                          f"rbd resize of the import {self.pool}/{staged} failed")
            except BlockDevError:
                self._remove_staged(staged)
                raise
            self._swap_in(staged)

        def finished() -> None:
            try:
                finish()
            finally:
                self.host.imports_under_way.discard(f"{self.pool}/{staged}")

        def discard() -> None:
            try:
                self._remove_staged(staged)
            finally:
                self.host.imports_under_way.discard(f"{self.pool}/{staged}")

        return ImportSink(argv=argv, start=lambda stderr: self.host.open_sink(argv, stderr),
                          finish=finished, discard=discard,
                          what=f"rbd image {self.pool}/{self.image}")

    def shutdown(self) -> None:
        if self.userspace:
            return
        if not self.minor and not self.attach():
            return
        device = self._mapped_device()
        if device:
            check(self.host.run([RBD, "unmap", device]), "rbd unmap failed")
        self.minor = None
        self.dev_path = None

    def remove(self) -> None:
        if not self.minor and not self.attach():
            return
        if self.is_snapshot:
            check(self.host.run([RBD, "snap", "rm", "--no-progress",
                                 f"{self.pool}/{self.image}"]), "rbd snap rm failed")
            return
        self.shutdown()
        check(self.host.run([RBD, "rm", "-p", self.pool, self.image]),
              "Can't remove Volume from cluster with rbd rm")

    def rename(self, new_logical_id: Sequence[object]) -> None:
        """RBD images keep their names (as in Ganeti)."""

    def grow(self, amount: int, *, dryrun: bool, backingstore: bool, excl_stor: bool) -> None:
        if not backingstore:
            return
        if not self.attach():
            raise BlockDevError(f"Can't attach to rbd device {self.image} during grow")
        if dryrun:
            return
        check(self.host.run([RBD, "resize", "-p", self.pool, self.image, "--size",
                             str(self.size + amount)]), "rbd resize failed")

    def snapshot(self, snap_name: str | None, snap_size: int | None) -> list[object]:
        """`rbd snap create`; the answer is the snapshot's logical id, `[driver, image@snap]`.
        An rbd snapshot is copy-on-write: a `snap_size` other than the image's is refused."""
        if self.is_snapshot:
            raise BlockDevError(f"rbd snapshot {self.pool}/{self.image} cannot be snapshotted")
        if snap_size is not None and snap_size != self.size:
            raise BlockDevError(f"rbd snapshots are copy-on-write: a snapshot size ({snap_size}"
                                f" MiB) other than the image's ({self.size} MiB) does not apply")
        snap_name = snap_name or "snap"
        check(self.host.run([RBD, "snap", "create", "--no-progress",
                             f"{self.pool}/{self.image}@{snap_name}"]),
              f"rbd snap create of {self.pool}/{self.image}@{snap_name} failed")
        return [self.disk.ext_id.provider, f"{self.image}@{snap_name}"]

    def export_command(self) -> list[str]:
        """Ganeti's RADOSBlockDevice.Export (`rbd export -p POOL NAME -`): how a userspace
        image or a snapshot (`NAME@SNAP`), never mapped, is read."""
        if not self.attached and not self.attach():
            raise BlockDevError(f"Can't attach to rbd device {self.image} during Export()")
        return [RBD, "export", "--no-progress", "-p", self.pool, self.image, "-"]

    def userspace_uri(self, hypervisor: str) -> str:
        if hypervisor != "kvm":
            raise BlockDevError(f"Hypervisor {hypervisor} doesn't support RBD userspace access")
        return f"rbd:{self.pool}/{self.image}"
