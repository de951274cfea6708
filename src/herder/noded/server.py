"""noded's RPC server: POST /rpc/<method> over HTTPS; the caller shows a certificate of the
cluster (`noded.daemon`), every body is signed for its method and this node with the node-RPC
key, within the time window and never replayed (`noded.rpccheck`); anything else gets 403.

Instance-affecting calls carry the reason trail and the config version of the instance; the node
records the expected state, reason and version (`<run_dir>/instance-reason/<name>` and
`<state_dir>/instances/<name>.json`), which mond's instance-status collector reports.

The primary guard (`herder.noded.guard`): calls that may start or define a domain carry the
instance's claim (primary node, config version, master epoch; `herder.core.vmclaim`), and the
node refuses to run a domain it is not the primary of, except as the target of a move the master
is running; so does the re-definition of domains after a libvirtd restart.

Master epochs: a call may carry the sender's master epoch (`noderpc.EPOCH_KEY`); the node keeps
the highest one it has accepted in `<state_dir>/master-epoch` (written atomically) and refuses an
older one with 409 "stale master epoch N < M", so a former master cannot act here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from aiohttp import web

from herder import __version__
from herder.core import access, ordered, paths, ports, ssconf, storage_units, vmclaim, whitelist
from herder.core import console as console_names
from herder.core.errors import HerderError, StoreError
from herder.core.libvirtd_conf import LibvirtPki
from herder.core.noderpc import EPOCH_KEY
from herder.core.store import CONFIG_MODE, FileStore, atomic_write
from herder.noded import (
    console,
    disk_transfer,
    fence,
    join,
    libvirt_tls,
    nodeparams,
    powercycle,
    rpcargs,
    rpccheck,
)
from herder.noded.disk_rpcs import DiskRpcs, bdev_host
from herder.noded.exports import ExportRpcs
from herder.noded.guard import InstanceGuard
from herder.noded.hotplug import HotplugRpcs
from herder.noded.hypervisor import Hypervisor, HypervisorError
from herder.noded.kvm.domain import InstanceSpec
from herder.noded.migrations import Migrations
from herder.noded.node_role import RoleRpcs
from herder.noded.trust import NodeTrust

log = logging.getLogger("herder.noded")
_encode = msgspec.json.Encoder().encode
ROUTES = access.Routes("noded")  # who may call each route (tests/security walks the router)


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
    extra: dict[str, Any] = field(default_factory=dict)


class NodeDaemon(RoleRpcs, DiskRpcs, HotplugRpcs, ExportRpcs):
    """The node's state and the implementation of every RPC (blocking; run in threads)."""

    def __init__(self, settings: NodeSettings) -> None:
        self.settings = settings
        self.instances_dir = settings.state_dir / "instances"
        self.reason_dir = settings.run_dir / "instance-reason"
        for directory in (self.instances_dir, self.reason_dir):
            directory.mkdir(parents=True, exist_ok=True)
        self.hv = Hypervisor(nodeparams.libvirt_uri(settings.node_name,
                                                    self.local(settings.config_dir),
                                                    settings.libvirt_uri), settings.state_dir)
        self.guard = InstanceGuard(settings.state_dir, settings.node_name)
        self.hv.may_restore = self.guard.may_restore
        self.started = time.time()
        self.powercycled: list[float] = []
        self._lock = threading.Lock()
        self._map_lock = threading.Lock()
        self._epoch_lock = threading.Lock()
        self.epoch_file = settings.state_dir / "master-epoch"
        self.master_epoch = self._load_epoch()
        self.data_dir = self.local(settings.config_dir)
        self.trust = NodeTrust(self.data_dir)
        self.bdev = bdev_host(self.local)
        self.imports = disk_transfer.Imports()
        self._migrations: Migrations | None = None
        # the liveness lease and watchdog (started by `serve`), the candidates' record
        self.lease = fence.LeaseKeeper(self)
        self.witness = fence.Witness()

    def hmac_keys(self) -> list[bytes]:
        """The keys a node RPC may be signed with."""
        if self.settings.hmac_key is not None:
            return [self.settings.hmac_key]
        return self.trust.keys()

    def local(self, path: str | Path) -> Path:
        """Where an absolute path of this node is (under the file root)."""
        return self.settings.file_root / str(path).lstrip("/")

    def node_params(self) -> dict[str, Any]:
        """This node's filled node parameters as ssconf (or a candidate's copy) has them."""
        return nodeparams.filled(self.settings.node_name, self.data_dir) or {}

    def wanted_libvirt_uri(self) -> str:
        """This node's `libvirt_uri` node parameter: from ssconf, else the config copy of a
        master candidate, else the default."""
        return nodeparams.libvirt_uri(self.settings.node_name, self.data_dir,
                                      self.settings.libvirt_uri)

    def follow_node_params(self) -> None:
        """Connect to the hypervisor the node parameters name (they changed, or arrived)."""
        uri = self.wanted_libvirt_uri()
        if uri != self.hv.uri:
            log.info("libvirt URI %s -> %s (node parameters)", self.hv.uri, uri)
            self.hv.set_uri(uri)

    # --- helpers --------------------------------------------------------------------------------

    def record(self, name: str, expected: str, reason: list[Any] | None,
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
        uid_record = paths.child(self.instances_dir, name, suffix=".uid", what="instance name")
        if uid_record.exists():
            from herder.noded import uidpool

            with contextlib.suppress(HerderError, ValueError, OSError):
                uidpool.release_uid(int(uid_record.read_text()),
                                    self.settings.state_dir / "uid-pool")
        for path in (paths.child(self.reason_dir, name, what="instance name"),
                     paths.child(self.instances_dir, name, suffix=".json", what="instance name"),
                     uid_record):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def _load_epoch(self) -> int:
        try:
            return max(0, int(self.epoch_file.read_text().strip() or 0))
        except FileNotFoundError:
            return 0
        except (OSError, ValueError) as err:
            log.warning("cannot read %s (%s); master epoch 0", self.epoch_file, err)
            return 0

    def accept_epoch(self, epoch: Any) -> None:
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

    # --- RPCs -----------------------------------------------------------------------------------

    def rpc_ping(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"node": self.settings.node_name, "version": __version__, "time": time.time(),
                "uptime": time.time() - self.started, "hypervisor": self.hv.check(),
                "vm_lock_kb": vm_locked_kb()}

    def rpc_master_epoch(self, args: dict[str, Any]) -> dict[str, Any]:
        """The highest master epoch this node has accepted (a call carrying a newer one has
        already raised it)."""
        return {"node": self.settings.node_name, "epoch": self.master_epoch}

    def rpc_master_vote(self, args: dict[str, Any]) -> dict[str, Any]:
        """For a master failover's vote: can this node reach the master's masterd (a TCP
        connect to `address`:`port`)? `reachable` false is a vote that the master is gone."""
        import socket

        address, port = str(args["address"]), int(args["port"])
        timeout = float(args.get("timeout", 2.0))
        try:
            with socket.create_connection((address, port), timeout=timeout):
                reachable, detail = True, "masterd answers"
        except OSError as err:
            reachable, detail = False, err.strerror or str(err)
        return {"node": self.settings.node_name, "master": args.get("master"),
                "reachable": reachable, "detail": detail, "epoch": self.master_epoch}

    def rpc_node_reachable(self, args: dict[str, Any]) -> dict[str, Any]:
        """For maintd's decision that a node failed (masterd.leases): does this node reach
        the node's noded, and how long ago did that node ask it for its lease?"""
        ok, detail = fence.reachable(str(args["address"]), ports.NODED,
                                     float(args.get("timeout", 2.0)))
        return {"node": self.settings.node_name, "reachable": ok, "detail": detail,
                "asked_age": self.witness.age(str(args["node"]))}

    def rpc_node_info(self, args: dict[str, Any]) -> dict[str, Any]:
        """The node's live figures (`herder.core.livefigures.NodeInfo`, noded/figures.py):
        the figures of the `storage_units` asked for ([type, name] pairs, Ganeti's), and with
        `instances: true` every live instance's run state."""
        from herder.noded import figures

        wanted = [(str(kind), str(name)) for kind, name in args.get("storage_units") or []]
        info = figures.node_info(self.hv, self.instances_dir,
                                 storage=figures.storage_units(self.bdev, wanted),
                                 with_instances=bool(args.get("instances")))
        return msgspec.to_builtins(info)

    def instance_spec(self, inst: dict[str, Any]) -> InstanceSpec:
        """The instance's domain spec from the master's payload and this node's facts (its
        disks as assembled here, the KVM probe, the uid of its processes, password files,
        interface addresses)."""
        from herder.noded import instance_spec

        hvparams = inst.get("hvparams") or {}
        real = self.hv.runs_guests
        passwords = {}
        for kind, path in instance_spec.password_files(hvparams).items():
            try:
                lines = self.local(path).read_text().splitlines()
            except OSError as err:
                raise RpcFailure(f"cannot read {kind}_password_file {path}: "
                                 f"{err.strerror or err}") from None
            passwords[kind] = lines[0] if lines else ""
        addresses = {name: address for name in instance_spec.bind_interfaces(hvparams)
                     if (address := interface_address(name)) is not None}
        serial_log = None
        if real and hvparams.get("serial_console", True):
            serial_log = str(self.serial_log(str(inst["name"])))
        uid = self._pool_uid(inst)
        user = hvparams.get("security_domain") if hvparams.get("security_model") == "user" \
            else None
        run_as = (uid, uid) if uid is not None else user_ids(str(user)) if user else None
        try:
            return instance_spec.from_payload(
                inst, self.instance_disks(inst), kvm_usable=self.hv.kvm_probe().usable,
                serial_log=serial_log, run_as=run_as, passwords=passwords,
                interface_addresses=addresses)
        except (KeyError, TypeError, ValueError) as err:
            raise RpcFailure(f"instance {inst.get('name')}: malformed payload ({err})") from None

    def define_domain(self, inst: dict[str, Any]) -> None:
        """Define the instance's domain from its config as it is now (changed parameters
        apply, a renamed instance gets its new name), after the node's checks: a missing
        bridge, a missing kernel, an occupied console port are refused before anything is
        created."""
        from herder.noded.kvm import domain, preflight

        spec = self.instance_spec(inst)
        try:
            if self.hv.runs_guests:
                preflight.check(spec, preflight.NodeFacts.of_this_node(spec))
            former = self.hv.define(spec)
        except (domain.DomainError, preflight.PreflightError) as err:
            raise RpcFailure(str(err)) from None
        if former is not None:  # the instance was renamed: its old name's records go
            self.forget(former)
            self.guard.forget(former)

    def _pool_uid(self, inst: dict[str, Any]) -> int | None:
        """A uid from the cluster's uid pool for the instance's processes (design-2.1), when
        the pool is set and the hypervisor runs processes (not the test driver). The uid is
        reserved by its lock file until the instance is removed."""
        pool = [tuple(r) for r in inst.get("uid_pool") or []]
        if not pool or not self.hv.runs_guests:
            return None
        from herder.core.uidpool import expand
        from herder.noded import uidpool

        record = paths.child(self.instances_dir, inst["name"], suffix=".uid",
                             what="instance name")
        if record.exists():
            return int(record.read_text())
        locked = uidpool.request_unused_uid(expand(pool), self.settings.state_dir / "uid-pool")
        atomic_write(record, str(locked.uid).encode(), 0o644)
        locked.unlock()  # the lock file stays: the uid is taken until released
        return locked.uid

    # --- the primary guard (herder.noded.guard) ---------------------------------------------

    @staticmethod
    def claim_of(args: dict[str, Any], inst: dict[str, Any] | None = None) -> vmclaim.Claim:
        try:
            claim = vmclaim.parse_claim(args)
        except vmclaim.ClaimError as err:
            raise RpcFailure(str(err)) from None
        if inst is not None and str(inst.get("uuid")) != claim.uuid:
            raise RpcFailure(f"the claim names instance {claim.uuid}, the call carries "
                             f"{inst.get('uuid')}")
        return claim

    @staticmethod
    def move_of(args: dict[str, Any]) -> vmclaim.Move | None:
        try:
            return vmclaim.parse_move(args)
        except vmclaim.ClaimError as err:
            raise RpcFailure(str(err)) from None

    def admit_run(self, args: dict[str, Any], inst: dict[str, Any]) -> None:
        """Refuse (guard.Refused) to start or define a domain this node is not the primary of,
        and (RpcFailure) any while it has fenced itself (noded.fence), before anything is
        created."""
        fenced = self.lease.refusal()
        if fenced is not None:
            raise RpcFailure(fenced)
        self.guard.admit_run(str(inst["name"]), self.claim_of(args, inst), self.move_of(args))

    def note_claim(self, name: str, args: dict[str, Any]) -> None:
        """A call that starts nothing: remember a newer claim when it carries one."""
        if vmclaim.CLAIM_KEY in args:
            self.guard.note(name, self.claim_of(args))

    # --- instances ------------------------------------------------------------------------------

    def rpc_instance_define(self, args: dict[str, Any]) -> None:
        inst = args["instance"]
        self.admit_run(args, inst)
        if self.hv.state(inst["name"]) not in RUNNING_STATES:
            self.define_domain(inst)
        self.record(inst["name"], "down", args.get("reason"), args.get("version"))

    def rpc_instance_start(self, args: dict[str, Any]) -> None:
        inst = args["instance"]
        self.admit_run(args, inst)
        starting = self.hv.state(inst["name"]) not in RUNNING_STATES
        if starting:
            self.define_domain(inst)  # from the config, at every start
        self.hv.start(inst["name"])
        if starting:
            self.routed_nics_up(inst)
        ordered.clear(self.settings.run_dir, inst["name"])
        self.record(inst["name"], "up", args.get("reason"), args.get("version"))

    def rpc_instance_shutdown(self, args: dict[str, Any]) -> None:
        name = args["name"]
        timeout = float(args.get("timeout", 120))
        self.note_claim(name, args)
        with ordered.expect(self.settings.run_dir, name, "shutdown", timeout):
            self.hv.shutdown(name, timeout)
        self.routed_nics_gone(args.get("instance"))
        self.record(name, "down", args.get("reason"), args.get("version"))

    def rpc_instance_reboot(self, args: dict[str, Any]) -> None:
        name = args["name"]
        hard = args.get("type", "hard") != "soft"
        # a reboot starts the domain again: only on its primary
        self.guard.admit_run(name, self.claim_of(args), None)
        with ordered.expect(self.settings.run_dir, name, "reboot", 120):
            self.hv.reboot(name, hard=hard)
        if hard and args.get("instance"):  # a new QEMU, new taps
            self.routed_nics_up(args["instance"])
        self.record(name, "up", args.get("reason"), args.get("version"))

    def rpc_instance_balloon_memory(self, args: dict[str, Any]) -> None:
        """Ganeti's instance_balloon_memory: the running guest's memory, through its balloon
        (a migration to a node with less free memory, allow_runtime_changes)."""
        name = str(args["name"])
        self.note_claim(name, args)
        try:
            self.hv.balloon(name, int(args["memory"]))
        except HypervisorError as err:
            raise RpcFailure(f"cannot set the memory of {name} to {args['memory']} MiB: "
                             f"{err}") from None

    # --- routed NICs (herder.noded.kvm.ifup, Ganeti's kvm-ifup) ---------------------------------

    def routed_nics_up(self, inst: dict[str, Any], *, strict: bool = True) -> list[str]:
        """Ganeti's kvm-ifup for the instance's routed NICs once its domain runs here. A
        failure stops the domain again (strict, a start) or is a warning (the migration's
        target, as Ganeti's FinalizeMigrationDst)."""
        from herder.noded import instance_spec
        from herder.noded.kvm import ifup

        spec = instance_spec.network_spec(inst)
        if not self.hv.runs_guests or not ifup.routed_nics(spec):
            return []
        try:
            ifup.configure(spec, hook=self.local(ifup.HOOK))
        except ifup.IfupError as err:
            if not strict:
                log.warning("%s", err)
                return [str(err)]
            with ordered.expect(self.settings.run_dir, spec.name, "shutdown", 60):
                self.hv.destroy(spec.name)
            ifup.unconfigure(spec)
            raise RpcFailure(f"instance {spec.name} stopped again: {err}") from None
        return []

    def configure_routed_nic(self, spec: InstanceSpec, index: int) -> None:
        """Ganeti's kvm-ifup for one routed NIC just hotplugged."""
        from herder.noded.kvm import ifup

        try:
            ifup.configure_nic(spec, index, hook=self.local(ifup.HOOK))
        except ifup.IfupError as err:
            raise RpcFailure(str(err)) from None

    def routed_nics_gone(self, inst: dict[str, Any] | None) -> None:
        """After the domain's QEMU ended here: its routed taps' `ip rule`s go."""
        from herder.noded import instance_spec
        from herder.noded.kvm import ifup

        if inst and self.hv.runs_guests:
            ifup.unconfigure(instance_spec.network_spec(inst))

    def rpc_instance_remove(self, args: dict[str, Any]) -> None:
        name = args["name"]
        with ordered.expect(self.settings.run_dir, name, "remove", 60):
            self.hv.undefine(name)
        self.remove_instance_disks(args.get("disks", []))
        self.forget(name)
        self.guard.forget(name)
        log_file = console_names.serial_log(self.serial_log_dir, name)
        for stale in (log_file, log_file.with_name(log_file.name + ".1")):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()  # the serial log goes with the instance (a new one is another VM)

    def rpc_instance_stop_stray(self, args: dict[str, Any]) -> dict[str, Any]:
        """Destroy and undefine this node's copy of an instance whose primary is another node
        (the claim says which): a copy left by a failed or interrupted move. Refused when the
        claim names this node as the primary. The disks stay (a DRBD secondary needs them)."""
        name = args["name"]
        self.guard.not_mine(name, self.claim_of(args))
        before = self.hv.state(name)
        with ordered.expect(self.settings.run_dir, name, "stray", 60):
            self.hv.undefine(name)
        self.forget(name)
        log.warning("stopped the stray copy of %s (it was %s)", name, before or "absent")
        return {"node": self.settings.node_name, "name": name, "was": before}

    def rpc_instance_console_log(self, args: dict[str, Any]) -> str:
        """The tail of the instance's serial log (`noded.console`)."""
        return console.tail(self.serial_log_dir, args["instance"],
                            int(args.get("lines", console_names.LOG_LINES_DEFAULT)))

    @property
    def serial_log_dir(self) -> Path:
        return self.local(self.settings.serial_log_dir)

    def serial_log(self, name: str) -> Path:
        """Where the instance's domain writes its serial console (`InstanceSpec.serial_log`)."""
        self.serial_log_dir.mkdir(mode=0o750, parents=True, exist_ok=True)
        return console_names.serial_log(self.serial_log_dir, name)

    def rpc_instance_list(self, args: dict[str, Any]) -> dict[str, str]:
        return self.hv.list_domains()

    def rpc_migrate_prepare(self, args: dict[str, Any]) -> dict[str, Any]:
        name = args["name"]
        self.note_claim(name, args)
        return {"xml": self.hv.xml_of(name), "state": self.hv.state(name)}

    def rpc_migrate_accept(self, args: dict[str, Any]) -> None:
        inst = args["instance"]
        if self.move_of(args) is None:
            raise RpcFailure(f"migrate_accept of {inst['name']} names no move")
        self.admit_run(args, inst)
        self.instance_disks(inst)  # the disks attached here before the domain comes
        self.hv.define_xml(inst["name"], args["xml"])
        if args.get("start", True):
            self.hv.start(inst["name"])
            ordered.clear(self.settings.run_dir, inst["name"])
        self.record(inst["name"], "up" if args.get("start", True) else "down",
                    args.get("reason"), args.get("version"))

    def rpc_migrate_finish(self, args: dict[str, Any]) -> None:
        name = args["name"]
        move = self.move_of(args)
        if move is not None:  # from now on the old claim cannot start it here
            self.guard.moved_away(name, self.claim_of(args), move)
        with ordered.expect(self.settings.run_dir, name, "migrate", 60):
            self.hv.undefine(name)
        if args.get("remove_disks"):
            self.remove_instance_disks(args.get("disks", []))
        self.forget(name)

    # --- live migration, Ganeti's RPC order (herder.noded.migrations) --------------------------

    @property
    def migrations(self) -> Migrations:
        """This node's outgoing migrations (on the hypervisor it talks to now)."""
        if self._migrations is None or self._migrations.uri != self.hv.uri:
            self._migrations = Migrations(self.hv.uri, LibvirtPki(self.data_dir / "libvirt-pki"))
        return self._migrations

    def rpc_instance_migratable(self, args: dict[str, Any]) -> dict[str, Any]:
        """Whether the instance runs here and this hypervisor can migrate it live; `method`
        "libvirt" (live migration) or "restart" (libvirt's test driver, which runs nothing:
        the master's define-and-start stand-in)."""
        name = args["name"]
        self.note_claim(name, args)
        state = self.hv.state(name)
        running = state in RUNNING_STATES
        if not self.hv.runs_guests:
            return {"running": running, "state": state, "method": "restart",
                    "reason": "libvirt's test driver cannot migrate a domain (it runs none)"}
        return {"running": running, "state": state, "method": "libvirt",
                "reason": "" if running else f"instance {name} is not running on "
                f"{self.settings.node_name} ({state or 'not defined'})"}

    def rpc_migration_info(self, args: dict[str, Any]) -> dict[str, Any]:
        """The source's view of the running domain (Ganeti's migration_info)."""
        name = args["name"]
        self.note_claim(name, args)
        return {"xml": self.hv.xml_of(name), "state": self.hv.state(name),
                "node": self.settings.node_name}

    def rpc_accept_instance(self, args: dict[str, Any]) -> None:
        """The target's checks before libvirt brings the guest here (Ganeti's
        accept_instance): this node may run it during the move (the guard), its disks are
        here, its bridges and files exist; no domain of it runs here already."""
        from herder.noded.kvm import domain, preflight

        inst = args["instance"]
        if self.move_of(args) is None:
            raise RpcFailure(f"accept_instance of {inst['name']} names no move")
        self.admit_run(args, inst)
        if self.hv.state(inst["name"]) in RUNNING_STATES:
            raise RpcFailure(f"instance {inst['name']} already runs on "
                             f"{self.settings.node_name}")
        spec = self.instance_spec(inst)
        try:
            domain.domain_xml(spec)
            preflight.check(spec, preflight.NodeFacts.of_this_node(spec))
        except (domain.DomainError, preflight.PreflightError) as err:
            raise RpcFailure(str(err)) from None

    def rpc_migrate_instance(self, args: dict[str, Any]) -> None:
        """Start libvirt's migration of the running domain to the target node (returns at
        once; instance_get_migration_status follows it)."""
        from herder.noded.kvm import migration

        inst = args["instance"]
        name = inst["name"]
        move = self.move_of(args)
        if move is None or move.target != args["target"]:
            raise RpcFailure(f"migrate_instance of {name} names no move to {args['target']}")
        self.note_claim(name, args)
        try:
            settings = migration.MigrationSettings.from_hvparams(
                inst.get("hvparams") or {}, live=bool(args.get("live", True)))
        except migration.MigrationError as err:
            raise RpcFailure(str(err)) from None
        with contextlib.suppress(OSError):
            ordered.mark(self.settings.run_dir, name, "migrate", 3600)
        try:
            self.migrations.start(name, str(args["target"]), settings)
        except HerderError as err:
            with contextlib.suppress(OSError):
                ordered.clear(self.settings.run_dir, name)
            raise RpcFailure(str(err)) from None

    def rpc_instance_get_migration_status(self, args: dict[str, Any]) -> dict[str, Any]:
        return dict(self.migrations.status(args["name"]))

    def rpc_finalize_migration_src(self, args: dict[str, Any]) -> dict[str, Any]:
        """After the migration: on success the domain left this node (its records go, the
        guard notes the move); on failure it is made to run here again (a migration still
        going is aborted, a guest paused by it resumed)."""
        import libvirt

        name = args["name"]
        success = bool(args["success"])
        if not success:
            self.migrations.abort(name)
        self.migrations.finish(name)
        state = self.hv.state(name)
        if success:
            if state in RUNNING_STATES:
                raise RpcFailure(f"instance {name} still runs on {self.settings.node_name} "
                                 "after its migration")
            move = self.move_of(args)
            if move is not None:
                self.guard.moved_away(name, self.claim_of(args), move)
            if state is not None:
                self.hv.undefine(name)
            self.hv.forget_definition(name)
            self.forget(name)
            self.routed_nics_gone(args.get("instance"))
            with contextlib.suppress(OSError):
                ordered.mark(self.settings.run_dir, name, "migrate", ordered.GRACE)
            return {"state": None}

        def resume(conn: Any) -> None:
            dom = conn.lookupByName(name)
            current, reason = dom.state()
            if current == libvirt.VIR_DOMAIN_PAUSED and reason in (
                    libvirt.VIR_DOMAIN_PAUSED_MIGRATION, libvirt.VIR_DOMAIN_PAUSED_USER,
                    libvirt.VIR_DOMAIN_PAUSED_POSTCOPY_FAILED):
                dom.resume()

        if state is not None:
            self.hv.call(resume)
        with contextlib.suppress(OSError):
            ordered.clear(self.settings.run_dir, name)
        return {"state": self.hv.state(name)}

    def rpc_finalize_migration_dst(self, args: dict[str, Any]) -> dict[str, Any]:
        """After the migration: on success the domain that arrived is recorded as this node's;
        on failure an incoming copy that never ran is removed (a running one is not: it is the
        instance, and the master's cleanup decides)."""
        inst = args["instance"]
        name = inst["name"]
        state = self.hv.state(name)
        if args["success"]:
            if state not in RUNNING_STATES:
                raise RpcFailure(f"instance {name} does not run on {self.settings.node_name} "
                                 f"after its migration ({state or 'absent'})")
            self.hv.record_current(name)
            ordered.clear(self.settings.run_dir, name)
            self.record(name, "up", args.get("reason"), args.get("version"))
            # routed NICs only now that the guest is here (Ganeti's FinalizeMigrationDst)
            return {"state": state, "warnings": self.routed_nics_up(inst, strict=False)}
        if state == "running":
            raise RpcFailure(f"instance {name} runs on {self.settings.node_name}; not "
                             "removing it (clean up the migration to settle where it runs)")
        if state is not None:
            with ordered.expect(self.settings.run_dir, name, "migrate", 60):
                self.hv.undefine(name)
        self.forget(name)
        return {"state": None}

    def rpc_instance_os_add(self, args: dict[str, Any]) -> dict[str, Any]:
        """Install the instance's OS: the OS definition's `create` script (OS API 10/15/20),
        with the documented environment; an unknown variant is refused unless forced."""
        return self._os_script(args["instance"], "create", "add-",
                               force_variant=bool(args.get("force_variant")))

    def rpc_instance_run_rename(self, args: dict[str, Any]) -> dict[str, Any]:
        """The OS definition's `rename` script after an instance rename (Ganeti's
        instance_run_rename: OLD_INSTANCE_NAME in its environment)."""
        return self._os_script(args["instance"], "rename", "rename-",
                               old_name=str(args["old_name"]))

    @staticmethod
    def _os_data(inst: dict[str, Any], os_disks: list[tuple[str, str | None]]) -> Any:
        from herder.noded import osdef

        return osdef.OsInstanceData(
            name=inst["name"], os=inst["os"], hypervisor=inst.get("hypervisor", "kvm"),
            disks=[osdef.OsDisk(path=path, uri=uri) for path, uri in os_disks],
            nics=[osdef.OsNic(mac=n["mac"], ip=n.get("ip"), mode=n.get("mode", "bridged"),
                              link=n.get("link") or "") for n in inst.get("nics", [])],
            hvparams=inst.get("hvparams", {}), beparams=inst.get("beparams", {}),
            osparams=inst.get("osparams", {}))

    def os_stream(self, inst: dict[str, Any], script: Any, index: int,
                  device: str) -> disk_transfer.OsStream:
        """The OS `export` or `import` script of disk `index` (at `device`) of the instance
        (its master payload), with Ganeti's environment (EXPORT_/IMPORT_DEVICE and _INDEX)."""
        from herder.noded import osdef

        try:
            definition = osdef.find_os(osdef.split_os_name(inst["os"])[0],
                                       list(self.settings.os_path))
            with self.os_disk_paths(inst, install=False) as os_disks:
                env = osdef.os_environment(definition, self._os_data(inst, os_disks))
            env.update(osdef.script_variables(script, disk_index=index, disk_path=device))
        except osdef.OsError as err:
            raise RpcFailure(f"OS {inst['os']!r} for {inst['name']}: {err}") from None
        log_dir = self.settings.state_dir / "os-logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        return disk_transfer.OsStream(
            definition=definition, script=script, env=env, timeout=self.settings.os_timeout,
            log_file=paths.child(log_dir, inst["name"], prefix=f"{script}-",
                                 suffix=f"-{index}.log", what="instance name"))

    def _os_script(self, inst: dict[str, Any], script: Any, log_prefix: str, *,
                   force_variant: bool = True, old_name: str | None = None) -> dict[str, Any]:
        from herder.noded import osdef

        try:
            definition = osdef.find_os(osdef.split_os_name(inst["os"])[0],
                                       list(self.settings.os_path))
            osdef.check_variant(definition, inst["os"], force=force_variant)
            # only `create` writes the disks: an rbd image is staged and imported for it alone
            with self.os_disk_paths(inst, install=script == "create") as os_disks:
                env = osdef.os_environment(definition, self._os_data(inst, os_disks))
                env.update(osdef.script_variables(script, old_name=old_name))
                log_dir = self.settings.state_dir / "os-logs"
                log_dir.mkdir(parents=True, exist_ok=True)
                result = osdef.run_os_script(definition, script, env, self.settings.os_timeout,
                                             paths.child(log_dir, inst["name"],
                                                         prefix=log_prefix, suffix=".log",
                                                         what="instance name"))
        except osdef.OsError as err:
            raise RpcFailure(f"OS {inst['os']!r} for {inst['name']}: {err}") from None
        return {"os": inst["os"], "log": str(getattr(result, "log_file", ""))}

    def rpc_os_list(self, args: dict[str, Any]) -> list[str]:
        from herder.noded import osdef

        return osdef.os_names_with_variants(osdef.list_oses(list(self.settings.os_path)))

    def rpc_node_powercycle(self, args: dict[str, Any]) -> str:
        """Reboot at once (herder.noded.powercycle: reboot(2), refused where it would reboot
        a machine that is not this node)."""
        why_not = powercycle.refusal()
        if why_not is not None:
            raise RpcFailure(f"refusing to power-cycle: {why_not}")
        self.powercycled.append(time.time())
        with open(self.settings.state_dir / "powercycle.log", "a") as fh:
            fh.write(f"{time.time():.3f} powercycle requested\n")
        powercycle.reboot_soon()
        return "rebooting"

    def rpc_repair_command(self, args: dict[str, Any]) -> dict[str, Any]:
        """A white-listed repair command, with the diagnose object on stdin (live-repair)."""
        name = str(args.get("command", ""))
        path = whitelisted(self.settings.repair_dir, name)
        try:
            proc = subprocess.run([str(path)], input=json.dumps(args.get("input")), text=True,
                                  capture_output=True, timeout=self.settings.repair_timeout,
                                  env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C"},
                                  check=False)
        except subprocess.TimeoutExpired:
            raise RpcFailure(f"repair command {name} did not finish within "
                             f"{self.settings.repair_timeout:g}s") from None
        if proc.returncode != 0:
            raise RpcFailure(f"repair command {name} failed with exit code {proc.returncode}: "
                             f"{proc.stderr.strip()[-200:]}")
        return {"stdout": proc.stdout, "exit_code": proc.returncode}

    def rpc_storage_list(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        """Storage units of a type (design-2.1): lvm-pv, lvm-vg, or file directories."""
        from herder.noded import storage

        kind = str(args.get("type", "lvm-vg"))
        dirs = [str(d) for d in args.get("dirs", []) if d]
        name = args.get("name")
        if name is not None:
            problem = storage_units.unit_name_problem(kind, str(name), dirs)
            if problem:
                raise RpcFailure(f"storage {kind}: {problem}")
        try:
            unit_type = storage.get_storage(kind, dirs) if kind == "file" \
                else storage.get_storage(kind)
            return unit_type.list_units(name)
        except HerderError as err:
            raise RpcFailure(f"storage {kind}: {err}") from None

    def rpc_storage_repair(self, args: dict[str, Any]) -> dict[str, Any]:
        from herder.noded import storage

        try:
            result = storage.repair_vg(str(args["name"]), remove_partial_lvs=True)
            return dataclasses.asdict(result) if dataclasses.is_dataclass(result) else result
        except HerderError as err:
            raise RpcFailure(f"repair of volume group {args['name']}: {err}") from None

    def rpc_storage_modify(self, args: dict[str, Any]) -> None:
        from herder.noded import storage

        if args.get("type") != "lvm-pv" or "allocatable" not in args:
            raise RpcFailure("only lvm-pv units can be modified (allocatable)")
        try:
            storage.set_pv_allocatable(str(args["name"]), bool(args["allocatable"]))
        except HerderError as err:
            raise RpcFailure(f"storage lvm-pv {args['name']}: {err}") from None

    # --- redistribution (docs/ha.md "Redistribution") -------------------------------------------

    @property
    def ssconf_dir(self) -> Path:
        """Ganeti's place: `ssconf_<name>` files in the data directory."""
        return self.data_dir

    def upload_allowed(self) -> set[str]:
        """The white-list of upload_file: the cluster secrets and the user list beside the
        config, and the files the master listed in ssconf `redist_files`."""
        from herder.core.cluster_secrets import SecretPaths
        from herder.core.redist import REDIST_FILES, UPLOAD_LIST

        secrets = SecretPaths.beside(self.settings.config_dir / "config.json")
        allowed = {str(p) for p in secrets.all()}
        allowed.add(str(self.settings.config_dir / REDIST_FILES))
        with contextlib.suppress(OSError):
            listed = (self.ssconf_dir / f"ssconf_{UPLOAD_LIST}").read_text().splitlines()
            allowed.update(line.strip() for line in listed if line.strip())
        return allowed

    def rpc_upload_file(self, args: dict[str, Any]) -> dict[str, Any]:
        """Write a white-listed file (absolute `path`, base64 `data`, `mode`, optional
        `uid`/`gid`) atomically under the file root."""
        import base64

        path = str(args["path"])
        parts = Path(path).parts
        if not path.startswith("/") or ".." in parts or "\0" in path \
                or (len(parts) > 1 and parts[1] in ("proc", "sys", "dev")):
            raise RpcFailure(f"refusing to upload to {path!r}: not a plain absolute path")
        if path not in self.upload_allowed():
            raise RpcFailure(f"refusing to upload {path}: not a file the cluster distributes")
        target = self.local(path)
        data = base64.b64decode(str(args["data"]), validate=True)
        mode = int(args.get("mode", 0o600)) & 0o777
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, data, mode)
        os.chmod(target, mode)  # atomic_write's mode is filtered by the umask
        if args.get("uid") is not None or args.get("gid") is not None:
            os.chown(target, int(args.get("uid", -1)), int(args.get("gid", -1)))
        return {"path": str(target), "size": len(data)}

    def rpc_write_ssconf(self, args: dict[str, Any]) -> list[str]:
        """Write `ssconf_<name>` files (Ganeti's ssconf) atomically into the data directory."""
        values = args["values"]
        if not isinstance(values, dict):
            raise RpcFailure("values must be an object")
        self.ssconf_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for name, text in sorted(values.items()):
            if not name or not all(ch.isalnum() or ch == "_" for ch in name):
                raise RpcFailure(f"invalid ssconf name {name!r}")
            atomic_write(self.ssconf_dir / f"ssconf_{name}", str(text).encode(), 0o644)
            written.append(name)
        self.follow_node_params()
        if libvirt_tls.SSCONF_NAME in values:  # the master's libvirt CAs: trusted at once
            libvirt_tls.refresh(self.data_dir, conf=self.local(libvirt_tls.LIBVIRTD_CONF))
        return written

    def rpc_libvirt_tls(self, args: dict[str, Any]) -> dict[str, Any]:
        """This node's libvirt certificate (`masterd.libvirt_trust`): stage `request` makes a
        new key (kept here) and answers its certificate signing request (`csr`, PEM); stage
        `install` takes the master's `certificate` for it, which libvirtd then serves and
        shows (reloaded without a restart where herder configures it)."""
        pki = LibvirtPki(self.data_dir / "libvirt-pki")
        if args["stage"] == "request":
            return {"csr": libvirt_tls.request(self.settings.node_name, pki).decode()}
        try:
            libvirt_tls.install_certificate(self.settings.node_name, pki,
                                            str(args["certificate"]).encode())
        except HerderError as err:
            raise RpcFailure(str(err)) from None
        problem = libvirt_tls.refresh(self.data_dir, pki,
                                      conf=self.local(libvirt_tls.LIBVIRTD_CONF))
        return {"installed": True, "reload_problem": problem}

    def rpc_write_config(self, args: dict[str, Any]) -> dict[str, Any]:
        """A master candidate's copy of the config and the job queue where its readers find
        them (`<data dir>/config.json`, `<data dir>/queue/`: confd, mond, and masterd after a
        failover): written atomically under the config's writer lock, and only forward (an
        older serial than the copy's is refused). With `journal`, the master's journal: the
        whole file beside a new snapshot, or its new records appended where this copy's
        journal ends (refused unless this copy continues the same snapshot up to `offset`),
        so a change costs the candidate its records, not the document."""
        import base64

        serial = int(args["serial"])
        document = args.get("config")
        journal = args.get("journal")
        current = self.data_dir / "config.json"
        store = FileStore(current)
        queue_dir = self.data_dir / "queue"
        with self._map_lock, store.locked():
            have: int | None = None
            if document is not None or journal is None or int(journal["offset"]) == 0:
                # through the store: a former master's snapshot has a journal beside it
                have = store.serial_no()
                if have is not None and serial < have:
                    raise RpcFailure(f"refusing config serial {serial}: this node has {have}")
            if journal is not None:
                records = base64.b64decode(str(journal["data"]), validate=True)
                digest, offset = str(journal["snapshot"]), int(journal["offset"])
            queue_dir.mkdir(parents=True, exist_ok=True)
            if document is not None:
                atomic_write(current, str(document).encode(), CONFIG_MODE)
            if journal is not None:
                try:
                    store.write_journal(digest, offset, records)
                except StoreError as err:
                    raise RpcFailure(str(err)) from None
            queue = args.get("queue") or {}
            for name, data in sorted((queue.get("files") or {}).items()):
                if "/" in name or name.startswith(".") or not name.endswith(".json"):
                    raise RpcFailure(f"invalid job queue file name {name!r}")
                atomic_write(queue_dir / name, base64.b64decode(data, validate=True), 0o600)
            names = queue.get("names")
            if names is not None:
                keep = set(names)
                for path in queue_dir.glob("*.json"):
                    if path.name not in keep:
                        with contextlib.suppress(FileNotFoundError):
                            path.unlink()
        return {"serial": serial, "previous": have}

    def rpc_renew_crypto(self, args: dict[str, Any]) -> dict[str, Any]:
        """`herder cluster renew-crypto` (`masterd.renew`): stage `install` takes the new CA
        (`ca`, base64 of server.pem), this node's new certificate (`node_certificate`, key and
        certificate) and the new HMAC key (`hmac_key`), the old ones staying accepted; stage
        `retire` stops accepting the old ones and restarts the daemons that read the key at
        start (those that run). noded applies the files without a restart."""
        import base64

        stage = str(args.get("stage", ""))
        if stage == "install":
            try:
                blobs = [base64.b64decode(str(args[k]), validate=True)
                         for k in ("ca", "node_certificate", "hmac_key")]
            except (KeyError, ValueError) as err:
                raise RpcFailure(f"renew_crypto install needs ca, node_certificate and "
                                 f"hmac_key: {err}") from None
            self.trust.rotate(*blobs)
            return {"stage": stage}
        if stage == "retire":
            from herder.noded.node_role import restart_running

            retired = self.trust.retire()
            master = ssconf.master_node(self.data_dir) == self.settings.node_name
            restarting = restart_running(RENEW_RESTART + (RENEW_RESTART_MASTER if master
                                                          else ()))
            return {"stage": stage, "retired": retired, "restarting": restarting}
        raise RpcFailure(f"renew_crypto: unknown stage {stage!r}")

    def dispatch(self, method: str, args: dict[str, Any]) -> Any:
        handler = getattr(self, f"rpc_{method}", None)
        if handler is None:
            raise RpcFailure(f"unknown RPC {method!r}")
        with self._lock if method in _SERIAL else _nolock():
            return handler(args)


