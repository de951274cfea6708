"""What each node RPC takes: its arguments' types and ranges, checked before the call runs.

A signed call is the master's, but its arguments are still checked at the door, so a bug (or a
confused master) gets a 400 with one line naming the argument instead of a half-done action or
a traceback: names are what the cluster allows (`herder.core.names`), anything that becomes a
file name is one plain component (`herder.core.paths`), numbers are in range. Arguments a
method does not declare are ignored (newer masters may send more). Every `rpc_<method>` of
`herder.noded.server.NodeDaemon` has an entry in `SCHEMAS` (a test insists).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Literal

import msgspec

from herder.core import console, names, paths
from herder.core.errors import HerderError

MAX_DISK_MIB = 1 << 40  # far beyond any disk; keeps sizes in what files and LVM can hold


class BadArguments(HerderError):
    """The arguments of a node RPC are malformed (400)."""


class Args(msgspec.Struct, kw_only=True):
    """Common to every call: what the master may add to any of them."""

    reason: list[Any] | None = None
    version: int | None = None

    def check(self) -> None:
        """Checks beyond the types (ValueError naming the argument)."""


def _instance_name(name: str, what: str = "name") -> None:
    names.hostname(name, f"instance {what}")
    paths.check_component(name, f"instance {what}")


def _disk_uuid(uuid: str) -> None:
    paths.check_component(uuid, "disk id")
    if uuid.startswith("."):
        raise ValueError(f"invalid disk id {uuid!r}")


def _disk_object(data: Any) -> None:
    """A Ganeti disk object (`herder.noded.bdev.disk`): decoded with its logical id checked."""
    from herder.noded.bdev.base import BlockDevError
    from herder.noded.bdev.disk import decode_disk

    try:
        disk = decode_disk(data)
    except BlockDevError as err:
        raise ValueError(str(err)) from None
    if disk.uuid is not None:
        _disk_uuid(disk.uuid)
    if disk.size > MAX_DISK_MIB:
        raise ValueError(f"disk {disk.uuid}: size {disk.size} out of range")


DiskObject = dict[str, Any]


class NicArg(msgspec.Struct, kw_only=True):
    mac: str
    ip: str | None = None
    mode: str | None = None
    link: str | None = None
    uuid: str | None = None
    name: str | None = None
    network: str | None = None
    network_env: dict[str, str] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        # the NETWORK_* variables become a routed NIC's hook environment (noded.kvm.ifup)
        for key, value in self.network_env.items():
            if not re.fullmatch(r"NETWORK_[A-Z0-9_]+", key) or "\0" in value:
                raise ValueError(f"NIC {self.mac}: bad network variable {key!r}")


class InstancePayload(msgspec.Struct, kw_only=True):
    """`herder.core.noderpc.instance_payload`."""

    name: str
    uuid: str
    memory: int
    vcpus: int
    hypervisor: str = "kvm"
    os: str = "none"
    disks: list[DiskObject] = msgspec.field(default_factory=list)
    nics: list[NicArg] = msgspec.field(default_factory=list)
    hvparams: dict[str, Any] = msgspec.field(default_factory=dict)
    beparams: dict[str, Any] = msgspec.field(default_factory=dict)
    osparams: dict[str, Any] = msgspec.field(default_factory=dict)
    uid_pool: list[tuple[int, int]] = msgspec.field(default_factory=list)
    network_port: int | None = None  # the console's port (VNC display = port - 5900)
    tags: list[str] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        _instance_name(self.name)
        if self.network_port is not None and not 0 < self.network_port < 65536:
            raise ValueError(f"instance {self.name}: network_port out of range")
        paths.check_component(self.uuid, "instance uuid")
        if not 1 <= self.memory <= MAX_DISK_MIB or not 1 <= self.vcpus <= 4096:
            raise ValueError(f"instance {self.name}: memory or vcpus out of range")
        if self.os != "none":
            names.os_name(self.os)
        for disk in self.disks:
            _disk_object(disk)
        for key, value in self.osparams.items():
            if not isinstance(value, str | int | float | bool) or "\0" in str(value):
                raise ValueError(f"OS parameter {key!r} must be a plain string")


class NoArgs(Args, kw_only=True):
    pass


class NodeInfo(Args, kw_only=True):
    instances: bool = False
    storage_units: list[tuple[Literal["lvm-vg", "file"], str]] = msgspec.field(
        default_factory=list)

    def check(self) -> None:
        for kind, name in self.storage_units:
            if kind == "file":
                _storage_dir(name)
            else:
                _unit_name(name)


class MasterVote(Args, kw_only=True):
    address: str
    port: int
    timeout: float = 2.0
    master: str | None = None

    def check(self) -> None:
        if not 0 < self.port < 65536 or not 0 < self.timeout <= 60:
            raise ValueError("port or timeout out of range")


class OneDisk(Args, kw_only=True):
    disk: DiskObject

    def check(self) -> None:
        _disk_object(self.disk)


class BlockdevCreate(OneDisk, kw_only=True):
    size: int = 0
    owner: str | None = None
    on_primary: bool = True
    info: str = ""
    excl_stor: bool = False

    def check(self) -> None:
        super().check()
        if self.owner:
            _instance_name(self.owner, "owner")


class BlockdevAssemble(OneDisk, kw_only=True):
    instance: str | None = None
    as_primary: bool = True
    idx: int = 0
    hypervisor: str | None = None

    def check(self) -> None:
        super().check()
        if self.instance is not None:
            _instance_name(self.instance, "instance")


class ExportTarget(msgspec.Struct, kw_only=True):
    address: str
    port: int
    name: str | None = None


class BlockdevExport(BlockdevAssemble, kw_only=True):
    target: ExportTarget
    token: str
    os_instance: InstancePayload | None = None  # an export: through the OS's export script

    def check(self) -> None:
        super().check()
        _transfer_target(self.target, self.token)


def _transfer_target(target: ExportTarget, token: str) -> None:
    ipaddress.ip_address(target.address)
    if not 0 < target.port < 65536:
        raise ValueError(f"port {target.port} out of range")
    if not token or not all(ch.isalnum() or ch in "-_" for ch in token):
        raise ValueError("invalid import token")


def _export_name(name: str) -> None:
    """An export's directory: an instance name, or one being written (`NAME.new`)."""
    _instance_name(name.removesuffix(".new"), "export name")


