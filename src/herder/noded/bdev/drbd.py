"""`drbd`: a DRBD 8.x device over a data LV and a metadata LV (its two children), as Ganeti.

The logical id is `[node_a, node_b, port, minor_a, minor_b, secret]`; this node's minor and the
two secondary IPs come in the disk's dynamic parameters. The kernel module's version (first
line of /proc/drbd) picks the 8.3 or 8.4 command syntax (drbd_commands); a DRBD 9 kernel is
refused with Ganeti's message. State is read from /proc/drbd (core.drbd_status: used minors,
roles, resync progress) and `drbdsetup show` (what a minor is attached and connected to).

create: the minor must be free; the metadata LV is checked (128 MiB - 1 GiB), zeroed with `dd`
and initialised with `drbdmeta create-md`. assemble: a free minor is set up from zero (attach
the disks, resync parameters, connect with the cluster's shared secret and HMAC `md5`); a used
one is completed or corrected (`_slow_assemble`). open/close: primary (`--force` right after
create) / secondary. Network: `disconnect_net` waits for StandAlone; `attach_net(multimaster)`
reconnects, with `--allow-two-primaries` and protocol C only for a live migration.
add_children/remove_children replace the local disks (replace-disks).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Mapping, Sequence

from herder.core import drbd_status
from herder.core.diskobjects import BlockDevStatus, Disk, LocalDiskStatus
from herder.core.drbd_status import DrbdKernelInfo, MinorState, ShowInfo
from herder.noded.bdev.base import (
    DD_BLOCK_SIZE,
    NO_DEVICE_MAPPER,
    BlockDev,
    BlockDevError,
    Host,
    retry,
)
from herder.noded.bdev.drbd_commands import DrbdCommands, commands_for
from herder.noded.bdev.drbd_commands import dev_path as drbd_dev_path

log = logging.getLogger(__name__)

DRBD_MAJOR = 147
HMAC_ALGORITHM = "md5"  # Ganeti's DRBD_HMAC_ALG
MIGRATION_PROTOCOL = "C"  # Ganeti's DRBD_MIGRATION_NET_PROTOCOL
NET_RECONFIG_TIMEOUT = 60.0
MAX_MINORS = 255
META_MIN_BYTES = 128 * 1024 * 1024
META_MAX_BYTES = 1024 * 1024 * 1024


def kernel_info(host: Host) -> DrbdKernelInfo:
    """/proc/drbd, parsed; Ganeti's messages when the module is missing or says nothing."""
    try:
        text = host.read_text(host.proc_drbd)
    except FileNotFoundError as err:
        raise BlockDevError(f"The file {host.proc_drbd} cannot be opened, check if the module"
                            f" is loaded ({err.strerror})") from None
    except OSError as err:
        raise BlockDevError(f"Can't read the DRBD proc file {host.proc_drbd}:"
                            f" {err.strerror}") from None
    try:
        return drbd_status.parse_kernel_info(text)
    except drbd_status.DrbdStatusError as err:
        raise BlockDevError(str(err)) from None


def check_drbd8(info: DrbdKernelInfo) -> None:
    if info.version.major != 8:
        raise BlockDevError(f"Mismatch in DRBD kernel version and requested ganeti usage:"
                            f" kernel is {info.version.major}.{info.version.minor},"
                            " ganeti wants 8.x")


def find_unused_minor(host: Host) -> int:
    info = kernel_info(host)
    highest = -1
    for minor in info.minor_lines:
        if not info.state(minor).is_in_use:
            return minor
        highest = max(highest, minor)
    if highest >= MAX_MINORS:
        raise BlockDevError("Can't find a free DRBD minor")
    return highest + 1


def net_family(minor: int, lhost: str, rhost: str) -> str:
    def version(address: str) -> int | None:
        try:
            return ipaddress.ip_address(address).version
        except ValueError:
            return None

    local = version(lhost)
    if local is None:
        raise BlockDevError(f"drbd{minor}: Invalid ip {lhost}")
    if version(rhost) != local:
        raise BlockDevError(f"drbd{minor}: can't connect ip {lhost} to ip {rhost}")
    return "ipv6" if local == 6 else "ipv4"