# After a rotation, the daemons that read the cluster key or certificate once, at start.
RENEW_RESTART = ("confd", "mond", "instmon")
RENEW_RESTART_MASTER = ("masterd", "maintd")
_SERIAL = {"instance_start", "instance_define", "instance_remove", "migrate_accept",
           "migrate_finish", "blockdev_create", "blockdev_remove", "instance_stop_stray",
           "accept_instance", "migrate_instance", "finalize_migration_src",
           "finalize_migration_dst", "blockdev_rename", "blockdev_grow",
           "file_storage_dir_create", "file_storage_dir_remove", "file_storage_dir_rename",
           "hotplug_device", "instance_disk_resize"}


class _nolock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


RUNNING_STATES = ("running", "blocked", "paused")


def interface_address(name: str) -> str | None:
    """The first IPv4 (else IPv6) address of a network interface of this node."""
    done = subprocess.run(["ip", "-j", "addr", "show", "dev", name], capture_output=True,
                          text=True, timeout=10, check=False)
    if done.returncode != 0:
        return None
    try:
        infos = [a for link in json.loads(done.stdout) for a in link.get("addr_info", [])]
    except (ValueError, AttributeError, TypeError):
        return None
    for family in ("inet", "inet6"):
        for info in infos:
            if info.get("family") == family and info.get("local"):
                return str(info["local"])
    return None