def _dump_name(name: str) -> None:
    paths.check_component(name, "dump file")
    if name.startswith("."):
        raise ValueError(f"invalid dump file name {name!r}")


class ExportPrepareDump(Args, kw_only=True):
    instance: str
    dump: str

    def check(self) -> None:
        _instance_name(self.instance, "instance")
        _dump_name(self.dump)


class BlockdevImportPrepare(BlockdevAssemble, kw_only=True):
    os_instance: InstancePayload | None = None  # an import: through the OS's import script


class ExportFinalize(Args, kw_only=True):
    instance: str
    config_ini: str

    def check(self) -> None:
        _instance_name(self.instance, "instance")
        if len(self.config_ini) > 1 << 20:
            raise ValueError("config_ini larger than 1 MiB")


class ExportNamed(Args, kw_only=True):
    name: str

    def check(self) -> None:
        _export_name(self.name)


class ExportSend(ExportNamed, kw_only=True):
    dump: str
    target: ExportTarget
    token: str

    def check(self) -> None:
        super().check()
        _dump_name(self.dump)
        _transfer_target(self.target, self.token)


class BlockdevGrow(OneDisk, kw_only=True):
    amount: int
    dryrun: bool = False
    backingstore: bool = True
    excl_stor: bool = False

    def check(self) -> None:
        super().check()
        if not 0 <= self.amount <= MAX_DISK_MIB:
            raise ValueError(f"amount {self.amount} out of range")


class BlockdevWipe(OneDisk, kw_only=True):
    offset: int
    size: int


class BlockdevSetInfo(OneDisk, kw_only=True):
    info: str


class BlockdevRename(Args, kw_only=True):
    devlist: list[tuple[DiskObject, list[Any]]]

    def check(self) -> None:
        for disk, _ in self.devlist:
            _disk_object(disk)


class DiskChildren(OneDisk, kw_only=True):
    ndevs: list[DiskObject]

    def check(self) -> None:
        super().check()
        for disk in self.ndevs:
            _disk_object(disk)