class Drbd8(BlockDev):
    dev_type = "drbd"

    def __init__(self, disk: Disk, children: Sequence[BlockDev | None], host: Host) -> None:
        kids: list[BlockDev | None] = [] if None in children else list(children)
        if len(kids) not in (0, 2):
            raise BlockDevError(f"Invalid DRBD children: {kids!r}")
        dyn = disk.dynamic_params
        if None in (dyn.local_ip, dyn.remote_ip, dyn.local_minor, dyn.remote_minor):
            raise BlockDevError(f"Invalid DRBD dynamic parameters for {disk.iv_name}:"
                                " local/remote IP and minor are needed")
        lid = disk.drbd_id
        assert dyn.local_minor is not None
        self.local_host, self.remote_host = dyn.local_ip, dyn.remote_ip
        self.local_port = self.remote_port = lid.port
        self.local_minor: int = dyn.local_minor
        self.secret = lid.secret
        if kids:
            meta = kids[1]
            if meta is None or not host.can_read_device(meta.dev_path or ""):
                log.info("drbd%s: ignoring unreadable meta device", self.local_minor)
                kids = []
        super().__init__(disk, kids, host)
        self.major = DRBD_MAJOR
        info = kernel_info(host)
        check_drbd8(info)
        self.version = info.version
        self.commands: DrbdCommands = commands_for(info.version)
        if (self.local_host is not None and self.local_host == self.remote_host
                and self.local_port == self.remote_port):
            raise BlockDevError(f"Invalid DRBD configuration: same local and remote address"
                                f" {self.local_host}:{self.local_port}")
        self.attach()

    # --- state ---

    def _set_minor(self, minor: int | None) -> None:
        self.minor = minor
        self.dev_path = None if minor is None else drbd_dev_path(minor)
        self.attached = minor is not None

    def _show(self, minor: int) -> ShowInfo:
        result = self.host.run(self.commands.show(minor))
        if result.failed:
            log.error("Can't display the drbd config: %s", result.last_lines())
            return ShowInfo()
        try:
            return drbd_status.parse_drbdsetup_show(result.stdout)
        except drbd_status.DrbdStatusError as err:
            raise BlockDevError(f"drbd{minor}: {err}") from None

    def _needs_local_syncer_params(self) -> bool:
        return kernel_info(self.host).version.minor >= 4

    def _net_data(self) -> tuple[str | None, int, str | None, int]:
        return self.local_host, self.local_port, self.remote_host, self.remote_port

    def _matches_local(self, info: ShowInfo) -> bool:
        backend, meta = (self.children if self.children else (None, None))
        if backend is not None:
            matches = info.local_dev == backend.dev_path
        else:
            matches = info.local_dev is None
        if meta is not None:
            matches = matches and info.meta_dev == meta.dev_path
            if info.meta_index is not None:
                matches = matches and info.meta_index == 0
        else:
            matches = matches and info.meta_dev is None and info.meta_index is None
        return matches

    def _matches_net(self, info: ShowInfo) -> bool:
        if (self.local_host is None and info.local_addr is None
                and self.remote_host is None and info.remote_addr is None):
            return True
        if self.local_host is None or info.local_addr is None or info.remote_addr is None:
            return False
        return (info.local_addr == (self.local_host, self.local_port)
                and info.remote_addr == (self.remote_host, self.remote_port))

    def attach(self) -> bool:
        used = kernel_info(self.host).used_minors()
        self._set_minor(self.local_minor if self.local_minor in used else None)
        return self.minor is not None

    def proc_status(self) -> MinorState:
        if self.minor is None:
            raise BlockDevError(f"drbd{self.local_minor}: status asked while not attached")
        info = kernel_info(self.host)
        if not info.has_minor(self.minor):
            raise BlockDevError(f"drbd{self.minor}: can't find myself in /proc")
        try:
            return info.state(self.minor)
        except drbd_status.DrbdStatusError as err:
            raise BlockDevError(str(err)) from None

    def sync_status(self) -> BlockDevStatus:
        if self.minor is None and not self.attach():
            raise BlockDevError(f"drbd{self.local_minor}: can't attach to read its status")
        stats = self.proc_status()
        degraded = not stats.is_connected or not stats.is_disk_uptodate
        if stats.is_disk_uptodate:
            ldisk = LocalDiskStatus.OKAY
        elif stats.is_diskless:
            ldisk = LocalDiskStatus.FAULTY
        elif stats.is_in_resync:
            ldisk = LocalDiskStatus.SYNC
        else:
            ldisk = LocalDiskStatus.UNKNOWN
        return BlockDevStatus(self.dev_path, self.major, self.minor, stats.sync_percent,
                          stats.est_time, degraded, ldisk)

    # --- local disks ---

    @staticmethod
    def _init_meta(host: Host, minor: int, meta_dev: str) -> None:
        result = host.run(["dd", "if=/dev/zero", f"of={meta_dev}", f"bs={DD_BLOCK_SIZE}",
                           "count=128", "oflag=direct"])
        if result.failed:
            raise BlockDevError(f"Can't wipe the meta device: {result.last_lines()}")
        commands = commands_for(kernel_info(host).version)
        result = host.run(commands.init_meta(minor, meta_dev))
        if result.failed:
            raise BlockDevError(f"Can't initialize meta device: {result.last_lines()}")

    def _set_minor_sync_params(self, minor: int, params: Mapping[str, object]) -> list[str]:
        result = self.host.run(self.commands.sync_params(minor, params))
        if result.failed:
            message = f"Can't change syncer rate: {result.last_lines()}"
            log.error(message)
            return [message]
        return []

    def _assemble_local(self, minor: int, backend: str, meta: str, size: int) -> None:
        for argv in self.commands.local_init(minor, backend, meta, size, self.params):
            result = self.host.run(argv)
            if result.failed:
                raise BlockDevError(f"drbd{minor}: can't attach local disk:"
                                    f" {result.last_lines()}")
        if self._needs_local_syncer_params():
            errors: list[str] = []

            def attempt() -> bool:
                errors[:] = self._set_minor_sync_params(minor, self.params)
                return not errors

            if not retry(self.host, attempt, delay=1.0, timeout=5.0):
                raise BlockDevError(f"drbd{minor}: can't set the synchronization parameters:"
                                    f" {', '.join(errors)}")

    def _shutdown_local(self, minor: int) -> None:
        result = self.host.run(self.commands.detach(minor))
        if result.failed:
            raise BlockDevError(f"drbd{minor}: can't detach local disk: {result.last_lines()}")

    # --- network ---

    def _assemble_net(self, minor: int, net: tuple[str | None, int, str | None, int], *,
                      dual_primary: bool = False, hmac: str | None = None,
                      secret: str | None = None) -> None:
        lhost, lport, rhost, rport = net
        if lhost is None or rhost is None:
            self._shutdown_net(minor)
            return
        protocol = MIGRATION_PROTOCOL if dual_primary else str(self.params["protocol"])
        if not self._needs_local_syncer_params():
            sync_errors = self._set_minor_sync_params(minor, self.params)
            if sync_errors:
                raise BlockDevError(f"drbd{minor}: can't set the synchronization parameters:"
                                    f" {', '.join(sync_errors)}")
        family = net_family(minor, lhost, rhost)
        for argv in self.commands.net_init(minor, family, lhost, lport, rhost, rport, protocol,
                                           dual_primary, hmac, secret, self.params):
            result = self.host.run(argv)
            if result.failed:
                raise BlockDevError(f"drbd{minor}: can't setup network: {result.last_lines()}")

        def configured() -> bool:
            info = self._show(minor)
            return info.local_addr == (lhost, lport) and info.remote_addr == (rhost, rport)

        if not retry(self.host, configured, delay=1.0, timeout=10.0):
            raise BlockDevError(f"drbd{minor}: timeout while configuring network")
        if not self._needs_local_syncer_params():
            old_minor = self.minor
            self._set_minor(minor)
            try:
                sync_errors = self.set_sync_params(self.params)
            finally:
                self._set_minor(old_minor)
            if sync_errors:
                raise BlockDevError(f"drbd{minor}: can't set the synchronization parameters:"
                                    f" {', '.join(sync_errors)}")

    def _shutdown_net(self, minor: int) -> None:
        lhost, lport, rhost, rport = self._net_data()
        assert lhost is not None and rhost is not None
        family = net_family(minor, lhost, rhost)
        result = self.host.run(self.commands.disconnect(minor, family, lhost, lport, rhost,
                                                        rport))
        if result.failed:
            raise BlockDevError(f"drbd{minor}: can't shutdown network: {result.last_lines()}")

    def disconnect_net(self) -> None:
        """Go StandAlone, waiting up to a minute for the disconnect to take effect."""
        if self.minor is None:
            raise BlockDevError(f"drbd{self.local_minor}: disk not attached in disconnect")
        minor = self.minor
        ever_disconnected = self._try(lambda: self._shutdown_net(minor))

        def standalone() -> bool:
            nonlocal ever_disconnected
            if self.proc_status().is_standalone:
                return True
            ever_disconnected = self._try(lambda: self._shutdown_net(minor)) or ever_disconnected
            return False

        if not retry(self.host, standalone, delay=0.1, factor=1.5, max_delay=2.0,
                     timeout=NET_RECONFIG_TIMEOUT):
            if ever_disconnected:
                raise BlockDevError(f"drbd{minor}: device did not react to the 'disconnect'"
                                    " command in a timely manner")
            raise BlockDevError(f"drbd{minor}: can't shutdown network, even after multiple"
                                " retries")

    @staticmethod
    def _try(action: Callable[[], None]) -> bool:
        try:
            action()
        except BlockDevError as err:
            log.warning("ignoring: %s", err)
            return False
        return True

    def attach_net(self, multimaster: bool) -> None:
        """Reconnect a StandAlone device; `multimaster` allows two primaries (migration)."""
        if self.minor is None:
            raise BlockDevError(f"drbd{self.local_minor}: device not attached in attach_net")
        if self.local_host is None or self.remote_host is None:
            raise BlockDevError(f"drbd{self.minor}: missing network info in attach_net")
        if not self.proc_status().is_standalone:
            raise BlockDevError(f"drbd{self.minor}: device is not standalone in attach_net")
        self._assemble_net(self.minor, self._net_data(), dual_primary=multimaster,
                           hmac=HMAC_ALGORITHM, secret=self.secret)

    # --- the interface ---

    @classmethod
    def create(cls, disk: Disk, children: Sequence[BlockDev | None], host: Host, *,
               excl_stor: bool = False) -> Drbd8:
        if len(children) != 2 or None in children:
            raise BlockDevError("a drbd disk needs its data and metadata devices")
        if excl_stor:
            raise BlockDevError("DRBD devices cannot be used with exclusive storage")
        minor = disk.dynamic_params.local_minor
        if minor is None:
            raise BlockDevError(f"Invalid dynamic params for drbd device {disk.iv_name}:"
                                " no local minor")
        # Without device-mapper the LVs below have no device nodes: nothing to build on.
        if host.lv_device_nodes_required and not all(
                host.exists(child.dev_path or "") for child in children if child is not None):
            raise BlockDevError(NO_DEVICE_MAPPER)
        info = kernel_info(host)
        check_drbd8(info)  # before anything is written (Ganeti checks after create-md)
        if info.has_minor(minor) and info.state(minor).is_in_use:
            raise BlockDevError(f"drbd{minor}: minor is already in use at Create() time")
        meta = children[1]
        assert meta is not None
        meta.assemble()
        if not meta.attach():
            raise BlockDevError(f"drbd{minor}: can't attach to meta device '{meta.dev_path}'")
        assert meta.dev_path is not None
        cls._check_meta_size_on(host, meta.dev_path)
        cls._init_meta(host, minor, meta.dev_path)
        return cls(disk, children, host)

    @staticmethod
    def _check_meta_size_on(host: Host, meta_dev: str) -> None:
        result = host.run(["blockdev", "--getsize", meta_dev])
        if result.failed:
            raise BlockDevError(f"Failed to get the size of {meta_dev}: {result.last_lines()}")
        try:
            size = int(result.stdout) * 512
        except ValueError:
            raise BlockDevError(f"Invalid output from blockdev: '{result.stdout}'") from None
        if size < META_MIN_BYTES:
            raise BlockDevError(f"Meta device too small ({size / 1024 / 1024:.2f}MiB)")
        if size > META_MAX_BYTES:
            raise BlockDevError(f"Meta device too big ({size / 1024 / 1024:.2f}MiB)")

    def assemble(self) -> None:
        self.attach()
        if self.minor is None:
            self._fast_assemble()
        else:
            self._slow_assemble()

    def _fast_assemble(self) -> None:
        minor = self.local_minor
        if len(self.children) == 2 and all(self.children):
            data, meta = self.children
            assert data is not None and meta is not None
            self._assemble_local(minor, data.dev_path or "", meta.dev_path or "", self.size)
        if self.local_host and self.local_port and self.remote_host and self.remote_port:
            self._assemble_net(minor, self._net_data(), hmac=HMAC_ALGORITHM,
                               secret=self.secret)
        self._set_minor(minor)

    def _slow_assemble(self) -> None:
        """Complete or correct a configured minor: attach what is missing, reconnect to the
        right peer."""
        minor = self.local_minor
        net = self._net_data()
        info = self._show(minor)
        match_local, match_net = self._matches_local(info), self._matches_net(info)
        done = match_local and match_net
        if not done and match_local and info.local_addr is None:
            self._assemble_net(minor, net, hmac=HMAC_ALGORITHM, secret=self.secret)
            if not self._matches_net(self._show(minor)):
                raise BlockDevError(f"drbd{minor}: network attach successful, but"
                                    " 'drbdsetup show' disagrees")
            done = True
        if not done and match_net and info.local_dev is None:
            data, meta = self.children if len(self.children) == 2 else (None, None)
            if data is None or meta is None:
                raise BlockDevError(f"drbd{minor}: cannot attach local disks: children missing")
            self._assemble_local(minor, data.dev_path or "", meta.dev_path or "", self.size)
            if not self._matches_local(self._show(minor)):
                raise BlockDevError(f"drbd{minor}: disk attach successful, but 'drbdsetup"
                                    " show' disagrees")
            done = True
        if (not done and match_local and info.local_dev is not None and not match_net
                and info.local_addr is not None):
            try:
                self._shutdown_net(minor)
            except BlockDevError as err:
                raise BlockDevError(f"drbd{minor}: device has correct local storage, wrong"
                                    " remote peer and is unable to disconnect in order to"
                                    f" attach to the correct peer: {err}") from None
            self._assemble_net(minor, net, hmac=HMAC_ALGORITHM, secret=self.secret)
            if not self._matches_net(self._show(minor)):
                raise BlockDevError(f"drbd{minor}: network attach successful, but"
                                    " 'drbdsetup show' disagrees")
            done = True
        self._set_minor(minor if done else None)
        if not done:
            raise BlockDevError(f"drbd{minor}: cannot activate, unknown or unhandled reason")

    def shutdown(self) -> None:
        if self.minor is None and not self.attach():
            log.info("drbd%d: not attached during shutdown", self.local_minor)
            return
        assert self.minor is not None
        try:
            commands = commands_for(kernel_info(self.host).version)
            result = self.host.run(commands.down(self.minor))
            if result.failed:
                raise BlockDevError(f"drbd{self.minor}: can't shutdown drbd device:"
                                    f" {result.last_lines()}")
        finally:
            self.minor = None
            self.dev_path = None

    def remove(self) -> None:
        self.shutdown()

    def rename(self, new_logical_id: Sequence[object]) -> None:
        raise BlockDevError("Can't rename a drbd device")

    def open(self, *, force: bool = False, exclusive: bool = True) -> None:
        if self.minor is None and not self.attach():
            log.error("DRBD cannot attach to a device during open")
            return
        assert self.minor is not None
        result = self.host.run(self.commands.primary(self.minor, force))
        if result.failed:
            raise BlockDevError(f"drbd{self.minor}: can't make drbd device primary:"
                                f" {result.last_lines()}")

    def close(self) -> None:
        if self.minor is None and not self.attach():
            raise BlockDevError(f"drbd{self.local_minor}: can't attach in close")
        assert self.minor is not None
        result = self.host.run(self.commands.secondary(self.minor))
        if result.failed:
            raise BlockDevError(f"drbd{self.minor}: can't switch drbd device to secondary:"
                                f" {result.last_lines()}")

    def grow(self, amount: int, *, dryrun: bool, backingstore: bool, excl_stor: bool) -> None:
        if self.minor is None:
            raise BlockDevError(f"drbd{self.local_minor}: grow called while not attached")
        if len(self.children) != 2 or None in self.children:
            raise BlockDevError(f"drbd{self.minor}: cannot grow diskless device")
        data = self.children[0]
        assert data is not None
        data.grow(amount, dryrun=dryrun, backingstore=backingstore, excl_stor=excl_stor)
        if dryrun or backingstore:
            return
        result = self.host.run(self.commands.resize(self.minor, self.size + amount))
        if result.failed:
            raise BlockDevError(f"drbd{self.minor}: resize failed: {result.last_lines()}")

    def set_sync_params(self, params: Mapping[str, object]) -> list[str]:
        if self.minor is None:
            return ["Not attached during set_sync_params"]
        errors = super().set_sync_params(params)
        return errors + self._set_minor_sync_params(self.minor, params)

    def pause_resume_sync(self, pause: bool) -> bool:
        if self.minor is None:
            return False
        argv = (self.commands.pause_sync(self.minor) if pause
                else self.commands.resume_sync(self.minor))
        result = self.host.run(argv)
        if result.failed:
            log.error("Can't %s: %s", " ".join(argv), result.last_lines())
        return not result.failed

    def add_children(self, devices: Sequence[BlockDev]) -> None:
        """Attach new local data + metadata devices (replace-disks, after remove_children)."""
        if self.minor is None:
            raise BlockDevError(f"drbd{self.local_minor}: can't attach to drbd8 during"
                                " add_children")
        if len(devices) != 2:
            raise BlockDevError(f"drbd{self.minor}: need two devices for add_children")
        if self._show(self.minor).local_dev is not None:
            raise BlockDevError(f"drbd{self.minor}: already attached to a local disk")
        backend, meta = devices
        if backend.dev_path is None or meta.dev_path is None:
            raise BlockDevError(f"drbd{self.minor}: children not ready during add_children")
        backend.open()
        meta.open()
        self._check_meta_size_on(self.host, meta.dev_path)
        self._init_meta(self.host, find_unused_minor(self.host), meta.dev_path)
        self._assemble_local(self.minor, backend.dev_path, meta.dev_path, self.size)
        self.children = list(devices)

    def remove_children(self, device_paths: Sequence[str]) -> None:
        """Detach the local disks given by path (they must be the current ones)."""
        if self.minor is None:
            raise BlockDevError(f"drbd{self.local_minor}: can't attach to drbd8 during"
                                " remove_children")
        if self._show(self.minor).local_dev is None:
            return  # already detached
        if len(self.children) != 2:
            raise BlockDevError(f"drbd{self.minor}: we don't have two children:"
                                f" {self.children!r}")
        if self.children.count(None) == 2:
            log.warning("drbd%d: requested detach while detached", self.minor)
            return
        if len(device_paths) != 2:
            raise BlockDevError(f"drbd{self.minor}: we need two children in remove_children")
        for child, path in zip(self.children, device_paths, strict=True):
            if child is None or path != child.dev_path:
                raise BlockDevError(f"drbd{self.minor}: mismatch in local storage ({path} !="
                                    f" {child.dev_path if child else None}) in"
                                    " remove_children")
        self._shutdown_local(self.minor)
        self.children = []
