"""noded's disk RPCs (Ganeti's names and arguments): `blockdev_*`, `drbd_*` and the file-storage
directories, carried out by the block-device layer (`herder.noded.bdev.operations`) on Ganeti's
disk objects (`herder.core.diskobjects` builds them on the master).

No disk lives in noded's state directory: a disk is an LV, a DRBD device, a file under the
cluster's (shared) file-storage directory, an adopted device under /dev/disk or an ExtStorage
volume. noded keeps only the owner record `<state>/disk-map.json` (disk UUID -> instance, size,
device path), so the node knows which instance each disk belongs to (design-monitoring-agent
"Instance disk status propagation").
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from herder.core.errors import HerderError
from herder.core.store import atomic_write
from herder.noded import ceph_secret, disk_transfer
from herder.noded.bdev import cephclient, operations, plain
from herder.noded.bdev import file as file_storage
from herder.noded.bdev.base import BlockDevError, Host, SyncStatus
from herder.noded.bdev.disk import Disk, decode_disk
from herder.noded.bdev.rbd import RadosBlockDevice
from herder.noded.kvm.domain import DiskSpec, NetworkSource

log = logging.getLogger("herder.noded")
FILE_STORAGE_PATHS = "/etc/ganeti/file-storage-paths"  # Ganeti's allowed-paths file
ES_LOG_DIR = "/var/log/herder/extstorage"


class DiskFailure(HerderError):
    """A disk RPC could not be carried out; the message goes back to the master."""


def bdev_host(local: Any) -> Host:
    """This node as the block-device layer sees it; `local` maps an absolute path of the
    node to where it is (tests run nodes under a directory of their own)."""
    log_dir: Path | None = Path(local(ES_LOG_DIR))
    try:
        Path(local(ES_LOG_DIR)).mkdir(parents=True, exist_ok=True)
    except OSError:
        log_dir = None  # the scripts' output then goes to noded's log only
    return Host(file_storage_paths_file=Path(local(FILE_STORAGE_PATHS)), es_log_dir=log_dir)


def _disk(data: Any) -> Disk:
    return decode_disk(data)


class DiskRpcs:
    """Mixed into `NodeDaemon`, which sets these."""

    settings: Any
    bdev: Host
    imports: disk_transfer.Imports
    trust: Any  # noded.trust.NodeTrust: this node's certificate and the cluster CA
    hv: Any  # noded.hypervisor.Hypervisor: the node's libvirt (rbd disks' secrets)
    _map_lock: threading.Lock

    # --- the owner record -----------------------------------------------------------------------

    @property
    def disk_map_file(self) -> Path:
        return Path(self.settings.state_dir) / "disk-map.json"

    def disk_map(self) -> dict[str, dict[str, Any]]:
        """disk UUID -> {instance, size, path, dev_type}: which instance each local disk
        belongs to."""
        try:
            data = json.loads(self.disk_map_file.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _note_disk(self, disk: Disk, owner: str | None, path: str | None) -> None:
        if not disk.uuid:
            return
        with self._map_lock:
            disk_map = self.disk_map()
            entry = {"instance": owner or disk_map.get(disk.uuid, {}).get("instance"),
                     "size": disk.size, "path": path, "dev_type": disk.dev_type}
            if disk_map.get(disk.uuid) != entry:
                disk_map[disk.uuid] = entry
                self._save_map(disk_map)

    def _forget_disk(self, disk: Disk) -> None:
        with self._map_lock:
            disk_map = self.disk_map()
            if disk.uuid and disk_map.pop(disk.uuid, None) is not None:
                self._save_map(disk_map)

    def _save_map(self, disk_map: dict[str, dict[str, Any]]) -> None:
        atomic_write(self.disk_map_file, json.dumps(disk_map, sort_keys=True).encode(), 0o644)

    def rpc_disk_map(self, args: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return self.disk_map()

    # --- Ganeti's blockdev_* RPCs ---------------------------------------------------------------

    def rpc_blockdev_create(self, args: dict[str, Any]) -> list[Any]:
        """Make one disk (its children must exist; Ganeti's BlockdevCreate): `disk`, `size`,
        `owner` (the instance), `on_primary`, `info`, `excl_stor`. Returns its logical id."""
        disk = _disk(args["disk"])
        owner = str(args.get("owner") or "")
        try:
            made = operations.blockdev_create(self.bdev, disk, owner,
                                              bool(args.get("on_primary", True)),
                                              str(args.get("info") or ""),
                                              bool(args.get("excl_stor", False)))
        except BlockDevError as err:
            raise DiskFailure(f"creating {disk.iv_name or disk.dev_type} of {owner}: "
                              f"{err}") from None
        self._note_disk(disk, owner, disk.static_dev_path() or _path_of(disk))
        return made

    def rpc_blockdev_remove(self, args: dict[str, Any]) -> None:
        disk = _disk(args["disk"])
        try:
            operations.blockdev_remove(self.bdev, disk)
        except BlockDevError as err:
            raise DiskFailure(f"removing {disk.iv_name or disk.dev_type}: {err}") from None
        self._forget_disk(disk)

    def rpc_blockdev_assemble(self, args: dict[str, Any]) -> Any:
        """Bring a disk up: `disk`, `instance` (its name), `as_primary`, `idx`. On the primary
        [device path, userspace URI or None]; elsewhere true."""
        disk = _disk(args["disk"])
        as_primary = bool(args.get("as_primary", True))
        try:
            result = operations.blockdev_assemble(self.bdev, disk, as_primary,
                                                  args.get("hypervisor"))
        except BlockDevError as err:
            raise DiskFailure(f"assembling {disk.iv_name or disk.dev_type}: {err}") from None
        if isinstance(result, operations.Assembled):
            self._note_disk(disk, args.get("instance"), result.dev_path)
            return [result.dev_path, result.uri]
        return result

    def rpc_blockdev_shutdown(self, args: dict[str, Any]) -> None:
        disk = _disk(args["disk"])
        try:
            operations.blockdev_shutdown(self.bdev, disk)
        except BlockDevError as err:
            raise DiskFailure(f"shutting down {disk.iv_name or disk.dev_type}: {err}") from None

    def rpc_blockdev_find(self, args: dict[str, Any]) -> list[object] | None:
        """Ganeti's BlockDevStatus of the disk, or None when it is not assembled here."""
        try:
            status = operations.blockdev_find(self.bdev, _disk(args["disk"]))
        except BlockDevError as err:
            raise DiskFailure(str(err)) from None
        return None if status is None else status.to_ganeti()

    def rpc_blockdev_getmirrorstatus(self, args: dict[str, Any]) -> list[list[object]]:
        try:
            found = operations.blockdev_getmirrorstatus(
                self.bdev, [_disk(d) for d in args.get("disks", [])])
        except BlockDevError as err:
            raise DiskFailure(str(err)) from None
        return [status.to_ganeti() for status in found]

    def rpc_blockdev_getmirrorstatus_multi(self, args: dict[str, Any]) -> list[list[object]]:
        """Per disk [true, Ganeti's BlockDevStatus] or [false, why]: `cluster verify`'s
        question, which one missing device does not spoil for the others."""
        found = operations.blockdev_getmirrorstatus_multi(
            self.bdev, [_disk(d) for d in args.get("disks", [])])
        return [[ok, status.to_ganeti() if isinstance(status, SyncStatus) else status]
                for ok, status in found]

    def rpc_lv_list(self, args: dict[str, Any]) -> dict[str, list[object]]:
        """Ganeti's lv_list: `vg/lv` -> [size, inactive, online] of the VGs `vg_names`
        (every VG when empty)."""
        try:
            return plain.volume_list(self.bdev, [str(vg) for vg in args.get("vg_names", [])])
        except BlockDevError as err:
            raise DiskFailure(str(err)) from None

    def rpc_vg_list(self, args: dict[str, Any]) -> dict[str, int]:
        """Ganeti's vg_list: VG name -> size in MiB (replace-disks' volume group check)."""
        try:
            return plain.volume_groups(self.bdev)
        except BlockDevError as err:
            raise DiskFailure(str(err)) from None

    def rpc_drbd_needs_activation(self, args: dict[str, Any]) -> list[str]:
        """Ganeti's: the UUIDs of the given DRBD disks that need activate-disks here."""
        try:
            return operations.drbd_needs_activation(self.bdev,
                                                    [_disk(d) for d in args["disks"]])
        except BlockDevError as err:
            raise DiskFailure(str(err)) from None

    def rpc_blockdev_grow(self, args: dict[str, Any]) -> None:
        disk = _disk(args["disk"])
        try:
            operations.blockdev_grow(self.bdev, disk, int(args["amount"]),
                                     bool(args.get("dryrun", False)),
                                     bool(args.get("backingstore", True)),
                                     bool(args.get("excl_stor", False)))
        except BlockDevError as err:
            raise DiskFailure(f"growing {disk.iv_name or disk.dev_type}: {err}") from None

    def rpc_blockdev_rename(self, args: dict[str, Any]) -> None:
        """`devlist`: [[disk, new logical id], ...]."""
        try:
            operations.blockdev_rename(self.bdev, [(_disk(pair[0]), list(pair[1]))
                                                   for pair in args.get("devlist", [])])
        except BlockDevError as err:
            raise DiskFailure(str(err)) from None

    def rpc_blockdev_wipe(self, args: dict[str, Any]) -> None:
        try:
            operations.blockdev_wipe(self.bdev, _disk(args["disk"]), int(args["offset"]),
                                     int(args["size"]))
        except BlockDevError as err:
            raise DiskFailure(str(err)) from None

    def rpc_blockdev_setinfo(self, args: dict[str, Any]) -> None:
        try:
            operations.blockdev_setinfo(self.bdev, _disk(args["disk"]), str(args["info"]))
        except BlockDevError as err:
            raise DiskFailure(str(err)) from None

    def rpc_blockdev_open(self, args: dict[str, Any]) -> list[str | None]:
        try:
            return operations.blockdev_open(self.bdev, [_disk(d) for d in args["disks"]],
                                            bool(args.get("exclusive", True)))
        except BlockDevError as err:
            raise DiskFailure(str(err)) from None

    def rpc_blockdev_close(self, args: dict[str, Any]) -> None:
        try:
            operations.blockdev_close(self.bdev, [_disk(d) for d in args["disks"]])
        except BlockDevError as err:
            raise DiskFailure(str(err)) from None

    def rpc_blockdev_addchildren(self, args: dict[str, Any]) -> None:
        """`disk`: the DRBD disk; `ndevs`: the LVs to attach as its data and metadata."""
        try:
            operations.blockdev_addchildren(self.bdev, _disk(args["disk"]),
                                            [_disk(d) for d in args["ndevs"]])
        except BlockDevError as err:
            raise DiskFailure(str(err)) from None

    def rpc_blockdev_removechildren(self, args: dict[str, Any]) -> None:
        try:
            operations.blockdev_removechildren(self.bdev, _disk(args["disk"]),
                                               [_disk(d) for d in args["ndevs"]])
        except BlockDevError as err:
            raise DiskFailure(str(err)) from None

    # --- DRBD -----------------------------------------------------------------------------------

    def rpc_drbd_disconnect_net(self, args: dict[str, Any]) -> None:
        try:
            operations.drbd_disconnect_net(self.bdev, [_disk(d) for d in args["disks"]])
        except BlockDevError as err:
            raise DiskFailure(str(err)) from None

    def rpc_drbd_attach_net(self, args: dict[str, Any]) -> None:
        try:
            operations.drbd_attach_net(self.bdev, [_disk(d) for d in args["disks"]],
                                       bool(args.get("multimaster", False)))
        except BlockDevError as err:
            raise DiskFailure(str(err)) from None

    def rpc_drbd_wait_sync(self, args: dict[str, Any]) -> list[object]:
        try:
            done, percent = operations.drbd_wait_sync(self.bdev,
                                                      [_disk(d) for d in args["disks"]])
        except BlockDevError as err:
            raise DiskFailure(str(err)) from None
        return [done, percent]

    # --- the file-storage directories (Ganeti's file_storage_dir_*) -----------------------------

    def rpc_file_storage_dir_create(self, args: dict[str, Any]) -> None:
        try:
            file_storage.create_storage_dir(self.bdev, str(args["file_storage_dir"]))
        except BlockDevError as err:
            raise DiskFailure(str(err)) from None

    def rpc_file_storage_dir_remove(self, args: dict[str, Any]) -> None:
        try:
            file_storage.remove_storage_dir(self.bdev, str(args["file_storage_dir"]))
        except BlockDevError as err:
            raise DiskFailure(str(err)) from None

    def rpc_file_storage_dir_rename(self, args: dict[str, Any]) -> None:
        try:
            file_storage.rename_storage_dir(self.bdev, str(args["old_file_storage_dir"]),
                                            str(args["new_file_storage_dir"]))
        except BlockDevError as err:
            raise DiskFailure(str(err)) from None

    # --- copying a disk to another node (noded/disk_transfer.py) -------------------------------

    def _device_path(self, data: Any, owner: Any) -> tuple[Disk, str]:
        disk = _disk(data)
        assembled = self.rpc_blockdev_assemble({"disk": data, "instance": owner,
                                                "as_primary": True})
        path = assembled[0] if isinstance(assembled, list) else None
        if not path:
            raise DiskFailure(f"{disk.iv_name or disk.dev_type} has no device on this node")
        return disk, str(path)

    def os_stream(self, inst: dict[str, Any], script: Any, index: int,
                  device: str) -> disk_transfer.OsStream:
        raise NotImplementedError  # NodeDaemon's

    def rpc_blockdev_import_prepare(self, args: dict[str, Any]) -> dict[str, Any]:
        """Expect a disk's bytes from another node: its device assembled here, a one-time
        token for `POST /import/<token>`. With `os_instance` (an import from an export) the
        bytes go through the instance's OS `import` script, which writes the device."""
        disk, path = self._device_path(args["disk"], args.get("instance"))
        if args.get("os_instance"):
            script = self.os_stream(args["os_instance"], "import", int(args.get("idx", 0)),
                                    path)
            return {"token": self.imports.add(path, sys.maxsize, script=script)}
        return {"token": self.imports.add(path, disk.size * 2**20)}

    def rpc_blockdev_export(self, args: dict[str, Any]) -> dict[str, Any]:
        """Send a disk's bytes to another node's prepared import (`target`: address, port;
        `token`); the bytes and checksum the target confirmed. With `os_instance` (an export)
        the bytes are what the instance's OS `export` script writes of the device."""
        disk, path = self._device_path(args["disk"], args.get("instance"))
        target = args["target"]
        url, context = disk_transfer.import_url(self.trust, target, str(args["token"]))
        try:
            if args.get("os_instance"):
                script = self.os_stream(args["os_instance"], "export",
                                        int(args.get("idx", 0)), path)
                return disk_transfer.send_through_script(script, url, context)
            return disk_transfer.send(path, disk.size * 2**20, url, context)
        except disk_transfer.TransferError as err:
            raise DiskFailure(f"copying {disk.iv_name or disk.dev_type} to "
                              f"{target['address']}: {err}") from None

    # --- the seam to the domain -----------------------------------------------------------------

    def instance_disks(self, inst: dict[str, Any]) -> list[DiskSpec]:
        """The instance's disks on this node as its domain uses them (Ganeti's
        _GatherAndLinkBlockDevs): each disk object of the instance, assembled as the primary
        (idempotent: the master assembled them before a start; a define after a libvirtd
        restart finds them the same way)."""
        specs = []
        for index, data in enumerate(inst.get("disks", [])):
            disk = _disk(data)
            # the userspace URI only where the domain uses it (rbd network disks)
            hypervisor = inst.get("hypervisor", "kvm") if disk.dev_type == "rbd" else None
            assembled = self.rpc_blockdev_assemble({"disk": data, "instance": inst.get("name"),
                                                    "as_primary": True, "idx": index,
                                                    "hypervisor": hypervisor})
            path = assembled[0] if isinstance(assembled, list) else None
            uri = assembled[1] if isinstance(assembled, list) and len(assembled) > 1 else None
            if not path and uri and disk.dev_type == "rbd":
                specs.append(DiskSpec(path="", dev_type=disk.dev_type, uuid=disk.uuid or "",
                                      read_only=disk.mode == "ro",
                                      network=self._rbd_network_source(str(uri))))
                continue
            if not path:
                raise DiskFailure(f"{inst.get('name')}: disk/{index} ({disk.dev_type}) has no "
                                  "device on this node")
            specs.append(DiskSpec(path=str(path), dev_type=disk.dev_type, uuid=disk.uuid or "",
                                  read_only=disk.mode == "ro"))
        return specs

    @contextlib.contextmanager
    def os_disk_paths(self, inst: dict[str, Any], *,
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
                    staging.truncate(_disk(inst["disks"][index]).size * 2**20)
                staged[index] = path
            yield [(str(staged.get(index, spec.path)),
                    f"rbd:{spec.network.name}" if spec.network is not None else None)
                   for index, spec in enumerate(specs)]
            for index, path in staged.items():
                disk = _disk(inst["disks"][index])
                try:
                    RadosBlockDevice(disk, [], self.bdev).install_from(str(path))
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
            client = cephclient.load(self.bdev)
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

    def remove_instance_disks(self, disks: list[Any]) -> None:
        """Remove the disks given as disk objects (instance_remove, migrate_finish with
        remove_disks); every disk is tried, the errors reported together."""
        errors = []
        for data in disks:
            try:
                self.rpc_blockdev_remove({"disk": data})
            except DiskFailure as err:
                errors.append(str(err))
        if errors:
            raise DiskFailure("; ".join(errors))


def _path_of(disk: Disk) -> str | None:
    if disk.dev_type in ("file", "sharedfile", "gluster"):
        return disk.path_id.path
    return None