class Disks(Args, kw_only=True):
    disks: list[DiskObject] = msgspec.field(default_factory=list)
    instance: str | None = None
    exclusive: bool = True
    multimaster: bool = False

    def check(self) -> None:
        for disk in self.disks:
            _disk_object(disk)
        if self.instance is not None:
            _instance_name(self.instance, "instance")


def _storage_dir(path: str) -> None:
    if not path.startswith("/") or "\0" in path or ".." in path.split("/"):
        raise ValueError(f"invalid file storage directory {path!r}")


class StorageDir(Args, kw_only=True):
    file_storage_dir: str

    def check(self) -> None:
        _storage_dir(self.file_storage_dir)


class StorageDirRename(Args, kw_only=True):
    old_file_storage_dir: str
    new_file_storage_dir: str

    def check(self) -> None:
        _storage_dir(self.old_file_storage_dir)
        _storage_dir(self.new_file_storage_dir)


class WithInstance(Args, kw_only=True):
    instance: InstancePayload
    name: str | None = None

    def check(self) -> None:
        if self.name is not None:
            _instance_name(self.name)


class OsAdd(WithInstance, kw_only=True):
    force_variant: bool = False


class RunRename(WithInstance, kw_only=True):
    old_name: str

    def check(self) -> None:
        super().check()
        _instance_name(self.old_name)


class MigrateAccept(WithInstance, kw_only=True):
    xml: str
    start: bool = True


class Named(Args, kw_only=True):
    name: str

    def check(self) -> None:
        _instance_name(self.name)


class Shutdown(Named, kw_only=True):
    timeout: float = 120

    def check(self) -> None:
        super().check()
        if not 0 <= self.timeout <= 86400:
            raise ValueError(f"timeout {self.timeout} out of range (0-86400 s)")


class Reboot(Named, kw_only=True):
    type: Literal["soft", "hard", "full"] = "hard"


class BalloonMemory(Named, kw_only=True):
    memory: int  # MiB the running guest is to have (Ganeti's instance_balloon_memory)

    def check(self) -> None:
        super().check()
        if not 1 <= self.memory <= MAX_DISK_MIB:
            raise ValueError(f"memory {self.memory} MiB out of range")


class HotplugDevice(WithInstance, kw_only=True):
    action: Literal["add", "remove"]
    dev_type: Literal["disk", "nic"]
    index: int
    uuid: str

    def check(self) -> None:
        super().check()
        if not 0 <= self.index < 64:
            raise ValueError(f"index {self.index} out of range (0-63)")
        paths.check_component(self.uuid, "device id")


class DiskResize(Named, kw_only=True):
    uuid: str
    size: int  # MiB: the disk's new size

    def check(self) -> None:
        super().check()
        paths.check_component(self.uuid, "disk id")
        if not 1 <= self.size <= MAX_DISK_MIB:
            raise ValueError(f"size {self.size} MiB out of range")


class Remove(Named, kw_only=True):
    disks: list[DiskObject] = msgspec.field(default_factory=list)

    def check(self) -> None:
        super().check()
        for disk in self.disks:
            _disk_object(disk)


class MigrateFinish(Remove, kw_only=True):
    remove_disks: bool = False


class MigrateInstance(WithInstance, kw_only=True):
    target: str
    live: bool = True

    def check(self) -> None:
        super().check()
        names.hostname(self.target, "target node")


class FinalizeSource(Named, kw_only=True):
    success: bool
    live: bool = True


class FinalizeTarget(WithInstance, kw_only=True):
    success: bool


class RepairCommand(Args, kw_only=True):
    command: str
    input: Any = None

    def check(self) -> None:
        names.plain_name(self.command, "repair command")


def _unit_name(name: str) -> None:
    """A PV's device path or a VG's name, handed to LVM as one argument."""
    if not name or name.startswith("-") or any(ch in name for ch in "\0\n\r"):
        raise ValueError(f"invalid storage unit name {name!r}")


class LvList(Args, kw_only=True):
    vg_names: list[str] = msgspec.field(default_factory=list)

    def check(self) -> None:
        for name in self.vg_names:
            _unit_name(name)


class StorageList(Args, kw_only=True):
    type: Literal["lvm-pv", "lvm-vg", "file"] = "lvm-vg"
    dirs: list[str] = msgspec.field(default_factory=list)
    name: str | None = None

    def check(self) -> None:
        if self.name is not None:
            _unit_name(self.name)


