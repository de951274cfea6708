"""The node as noded's RPC handlers see it (`Node`: the typed node context every handler of
`herder.noded.rpc` takes): its settings, its hypervisor, its disks, its guard, what it trusts,
the master epoch it has accepted, and the records it keeps of the instances it was asked to run.

Instance-affecting calls carry the reason trail and the config version of the instance; the node
records the expected state, reason and version (`<run_dir>/instance-reason/<name>` and
`<state_dir>/instances/<name>.json`), which mond's instance-status collector reports.

Master epochs: a call may carry the sender's master epoch (`noderpc.EPOCH_KEY`); the node keeps
the highest one it has accepted in `<state_dir>/master-epoch` (written atomically) and refuses an
older one with 409 "stale master epoch N < M", so a former master cannot act here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from herder.core import console as console_names
from herder.core import paths
from herder.core.errors import HerderError
from herder.core.libvirtd_conf import LibvirtPki
from herder.core.rpcdefs.base import ReasonTrail
from herder.core.store import atomic_write
from herder.noded import disk_transfer, fence, nodeparams, remote_import, uidpool
from herder.noded.bdev.base import Host
from herder.noded.guard import InstanceGuard
from herder.noded.hypervisor import Hypervisor
from herder.noded.migrations import Migrations
from herder.noded.node_disks import NodeDisks, bdev_host
from herder.noded.trust import NodeTrust

log = logging.getLogger("herder.noded")


class RpcFailure(HerderError):
    """A node RPC could not be carried out; the message goes back to the master."""


class StaleEpoch(HerderError):
    """The call carries an older master epoch than this node has accepted."""


@dataclass
class NodeSettings:
    node_name: str
    state_dir: Path
    run_dir: Path
    # None (noded): the key file beside the config, read by `trust` (none before the node
    # joined); in-process tests give theirs.
    hmac_key: bytes | None = None
    # Until the node's parameters name one (ssconf `herder_ndparams`, or the config copy of a
    # master candidate): libvirt's URI for this host.
    libvirt_uri: str = "qemu:///system"
    repair_dir: Path = Path("/etc/ganeti/node-repair-commands")
    os_path: tuple[Path, ...] = (Path("/srv/herder/os"),)
    os_timeout: float = 900.0
    repair_timeout: float = 300.0
    # The data directory as the master names it: the cluster secrets, the config copy of a
    # master candidate (and its job queue), the ssconf files.
    config_dir: Path = Path("/var/lib/herder")
    serial_log_dir: Path = console_names.SERIAL_LOG_DIR  # the instances' serial logs
    # Where absolute paths land on this node: "/" (tests give a directory of their own).
    file_root: Path = Path("/")


class Node:
    """The node's state (blocking calls; the handlers run in threads)."""

    def __init__(self, settings: NodeSettings, *, bdev: Host | None = None) -> None:
        """`bdev`: how the block-device layer reaches this node (default: its commands and
        files; tests give a stand-in world)."""
        self.settings = settings
        self.name = settings.node_name
        self.instances_dir = settings.state_dir / "instances"
        self.reason_dir = settings.run_dir / "instance-reason"
        for directory in (self.instances_dir, self.reason_dir):
            directory.mkdir(parents=True, exist_ok=True)
        self.data_dir = self.local(settings.config_dir)
        self.hv = Hypervisor(nodeparams.libvirt_uri(settings.node_name, self.data_dir,
                                                    settings.libvirt_uri), settings.state_dir)
        self.guard = InstanceGuard(settings.state_dir, settings.node_name)
        self.hv.may_restore = self.guard.may_restore
        self.started = time.time()
        self.powercycled: list[float] = []
        self.serial_lock = threading.Lock()  # held by the calls the contract marks SERIAL
        self.files_lock = threading.Lock()  # the config copy and the owner record
        self._epoch_lock = threading.Lock()
        self.epoch_file = settings.state_dir / "master-epoch"
        self.master_epoch = self._load_epoch()
        self.trust = NodeTrust(self.data_dir)
        self.disks = NodeDisks(settings.state_dir / "disk-map.json",
                               bdev if bdev is not None else bdev_host(self.local), self.hv,
                               self.files_lock)
        self.imports = disk_transfer.Imports()
        self.remote_imports = remote_import.RemoteImports()  # streams from another cluster
        self._migrations: Migrations | None = None
        # the liveness lease and watchdog (started by `serve`), the candidates' record
        self.lease = fence.LeaseKeeper(self)
        self.witness = fence.Witness()

    def hmac_keys(self) -> list[bytes]:
        """The keys a node RPC may be signed with."""
        if self.settings.hmac_key is not None:
            return [self.settings.hmac_key]
        return self.trust.keys()

    def node_params(self) -> dict[str, Any]:
        """This node's filled node parameters as ssconf (or a candidate's copy) has them."""
        return nodeparams.filled(self.name, self.data_dir) or {}

    def local(self, path: str | Path) -> Path:
        """Where an absolute path of this node is (under the file root)."""
        return self.settings.file_root / str(path).lstrip("/")

    @property
    def ssconf_dir(self) -> Path:
        """Ganeti's place: `ssconf_<name>` files in the data directory."""
        return self.data_dir

    def follow_node_params(self) -> None:
        """Connect to the hypervisor the node parameters name (they changed, or arrived):
        `libvirt_uri` from ssconf, else the config copy of a master candidate, else the
        default."""
        uri = nodeparams.libvirt_uri(self.name, self.data_dir, self.settings.libvirt_uri)
        if uri != self.hv.uri:
            log.info("libvirt URI %s -> %s (node parameters)", self.hv.uri, uri)
            self.hv.set_uri(uri)

    @property
    def migrations(self) -> Migrations:
        """This node's outgoing migrations (on the hypervisor it talks to now)."""
        if self._migrations is None or self._migrations.uri != self.hv.uri:
            self._migrations = Migrations(self.hv.uri, LibvirtPki(self.data_dir / "libvirt-pki"),
                                          hypervisor_version=self.hv.hypervisor_version)
        return self._migrations

    # --- the serial logs ------------------------------------------------------------------------

    @property
    def serial_log_dir(self) -> Path:
        return self.local(self.settings.serial_log_dir)

    def serial_log(self, name: str) -> Path:
        """Where the instance's domain writes its serial console (`InstanceSpec.serial_log`)."""
        self.serial_log_dir.mkdir(mode=0o750, parents=True, exist_ok=True)
        return console_names.serial_log(self.serial_log_dir, name)

    # --- what the node was asked to do to its instances -----------------------------------------

    def record(self, name: str, expected: str, reason: ReasonTrail | None,
               version: int | None) -> None:
        """What noded was asked to do to an instance, for mond's instance-status collector."""
        trail = list(reason or [])
        atomic_write(paths.child(self.reason_dir, name, what="instance name"),
                     json.dumps(trail).encode(), 0o644)
        atomic_write(paths.child(self.instances_dir, name, suffix=".json", what="instance name"),
                     json.dumps({"name": name, "expected_state": expected, "reason": trail,
                                 "config_version": version, "changed": time.time()}).encode(),
                     0o644)

    def forget(self, name: str) -> None:
        """The records of an instance that no longer runs here (and its pool uid)."""
        uid_record = paths.child(self.instances_dir, name, suffix=".uid", what="instance name")
        if uid_record.exists():
            with contextlib.suppress(HerderError, ValueError, OSError):
                uidpool.release_uid(int(uid_record.read_text()),
                                    self.settings.state_dir / "uid-pool")
        for path in (paths.child(self.reason_dir, name, what="instance name"),
                     paths.child(self.instances_dir, name, suffix=".json", what="instance name"),
                     uid_record):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    # --- master epochs -------------------------------------------------------------------------

    def _load_epoch(self) -> int:
        try:
            return max(0, int(self.epoch_file.read_text().strip() or 0))
        except FileNotFoundError:
            return 0
        except (OSError, ValueError) as err:
            log.warning("cannot read %s (%s); master epoch 0", self.epoch_file, err)
            return 0

    def accept_epoch(self, epoch: object) -> None:
        """Refuse a call of an older master (StaleEpoch); remember a newer epoch."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise StaleEpoch(f"invalid master epoch {epoch!r}")
        with self._epoch_lock:
            if epoch < self.master_epoch:
                raise StaleEpoch(f"stale master epoch {epoch} < {self.master_epoch}")
            if epoch > self.master_epoch:
                atomic_write(self.epoch_file, f"{epoch}\n".encode(), 0o644)
                log.info("master epoch %d -> %d", self.master_epoch, epoch)
                self.master_epoch = epoch


async def keep_hypervisor(node: Node, stop: asyncio.Event, every: float = 2.0) -> None:
    """Hold the libvirt connection; after a libvirtd restart, re-define the node's domains."""
    while not stop.is_set():
        await asyncio.to_thread(node.follow_node_params)
        await asyncio.to_thread(node.hv.check)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=every)