def user_ids(user: str) -> tuple[int, int] | None:
    """uid and gid of a local user (security_model=user's security_domain)."""
    import pwd

    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise RpcFailure(f"security_domain {user!r} is no user on this node") from None
    return entry.pw_uid, entry.pw_gid


def whitelisted(directory: Path, name: str) -> Path:
    """The repair command `name`, when white-listed (`herder.core.whitelist`)."""
    try:
        return whitelist.check_command(directory, name, "repair command")
    except whitelist.NotWhitelisted as err:
        raise RpcFailure(f"not white-listed: {err}") from None


def vm_locked_kb() -> int:
    """VmLck of this process (non-zero once mlockall worked)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmLck:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def refuse_arguments(daemon: NodeDaemon, method: str, args: dict[str, Any]
                     ) -> web.Response | None:
    """404 for a method the node does not have, 400 for arguments its schema refuses
    (`herder.noded.rpcargs`); None when the call may run."""
    if not method.isidentifier() or not callable(getattr(daemon, f"rpc_{method}", None)):
        return web.Response(status=404, body=_encode({"error": f"unknown RPC {method[:64]!r}"}),
                            content_type="application/json")
    try:
        rpcargs.check(method, args)
    except rpcargs.BadArguments as err:
        log.warning("refused RPC %s: %s", method, err)
        return web.Response(status=400, body=_encode({"error": str(err)}),
                            content_type="application/json")
    return None


def make_app(daemon: NodeDaemon) -> web.Application:
    checker = rpccheck.RequestChecker(daemon.hmac_keys, daemon.settings.node_name)
    joining = join.JoinSteps(daemon.trust, daemon.settings.node_name)

    async def rpc(request: web.Request) -> web.Response:
        body = await request.read()
        method = request.match_info["method"]
        try:
            tls = request.transport.get_extra_info("ssl_object") \
                if request.transport is not None else None
            if tls is not None:  # plain HTTP only in in-process tests (daemon.serve: TLS)
                refusal = daemon.trust.refusal(tls.getpeercert(binary_form=True))
                if refusal is not None:
                    raise rpccheck.Refused(403, f"refused: {refusal}")
            args = checker.check(method, body)
        except rpccheck.Refused as err:
            log.warning("refused RPC %s from %s: %s", method, request.remote, err.message)
            return web.Response(status=err.status, body=_encode({"error": err.message}),
                                content_type="application/json")
        refused = refuse_arguments(daemon, method, args)
        if refused is not None:
            return refused
        if EPOCH_KEY in args:
            try:
                daemon.accept_epoch(args.pop(EPOCH_KEY))
            except StaleEpoch as err:
                log.warning("refused RPC %s from %s: %s", method, request.remote, err)
                return web.Response(status=409, body=_encode({"error": str(err)}),
                                    content_type="application/json")
            except OSError as err:
                return web.Response(status=500, body=_encode({
                    "error": f"cannot record the master epoch: {err}"}),
                    content_type="application/json")
        try:
            result = await asyncio.to_thread(daemon.dispatch, method, args)
            if method == "renew_crypto":
                daemon.trust.refresh()  # here, in the loop that makes the handshakes
        except (HerderError, KeyError, ValueError, OSError) as err:
            message = str(err) if not isinstance(err, KeyError) else f"missing argument {err}"
            log.warning("RPC %s failed: %s", method, message)
            return web.Response(status=500, body=_encode({"error": message}),
                                content_type="application/json")
        except Exception:  # a bug: logged with its traceback, one line to the master
            log.exception("RPC %s failed", method)
            return web.Response(status=500, body=_encode({
                "error": f"internal error in {method}; see the node daemon's log"}),
                content_type="application/json")
        return web.Response(body=_encode({"result": result}), content_type="application/json")

    async def join_step(request: web.Request) -> web.Response:
        """A join step (noded.join): only on a node that has not joined, the token proven."""
        body = await request.read()
        step = request.match_info["step"]
        try:
            result = joining.handle(step, body)
        except join.JoinRefused as err:
            log.warning("refused join step %s from %s: %s", step, request.remote, err)
            return web.Response(status=err.status, body=_encode({"error": str(err)}),
                                content_type="application/json")
        except (HerderError, OSError) as err:
            log.warning("join step %s failed: %s", step, err)
            return web.Response(status=500, body=_encode({"error": str(err)}),
                                content_type="application/json")
        if step == "install":
            daemon.trust.refresh()  # the next handshakes: node certificate, cluster callers
            log.info("joined the cluster (node certificate %s)", result.get("digest"))
            await asyncio.to_thread(daemon.follow_node_params)
        return web.Response(body=_encode({"result": result}), content_type="application/json")

    async def import_stream(request: web.Request) -> web.Response:
        """A disk's bytes from another node of the cluster (`noded.disk_transfer`): its node
        certificate and the token of a prepared import."""
        tls = request.transport.get_extra_info("ssl_object") \
            if request.transport is not None else None
        if tls is not None:
            refusal, _ = daemon.trust.node_refusal(tls.getpeercert(binary_form=True))
            if refusal is not None:
                return web.Response(status=403, body=_encode({"error": f"refused: {refusal}"}),
                                    content_type="application/json")
        pending = daemon.imports.take(request.match_info["token"])
        if pending is None:
            return web.Response(status=403, body=_encode({"error": "no such import"}),
                                content_type="application/json")
        try:
            writer = await asyncio.to_thread(disk_transfer.open_writer, pending)
        except OSError as err:
            return web.Response(status=500, body=_encode({
                "error": f"cannot open {pending.path}: {err.strerror}"}),
                content_type="application/json")
        try:
            while chunk := await request.content.read(disk_transfer.CHUNK):
                await asyncio.to_thread(writer.write, chunk)
            result = await asyncio.to_thread(writer.close)
        except (HerderError, OSError) as err:
            writer.abort()
            log.warning("import into %s failed: %s", pending.path, err)
            return web.Response(status=500, body=_encode({"error": str(err)}),
                                content_type="application/json")
        log.info("imported %s bytes into %s", result["bytes"], pending.path)
        return web.Response(body=_encode({"result": result}), content_type="application/json")

    app = web.Application(client_max_size=16 * 1024 * 1024)
    app.router.add_post("/rpc/{method}", rpc)
    ROUTES.declare(rpc, access.NODE_RPC)
    app.router.add_post("/import/{token}", import_stream)
    ROUTES.declare(import_stream, access.NODE_IMPORT)
    app.router.add_post("/join/{step}", join_step)
    ROUTES.declare(join_step, access.JOIN_TOKEN)
    console.add_routes(app, daemon, checker, ROUTES)
    fence.add_routes(app, daemon, ROUTES)  # the master candidates' lease renewals
    return app


async def keep_hypervisor(daemon: NodeDaemon, stop: asyncio.Event,
                          every: float = 2.0) -> None:
    """Hold the libvirt connection; after a libvirtd restart, re-define the node's domains."""
    while not stop.is_set():
        await asyncio.to_thread(daemon.follow_node_params)
        await asyncio.to_thread(daemon.hv.check)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=every)