class StorageRepair(Args, kw_only=True):
    name: str
    type: Literal["lvm-vg"] = "lvm-vg"

    def check(self) -> None:
        _unit_name(self.name)


class StorageModify(Args, kw_only=True):
    name: str
    type: str
    allocatable: bool | None = None

    def check(self) -> None:
        _unit_name(self.name)


class UploadFile(Args, kw_only=True):
    path: str
    data: str
    mode: int = 0o600
    uid: int | None = None
    gid: int | None = None

    def check(self) -> None:
        if not 0 <= self.mode <= 0o7777:
            raise ValueError(f"mode {self.mode} out of range")
        for ident in (self.uid, self.gid):
            if ident is not None and not -1 <= ident < 2**32 - 1:
                raise ValueError(f"uid/gid {ident} out of range")


class WriteSsconf(Args, kw_only=True):
    values: dict[str, str | int | float | bool | None]


class QueueCopy(msgspec.Struct, kw_only=True):
    files: dict[str, str] = msgspec.field(default_factory=dict)
    names: list[str] | None = None


class JournalCopy(msgspec.Struct, kw_only=True):
    """The master's config journal from `offset` (0: the whole file) continuing the snapshot
    whose SHA-256 is `snapshot` (base64 data)."""

    snapshot: str
    offset: int
    data: str


class WriteConfig(Args, kw_only=True):
    serial: int
    config: str | None = None  # the whole document (the master's snapshot file)
    journal: JournalCopy | None = None
    queue: QueueCopy | None = None

    def check(self) -> None:
        if self.config is None and self.journal is None:
            raise ValueError("write_config needs the config or its journal")
        if self.journal is not None and self.journal.offset < 0:
            raise ValueError("journal offset must not be negative")


class MasterIp(Args, kw_only=True):
    """Ganeti's master_params (what the master leaves out comes from the node's ssconf);
    they become daemon-util's options, so each must be what it says."""

    ip: str | None = None
    netmask: int | None = None
    netdev: str | None = None
    ip_family: int | None = None

    def check(self) -> None:
        if self.ip:
            ipaddress.ip_address(self.ip)  # ValueError names the value
        if self.netmask is not None and not 0 <= self.netmask <= 128:
            raise ValueError(f"netmask {self.netmask} out of range")
        if self.netdev and (len(self.netdev) > 15 or self.netdev.startswith("-")
                            or any(ch in self.netdev for ch in "/ \0\n")):
            raise ValueError(f"invalid network device {self.netdev!r}")
        if self.ip_family not in (None, 4, 6):
            raise ValueError(f"ip_family {self.ip_family} is neither 4 nor 6")


class NodeAdopt(Args, kw_only=True):
    hmac_key: str
    certificate: str
    node_certificate: str


class LibvirtTls(Args, kw_only=True):
    """`request` a new libvirt key's signing request; `install` its `certificate` (PEM)."""

    stage: Literal["request", "install"]
    certificate: str | None = None

    def check(self) -> None:
        if self.stage == "install" and not self.certificate:
            raise ValueError("stage install needs the certificate")
        if self.certificate is not None and len(self.certificate) > 16 * 1024:
            raise ValueError("certificate: a PEM certificate is a few hundred bytes")


class RenewCrypto(Args, kw_only=True):
    """`install` carries the new secrets (base64); `retire` none."""

    stage: Literal["install", "retire"]
    ca: str | None = None
    node_certificate: str | None = None
    hmac_key: str | None = None

    def check(self) -> None:
        if self.stage == "install" and not (self.ca and self.node_certificate and self.hmac_key):
            raise ValueError("stage install needs ca, node_certificate and hmac_key")


class NodeReachable(Args, kw_only=True):
    node: str
    address: str
    timeout: float = 2.0

    def check(self) -> None:
        names.hostname(self.node, "node")
        names.ip_address(self.address, "address")
        if not 0 < self.timeout <= 30:
            raise ValueError(f"timeout must be in (0, 30] seconds, got {self.timeout}")


class ConsoleStream(Args, kw_only=True):
    """A console stream (`noded.console`) or the serial log's tail."""

    instance: str

    def check(self) -> None:
        _instance_name(self.instance, "instance")


