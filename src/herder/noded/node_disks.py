"""The node's disks as the RPC handlers share them: the block-device layer
(`herder.noded.bdev.operations`) on Ganeti's disk objects (`herder.core.diskobjects`), the owner
record, and the disks of an instance as its domain and its OS scripts use them.

No disk lives in noded's state directory: a disk is an LV, a DRBD device, a file under the
cluster's (shared) file-storage directory, an adopted device under /dev/disk or an ExtStorage
volume. noded keeps only the owner record `<state>/disk-map.json` (disk UUID -> instance, size,
device path), so the node knows which instance each disk belongs to (design-monitoring-agent
"Instance disk status propagation").
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec

from herder.core.diskobjects import Disk
from herder.core.errors import HerderError
from herder.core.rpcdefs.disk_calls import Assembled, DiskMapEntry
from herder.core.rpcdefs.payload import InstancePayload
from herder.core.store import atomic_write
from herder.noded import ceph_secret
from herder.noded.bdev import cephclient, operations
from herder.noded.bdev.base import BlockDevError, Host, ImportSink
from herder.noded.bdev.rbd import RadosBlockDevice
from herder.noded.hypervisor import Hypervisor
from herder.noded.kvm.domain import DiskSpec, NetworkSource

log = logging.getLogger("herder.noded")
FILE_STORAGE_PATHS = "/etc/ganeti/file-storage-paths"  # Ganeti's allowed-paths file
ES_LOG_DIR = "/var/log/herder/extstorage"
_owners_decoder = msgspec.json.Decoder(dict[str, DiskMapEntry])


class DiskFailure(HerderError):
    """A disk RPC could not be carried out; the message goes back to the master."""


def bdev_host(local: Callable[[str], Path]) -> Host:
    """This node as the block-device layer sees it; `local` maps an absolute path of the
    node to where it is (tests run nodes under a directory of their own)."""
    log_dir: Path | None = local(ES_LOG_DIR)
    try:
        local(ES_LOG_DIR).mkdir(parents=True, exist_ok=True)
    except OSError:
        log_dir = None  # the scripts' output then goes to noded's log only
    return Host(file_storage_paths_file=local(FILE_STORAGE_PATHS), es_log_dir=log_dir)


class NodeDisks:
    """The node's disks: the block-device layer's `host`, the owner record `map_file`
    (written under `lock`), the hypervisor (rbd disks' libvirt secrets)."""

    def __init__(self, map_file: Path, host: Host, hv: Hypervisor,
                 lock: threading.Lock) -> None:
        self.map_file = map_file
        self.host = host
        self.hv = hv
        self._lock = lock

    # --- the owner record -----------------------------------------------------------------------

    def owners(self) -> dict[str, DiskMapEntry]:
        """disk UUID -> which instance it belongs to, its size, path and type."""
        try:
            return _owners_decoder.decode(self.map_file.read_bytes())
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            return {}

    def note(self, disk: Disk, owner: str | None, path: str | None) -> None:
        if not disk.uuid:
            return
        with self._lock:
            owners = self.owners()
            known = owners.get(disk.uuid)
            entry = DiskMapEntry(instance=owner or (known.instance if known else None),
                                 size=disk.size, path=path, dev_type=disk.dev_type)
            if known != entry:
                owners[disk.uuid] = entry
                self._save(owners)

    def _forget(self, disk: Disk) -> None:
        with self._lock:
            owners = self.owners()
            if disk.uuid and owners.pop(disk.uuid, None) is not None:
                self._save(owners)

    def _save(self, owners: dict[str, DiskMapEntry]) -> None:
        atomic_write(self.map_file, msgspec.json.encode(dict(sorted(owners.items()))), 0o644)

    # --- what several RPCs do -------------------------------------------------------------------

    def assemble(self, disk: Disk, owner: str | None, as_primary: bool,
                 hypervisor: str | None = None) -> Assembled:
        """Bring a disk up: on the primary (device path, userspace URI or None), elsewhere
        true."""
        try:
            result = operations.blockdev_assemble(self.host, disk, as_primary, hypervisor)
        except BlockDevError as err:
            raise DiskFailure(f"assembling {disk.label}: {err}") from None
        if isinstance(result, operations.Assembled):
            self.note(disk, owner, result.dev_path)
            return (result.dev_path, result.uri)
        return result

    def create(self, disk: Disk, owner: str, on_primary: bool, info: str,
               excl_stor: bool) -> list[str | int]:
        try:
            made = operations.blockdev_create(self.host, disk, owner, on_primary, info,
                                              excl_stor)
        except BlockDevError as err:
            raise DiskFailure(f"creating {disk.label} of {owner}: {err}") from None
        self.note(disk, owner, disk.static_dev_path() or disk.file_path())
        return made

    def remove(self, disk: Disk) -> None:
        try:
            operations.blockdev_remove(self.host, disk)
        except BlockDevError as err:
            raise DiskFailure(f"removing {disk.label}: {err}") from None
        self._forget(disk)

    def remove_all(self, disks: list[Disk]) -> None:
        """Remove every disk given (instance_remove, migrate_finish with remove_disks); every
        disk is tried, the errors reported together."""
        errors = []
        for disk in disks:
            try:
                self.remove(disk)
            except DiskFailure as err:
                errors.append(str(err))
        if errors:
            raise DiskFailure("; ".join(errors))

    def device_path(self, disk: Disk, owner: str | None) -> str:
        """The disk's device here, assembled as the primary."""
        assembled = self.assemble(disk, owner, True)
        path = assembled[0] if isinstance(assembled, tuple) else None
        if not path:
            raise DiskFailure(f"{disk.label} has no device on this node")
        return path

    def _device_path(self, disk: Disk, owner: str | None) -> str | None:
        """The assembled disk's device path here; None for a device without one (a userspace
        rbd image or snapshot)."""
        assembled = self.assemble(disk, owner, True)
        return assembled[0] if isinstance(assembled, tuple) else None

    def export_source(self, disk: Disk, owner: str | None) -> str | list[str]:
        """Where the disk's bytes are read here: its device path, or, for a device without
        one (a userspace rbd image or snapshot), the command writing them (Ganeti's
        Export())."""
        path = self._device_path(disk, owner)
        if path:
            return path
        try:
            return operations.blockdev_export_command(self.host, disk)
        except BlockDevError as err:
            raise DiskFailure(str(err)) from None

    def import_target(self, disk: Disk, owner: str | None) -> str | ImportSink:
        """Where a stream of the disk's bytes is written here: its device path, or, for a
        device without one (a userspace rbd image), the command taking them on its stdin
        (Ganeti's Import())."""
        path = self._device_path(disk, owner)
        if path:
            return path
        try:
            return operations.blockdev_import_sink(self.host, disk)
        except BlockDevError as err:
            raise DiskFailure(str(err)) from None

    # --- the seam to the domain -----------------------------------------------------------------

    def instance_disks(self, inst: InstancePayload) -> list[DiskSpec]:
        """The instance's disks on this node as its domain uses them (Ganeti's
        _GatherAndLinkBlockDevs): each disk object of the instance, assembled as the primary
        (idempotent: the master assembled them before a start; a define after a libvirtd
        restart finds them the same way)."""
        specs = []
        for index, disk in enumerate(inst.disks):
            # the userspace URI only where the domain uses it (rbd network disks)
            hypervisor = inst.hypervisor if disk.dev_type == "rbd" else None
            assembled = self.assemble(disk, inst.name, True, hypervisor)
            path, uri = assembled if isinstance(assembled, tuple) else (None, None)
            read_only = disk.mode == "ro"
            if not path and uri and disk.dev_type == "rbd":
                specs.append(DiskSpec(path="", dev_type=disk.dev_type, uuid=disk.uuid or "",
                                      read_only=read_only,
                                      network=self._rbd_network_source(uri)))
                continue
            if not path:
                raise DiskFailure(f"{inst.name}: disk/{index} ({disk.dev_type}) has no "
                                  "device on this node")
            specs.append(DiskSpec(path=path, dev_type=disk.dev_type, uuid=disk.uuid or "",
                                  read_only=read_only))
        return specs

    @contextlib.contextmanager
    def os_disk_paths(self, inst: InstancePayload, *,
                      install: bool = True) -> Iterator[list[tuple[str, str | None]]]:
        """(path, userspace URI) of each disk for the OS scripts: the device or file of each
        disk, and, when the script installs (`install`), for a userspace rbd disk (no device
        on this node) a sparse staging file of its size, put into the image (`rbd import`)
        when the block ends without an error. The staging files are removed either way."""
        specs = self.instance_disks(inst)
        staged: dict[int, Path] = {}
        staging_dir = None
        try:
            for index, spec in enumerate(specs):
                if spec.network is None or not install:
                    continue
                if staging_dir is None:
                    staging_dir = Path(tempfile.mkdtemp(prefix="herder-os-install-"))
                path = staging_dir / f"disk{index}"
                with open(path, "wb") as staging:
                    staging.truncate(inst.disks[index].size * 2**20)
                staged[index] = path
            yield [(str(staged.get(index, spec.path)),
                    f"rbd:{spec.network.name}" if spec.network is not None else None)
                   for index, spec in enumerate(specs)]
            for index, path in staged.items():
                try:
                    RadosBlockDevice(inst.disks[index], [], self.host).install_from(str(path))
                except BlockDevError as err:
                    raise DiskFailure(f"installing disk/{index} into its rbd image: {err}") \
                        from None
        finally:
            if staging_dir is not None:
                shutil.rmtree(staging_dir, ignore_errors=True)

    def _rbd_network_source(self, uri: str) -> NetworkSource:
        """A userspace rbd disk (`rbd:POOL/IMAGE`, Ganeti's URI) as a libvirt network disk:
        the node's monitors, its cephx user and the libvirt secret with the user's key."""
        try:
            client = cephclient.load(self.host)
        except BlockDevError as err:
            raise DiskFailure(f"rbd disk {uri}: {err}") from None
        secret = None
        if self.hv.runs_guests:  # libvirt's test driver opens no disk
            try:
                secret = ceph_secret.ensure(self.hv, client)
            except HerderError as err:
                raise DiskFailure(f"rbd disk {uri}: cannot define the libvirt secret of "
                                  f"{client.entity}: {err}") from None
        return NetworkSource("rbd", uri.removeprefix("rbd:"), client.monitors,
                             auth_username=client.user if secret else None,
                             secret_uuid=secret)