class ConsoleLog(ConsoleStream, kw_only=True):
    lines: int = console.LOG_LINES_DEFAULT

    def check(self) -> None:
        super().check()
        if not 1 <= self.lines <= console.LOG_LINES_MAX:
            raise ValueError(f"lines must be 1..{console.LOG_LINES_MAX}, got {self.lines}")


# The console streams: calls signed like the RPCs, but websocket upgrades (`noded.console`).
STREAM_SCHEMAS: dict[str, type[Args]] = {method: ConsoleStream
                                         for method in console.STREAM_METHODS.values()}

# method -> its arguments (every rpc_<method> of the node daemon)
SCHEMAS: dict[str, type[Args]] = {
    "ping": NoArgs, "master_epoch": NoArgs, "node_info": NodeInfo, "disk_map": NoArgs,
    "instance_list": NoArgs, "os_list": NoArgs, "node_powercycle": NoArgs,
    "master_vote": MasterVote, "node_reachable": NodeReachable,
    "blockdev_create": BlockdevCreate, "blockdev_remove": OneDisk,
    "blockdev_assemble": BlockdevAssemble, "blockdev_shutdown": OneDisk,
    "blockdev_find": OneDisk, "blockdev_getmirrorstatus": Disks,
    "blockdev_getmirrorstatus_multi": Disks, "lv_list": LvList, "vg_list": NoArgs,
    "drbd_needs_activation": Disks,
    "blockdev_grow": BlockdevGrow,
    "blockdev_rename": BlockdevRename, "blockdev_wipe": BlockdevWipe,
    "blockdev_setinfo": BlockdevSetInfo, "blockdev_open": Disks, "blockdev_close": Disks,
    "drbd_disconnect_net": Disks, "drbd_attach_net": Disks, "drbd_wait_sync": Disks,
    "file_storage_dir_create": StorageDir, "file_storage_dir_remove": StorageDir,
    "file_storage_dir_rename": StorageDirRename,
    "blockdev_import_prepare": BlockdevImportPrepare, "blockdev_export": BlockdevExport,
    "export_prepare_dump": ExportPrepareDump, "export_finalize": ExportFinalize,
    "export_remove": ExportNamed, "export_list": NoArgs, "export_info": ExportNamed,
    "export_send": ExportSend,
    "blockdev_addchildren": DiskChildren, "blockdev_removechildren": DiskChildren,
    "instance_define": WithInstance, "instance_start": WithInstance,
    "instance_os_add": OsAdd, "instance_run_rename": RunRename, "migrate_accept": MigrateAccept,
    "instance_shutdown": Shutdown, "instance_reboot": Reboot, "instance_remove": Remove,
    "instance_balloon_memory": BalloonMemory,
    "hotplug_supported": Named, "hotplug_device": HotplugDevice,
    "instance_disk_resize": DiskResize,
    "migrate_prepare": Named, "migrate_finish": MigrateFinish, "instance_stop_stray": Named,
    "instance_migratable": Named, "migration_info": Named, "accept_instance": WithInstance,
    "migrate_instance": MigrateInstance, "instance_get_migration_status": Named,
    "finalize_migration_src": FinalizeSource, "finalize_migration_dst": FinalizeTarget,
    "repair_command": RepairCommand,
    "storage_list": StorageList, "storage_repair": StorageRepair,
    "storage_modify": StorageModify,
    "upload_file": UploadFile, "write_ssconf": WriteSsconf, "write_config": WriteConfig,
    "node_start_master_daemons": NoArgs, "node_stop_master": NoArgs,
    "node_activate_master_ip": MasterIp, "node_deactivate_master_ip": MasterIp,
    "node_demote_from_mc": NoArgs, "node_adopt": NodeAdopt, "renew_crypto": RenewCrypto,
    "libvirt_tls": LibvirtTls,
    "instance_console_log": ConsoleLog,
}


def check(method: str, args: dict[str, Any]) -> None:
    """BadArguments (one line, naming the argument) unless `args` fit `method`'s schema."""
    schema = SCHEMAS.get(method) or STREAM_SCHEMAS.get(method)
    if schema is None:
        return
    try:
        msgspec.convert(args, schema).check()
    except msgspec.ValidationError as err:
        raise BadArguments(f"{method}: bad arguments: {err}") from None
    except (ValueError, TypeError) as err:
        raise BadArguments(f"{method}: bad arguments: {err}") from None
