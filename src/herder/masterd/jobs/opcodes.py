"""Opcodes: what a job asks for, with Ganeti's `OP_ID` names and field names.

Each opcode is a msgspec Struct tagged by `OP_ID`, validated once when a job is submitted
(`parse`): unknown OP_IDs and unknown fields are refused with a message. Every opcode carries
the common fields (`dry_run`, `debug_level`, `priority`, `depends`, `comment`, `reason`).

Submission is the edge every change passes (RAPI routes, herder's job route, the CLI through
either, `--offline` through the same queue code), so each opcode also checks its values there
(`__post_init__`): parameters with their types, ranges and relations (`herder.core.params`),
new names by their rules (`herder.core.names`), timeouts, indices and ports by Ganeti's ranges.
A refused opcode is never queued; what needs the config (the instance's own hypervisor, the
inherited parameters) its LU checks before it changes anything.
"""

from __future__ import annotations

import functools
import ipaddress
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any, ClassVar, Literal, TypeVar

import msgspec
import msgspec.inspect

from herder.core import addrpool, backupsched, exportconf, model, names, params, reason, uidpool
from herder.core.errors import ConfigError, HerderError

PRIORITY_HIGHEST, PRIORITY_NORMAL, PRIORITY_LOWEST = -20, 0, 19
_V = TypeVar("_V")
REDACTED = "<redacted>"  # what a secret field shows (Ganeti's constants.REDACTED)
# A secret field (Ganeti's ht.TSecret / TPrivate parameter types): the opcode's LU gets it, but
# wherever the job is shown (RAPI, the CLI, the web console) and once the job has ended, in its
# stored opcode too, it is REDACTED (`redacted`)
SecretText = Annotated[str, msgspec.Meta(extra={"secret": True})]


class OpcodeError(HerderError):
    """An opcode (or job) submitted is malformed."""


FinalJobStatus = Literal["canceled", "error", "success"]  # Ganeti's JOBS_FINALIZED
# Ganeti's job dependency: [job id, [final statuses]]; the id a number (negative: relative to
# the submission, resolved when queued: masterd.jobs.depends) or a text of digits
Dependency = tuple[int, list[FinalJobStatus]]


class OpCode(msgspec.Struct, kw_only=True, tag_field="OP_ID", forbid_unknown_fields=True,
             omit_defaults=False):
    # A query that changes nothing (instance info, storage and OS queries): a job of such
    # opcodes only is kept in memory, briefly, and never copied to the candidates (the
    # queue's "read-only jobs")
    READ_ONLY: ClassVar[bool] = False

    dry_run: bool = False
    debug_level: int = 0
    priority: int = PRIORITY_NORMAL
    depends: list[tuple[int | str, list[FinalJobStatus]]] | None = None
    comment: str | None = None
    reason: list[list[Any]] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        if not PRIORITY_HIGHEST <= self.priority <= PRIORITY_LOWEST:
            raise ValueError(f"priority must be between {PRIORITY_HIGHEST} and "
                             f"{PRIORITY_LOWEST}")
        _at_least("debug_level", self.debug_level, 0)
        if self.depends is not None:
            self.depends = [(_dependency_id(job_id), statuses)
                            for job_id, statuses in self.depends]
        try:
            self.reason = reason.validate(self.reason)
        except ValueError as err:
            raise ValueError(str(err)) from None

    @property
    def op_id(self) -> str:
        return op_id_of(type(self))

    @property
    def dependencies(self) -> list[Dependency]:
        """`depends` with every job id a number."""
        return [(_dependency_id(job_id), statuses) for job_id, statuses in self.depends or ()]

    def summary(self) -> str:
        """Ganeti's job summary: OP_ID without the prefix, with the main object's name."""
        base = self.op_id.removeprefix("OP_")
        target = self.summary_target()
        return f"{base}({target})" if target else base

    def summary_target(self) -> str | None:
        for field in ("instance_name", "node_name", "group_name"):
            value = getattr(self, field, None)
            if value:
                return str(value)
        return None

    def to_dict(self) -> dict[str, Any]:
        fields: dict[str, Any] = msgspec.to_builtins(self)
        return fields


# --- the edge's checks of values (each raises a ValueError naming the field) ---------------------

def _dependency_id(job_id: int | str) -> int:
    """A dependency's job id as a number (Ganeti's TJobId: a number or a text of digits)."""
    if isinstance(job_id, str):
        if not job_id.isascii() or not job_id.isdigit():
            raise ValueError(f"depends: invalid job id {job_id!r}")
        return int(job_id)
    return job_id


def _at_least(field: str, value: float | None, lowest: float) -> None:
    if value is not None and not value >= lowest:
        raise ValueError(f"{field} must be at least {lowest:g}, got {value!r}")


def _finite(field: str, value: float | None) -> None:
    if value is not None and not math.isfinite(value):
        raise ValueError(f"{field} must be a finite number, got {value!r}")


def _ip(field: str, value: str | None) -> None:
    if value is not None:
        names.ip_address(value, field)


def _iallocator(value: str | None) -> None:
    if value:
        names.plain_name(value, "iallocator name")


def _name_and_ip_checks(name_check: bool, ip_check: bool) -> None:
    if ip_check and not name_check:
        raise ValueError("Cannot do IP address check without a name check (ip_check needs "
                         "name_check)")


def _per_key(kind: str, value: Mapping[str, _V], known: Iterable[str]) -> Mapping[str, _V]:
    """`value`, when all its keys are in `known` (hypervisors, disk templates)."""
    allowed = set(known)
    for key in value:
        if key not in allowed:
            raise ValueError(f"unknown {kind} {key!r} (known: {', '.join(sorted(allowed))})")
    return value


def _default_layer(changes: dict[str, Any] | None) -> dict[str, Any] | None:
    """Cluster-level beparams/nicparams may come as Ganeti's {"default": {...}}."""
    if changes is not None and isinstance(changes.get("default"), dict):
        inner: dict[str, Any] = changes["default"]
        return inner
    return changes


def _disk_params(value: dict[str, dict[str, Any]] | None) -> None:
    for template, changes in _per_key("disk template", value or {},
                                      params.DISK_TEMPLATES).items():
        params.check_changes(params.disk_family(template), changes)


def _tags(tags: Iterable[str]) -> None:
    for tag in tags:
        model.check_tag(tag)


def _uid_ranges(field: str, ranges: list[tuple[int, int]] | None) -> None:
    for lo, hi in ranges or []:
        if not 0 <= lo <= hi <= uidpool.MAX_UID:
            raise ValueError(f"{field}: bad user-id range {lo}-{hi} (0-{uidpool.MAX_UID}, "
                             "lower first)")
    if field != "remove_uids":
        try:
            uidpool.check_size(ranges or [], field)
        except ConfigError as err:
            raise ValueError(str(err)) from None


COLLECTOR_SETTINGS = ("active", "interval", "min_interval", "max_interval")


def _collector_settings(collector: str, settings: Mapping[str, object]) -> None:
    """herder's data collector settings: known keys, a boolean, positive finite intervals
    (None re-derives a bound)."""
    unknown = set(settings) - set(COLLECTOR_SETTINGS)
    if unknown:
        raise ValueError(f"unknown data collector setting(s) {', '.join(sorted(unknown))} of "
                         f"{collector} (known: {', '.join(COLLECTOR_SETTINGS)})")
    for key, value in settings.items():
        if key == "active":
            params.coerce(params.ParamSpec(f"{collector} active", "bool", True), value)
        elif value is not None and not params.coerce(
                params.ParamSpec(f"{collector} {key}", "float", 1.0), value) > 0:
            raise ValueError(f"data collector {collector}: {key} must be positive")


# Ganeti's IDISK_PARAMS_TYPES and INIC_PARAMS_TYPES: what a disk or NIC of a new instance says
DISK_SPEC_FIELDS = frozenset({"access", "adopt", "dev_type", "metavg", "mode", "name",
                              "provider", "size", "spindles", "vg"})
NIC_SPEC_FIELDS = frozenset({"bridge", "ip", "link", "mac", "mode", "name", "network", "vlan"})
_MAC = re.compile(r"([0-9a-f]{2}:){5}[0-9a-f]{2}", re.IGNORECASE)
NIC_IP_SPECIAL = frozenset({"none", "auto", "pool"})


def _refuse_unknown(where: str, spec: Mapping[str, object], known: frozenset[str]) -> None:
    unknown = set(spec) - known
    if unknown:
        raise ValueError(f"{where}: unknown parameter(s) {', '.join(sorted(map(str, unknown)))}"
                         f" (known: {', '.join(sorted(known))})")


def check_disk_specs(disks: list[dict[str, Any]]) -> None:
    """The disks of an instance creation, as Ganeti's _CheckDiskArguments and
    ValidateDeviceNames; ValueError naming the disk."""
    seen: set[str] = set()
    for index, disk in enumerate(disks):
        where = f"disk {index}"
        _refuse_unknown(where, disk, DISK_SPEC_FIELDS)
        if "size" not in disk:
            raise ValueError(f"{where}: missing size")
        try:
            size = params.parse_size(disk["size"])
        except ValueError as err:
            raise ValueError(f"{where}: size: {err}") from None
        if size < 1:
            raise ValueError(f"{where}: size must be at least 1 MiB")
        if disk.get("mode", "rw") not in ("rw", "ro"):
            raise ValueError(f"{where}: mode {disk.get('mode')!r} is not one of ro, rw")
        spindles = disk.get("spindles")
        if spindles is not None and (isinstance(spindles, bool) or not isinstance(spindles, int)
                                     or spindles < 0):
            raise ValueError(f"{where}: spindles must be a non-negative integer")
        for key in ("vg", "metavg"):
            if disk.get(key) is not None and not params.VG_NAME.passes(disk[key]):
                raise ValueError(f"{where}: {key} {disk[key]!r} is not a volume group name")
        if disk.get("provider") is not None:
            names.plain_name(disk["provider"], f"{where} provider")
        for key in ("access", "adopt", "dev_type"):
            if disk.get(key) is not None and not isinstance(disk[key], str):
                raise ValueError(f"{where}: {key} must be a string")
        name = names.device_name(disk.get("name"), "disk")
        if name is not None:
            if name in seen:
                raise ValueError(f"disk name {name!r} already used")
            seen.add(name)


def check_nic_specs(nics: list[dict[str, Any]]) -> None:
    """The NICs of an instance creation, as Ganeti's ComputeNics and _CheckVLANArguments."""
    seen: set[str] = set()
    for index, nic in enumerate(nics):
        where = f"NIC {index}"
        _refuse_unknown(where, nic, NIC_SPEC_FIELDS)
        for key, value in nic.items():
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{where}: {key} must be a string, got {value!r}")
        mac = nic.get("mac")
        if mac and mac not in ("auto", "generate") and not _MAC.fullmatch(mac):
            raise ValueError(f"{where}: invalid MAC address {mac!r}")
        ip = nic.get("ip")
        if ip and ip.lower() not in NIC_IP_SPECIAL:
            _ip(f"{where}: ip", ip)
        if nic.get("network") and nic["network"].lower() != "none":
            names.object_name(nic["network"], f"{where} network")
        nicparams = {key: nic[key] for key in ("mode", "link", "vlan")
                     if nic.get(key) not in (None, "", "auto")}
        try:
            params.validate(params.NIC_FAMILY, nicparams)
        except ConfigError as err:
            raise ValueError(f"{where}: {err}") from None
        name = names.device_name(nic.get("name"), "NIC")
        if name is not None:
            if name in seen:
                raise ValueError(f"NIC name {name!r} already used")
            seen.add(name)


# Ganeti's device modification operations (constants.DDMS_VALUES, DDMS_VALUES_WITH_MODIFY)
DEVICE_MODS = ("add", "attach", "detach", "remove")
DEVICE_MODS_WITH_MODIFY = (*DEVICE_MODS, "modify")


def _non_negative_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _disk_params_shape(value: object) -> str | None:
    """Ganeti's TIDiskParams / TDiskParams: what is wrong with a disk's parameters (None:
    a dict of non-empty names to non-empty strings or integers)."""
    if not isinstance(value, dict):
        return f"disk parameters must be an object, got {value!r}"
    for key, item in value.items():
        if not isinstance(key, str) or not key:
            return f"disk parameter names must be non-empty strings, got {key!r}"
        if not (isinstance(item, int) or (isinstance(item, str) and item)):
            return f"disk parameter {key}: a non-empty string or an integer, got {item!r}"
    return None


def _nic_params_shape(value: object) -> str | None:
    """Ganeti's TINicParams: what is wrong with a NIC's parameters (None: an object, or
    nothing); its values are checked as a new NIC's (`check_nic_specs`)."""
    if value is not None and not isinstance(value, dict):
        return f"NIC parameters must be an object, got {value!r}"
    return None


def check_device_mods(field: str, mods: object,
                      settings_problem: Callable[[object], str | None] = _disk_params_shape
                      ) -> None:
    """Ganeti's TSetParamsMods(TIDiskParams or TINicParams): a list of [op, index, params]
    (op one of DEVICE_MODS_WITH_MODIFY, the index an integer, -1 the last, or a device's
    name) or, all of them, of the old [op, params] (op one of DEVICE_MODS or a non-negative
    index); ValueError naming the first bad entry."""
    if not isinstance(mods, list):
        raise ValueError(f"{field}: a list of modifications, got {mods!r}")
    for position, mod in enumerate(mods):
        where = f"{field}[{position}]"
        if not isinstance(mod, list) or len(mod) not in (2, 3):
            raise ValueError(f"{where}: [op, params] or [op, index, params], got {mod!r}")
        if len(mod) != len(mods[0]):
            raise ValueError(f"{where}: every modification has the form of the first")
        if len(mod) == 3:
            op, index, settings = mod
            if op not in DEVICE_MODS_WITH_MODIFY:
                raise ValueError(f"{where}: operation {op!r} is not one of "
                                 f"{', '.join(DEVICE_MODS_WITH_MODIFY)}")
            if isinstance(index, bool) or not isinstance(index, int | str):
                raise ValueError(f"{where}: the index must be an integer or a name, got "
                                 f"{index!r}")
        else:
            op, settings = mod
            if op not in DEVICE_MODS and not _non_negative_int(op):
                raise ValueError(f"{where}: operation {op!r} is not one of "
                                 f"{', '.join(DEVICE_MODS)} or an index")
        problem = settings_problem(settings)
        if problem:
            raise ValueError(f"{where}: {problem}")


def check_recreate_disks(disks: object) -> None:
    """Ganeti's TRecreateDisksInfo: a list of disk indices, or a list of [index, params]."""
    if not isinstance(disks, list):
        raise ValueError(f"disks: a list of disk indices or of [index, params], got {disks!r}")
    if all(_non_negative_int(item) for item in disks):
        return
    for position, item in enumerate(disks):
        if not (isinstance(item, list) and len(item) == 2 and _non_negative_int(item[0])):
            raise ValueError(f"disks[{position}]: a list of disk indices or of [index, "
                             f"params] (not both), got {item!r}")
        problem = _disk_params_shape(item[1])
        if problem:
            raise ValueError(f"disks[{position}]: {problem}")


# --- cluster ------------------------------------------------------------------------------------

class OpClusterSetParams(OpCode, tag="OP_CLUSTER_SET_PARAMS", kw_only=True):
    hvparams: dict[str, dict[str, Any]] | None = None
    os_hvp: dict[str, dict[str, dict[str, Any]]] | None = None
    beparams: dict[str, Any] | None = None
    osparams: dict[str, dict[str, Any]] | None = None
    nicparams: dict[str, Any] | None = None
    ndparams: dict[str, Any] | None = None
    diskparams: dict[str, dict[str, Any]] | None = None
    ipolicy: dict[str, Any] | None = None
    enabled_hypervisors: list[str] | None = None
    enabled_disk_templates: list[str] | None = None
    uid_pool: list[tuple[int, int]] | None = None
    add_uids: list[tuple[int, int]] | None = None
    remove_uids: list[tuple[int, int]] | None = None
    master_netdev: str | None = None
    candidate_pool_size: int | None = None
    master_lease_ttl: int | None = None  # herder: etcd backend, seconds (docs/ha.md)
    default_iallocator: str | None = None
    default_iallocator_params: dict[str, str] | None = None
    # herder: one list per request type (design-2.1 "Default iallocator names")
    default_iallocators: dict[str, list[str]] | None = None
    # Ganeti's data collector fields (interval in microseconds) and herder's full settings
    enabled_data_collectors: dict[str, bool] | None = None
    data_collector_interval: dict[str, float] | None = None
    data_collectors: dict[str, dict[str, Any]] | None = None
    # maintenance daemon (Ganeti 2.17 names)
    maint_enabled: bool | None = None
    maint_harep: bool | None = None
    maint_round_delay: int | None = None
    maint_balance: bool | None = None
    maint_balance_threshold: float | None = None
    maint_balance_disk_moves: bool | None = None  # herder
    maint_balance_dynamic_load: bool | None = None  # herder
    maint_node_recovery: bool | None = None  # herder
    maint_node_failure_time: float | None = None  # herder (0: back to maintd's own)
    diagnose_data_collector_filename: str | None = None
    name: str | None = None  # rename (herder: one opcode; Ganeti has OP_CLUSTER_RENAME)
    # Ganeti's [[action, os], ...] lists, action "add" or "remove" (gnt-os modify --hidden,
    # --blacklisted)
    hidden_os: list[tuple[Literal["add", "remove"], str]] | None = None
    blacklisted_os: list[tuple[Literal["add", "remove"], str]] | None = None
    rapi_anonymous_reads: bool | None = None  # herder: RAPI reads without credentials

    def __post_init__(self) -> None:
        super().__post_init__()
        for hv, changes in _per_key("hypervisor", self.hvparams or {},
                                    params.HYPERVISORS).items():
            params.check_changes(params.hv_family(hv), changes)
        for os_name, per_hv in (self.os_hvp or {}).items():
            names.os_name(os_name)
            for hv, changes in _per_key("hypervisor", per_hv, params.HYPERVISORS).items():
                params.check_changes(params.hv_family(hv), changes, instance_level=True)
        params.upgrade_be_params(_default_layer(self.beparams))
        params.check_changes(params.BE_FAMILY, _default_layer(self.beparams))
        params.check_changes(params.NIC_FAMILY, _default_layer(self.nicparams))
        params.check_changes(params.ND_FAMILY, self.ndparams)
        _disk_params(self.diskparams)
        for os_name, osparams in (self.osparams or {}).items():
            names.os_name(os_name)
            params.check_osparams(osparams)
        if self.ipolicy is not None:
            model.check_ipolicy_changes(self.ipolicy, group=False)
        for hv in _per_key("hypervisor", dict.fromkeys(self.enabled_hypervisors or []),
                           params.HYPERVISORS):
            params.check_runnable_hypervisor(hv)
        _per_key("disk template", dict.fromkeys(self.enabled_disk_templates or []),
                 params.DISK_TEMPLATES)
        for field in ("uid_pool", "add_uids", "remove_uids"):
            _uid_ranges(field, getattr(self, field))
        if self.master_netdev is not None and not params.is_interface_name(self.master_netdev):
            raise ValueError(f"master_netdev {self.master_netdev!r} is not a network "
                             "interface name")
        _at_least("candidate_pool_size", self.candidate_pool_size, 1)
        if self.master_lease_ttl is not None and not (
                model.MASTER_LEASE_TTL_MIN <= self.master_lease_ttl <= model.MASTER_LEASE_TTL_MAX):
            raise ValueError(f"master_lease_ttl must be {model.MASTER_LEASE_TTL_MIN}-"
                             f"{model.MASTER_LEASE_TTL_MAX} seconds")
        _iallocator(self.default_iallocator)
        for allocators in _per_key("iallocator request type", self.default_iallocators or {},
                                   model.IALLOCATOR_REQUEST_TYPES).values():
            for allocator in allocators:
                _iallocator(allocator)
        for collector in [*(self.enabled_data_collectors or {}),
                          *(self.data_collector_interval or {}), *(self.data_collectors or {})]:
            names.plain_name(collector, "data collector name")
        for collector, settings in (self.data_collectors or {}).items():
            _collector_settings(collector, settings)
        for collector, interval in (self.data_collector_interval or {}).items():
            _finite(f"data_collector_interval {collector}", interval)
            if not interval > 0:
                raise ValueError(f"data_collector_interval {collector} must be positive")
        _at_least("maint_round_delay", self.maint_round_delay, 0)
        _finite("maint_balance_threshold", self.maint_balance_threshold)
        _at_least("maint_balance_threshold", self.maint_balance_threshold, 0)
        if self.diagnose_data_collector_filename:
            names.plain_name(self.diagnose_data_collector_filename, "diagnose command")
        if self.name is not None:
            self.name = names.hostname(self.name, "cluster name")
        for _, os_name in [*(self.hidden_os or []), *(self.blacklisted_os or [])]:
            names.os_name(os_name)


class OpClusterRedistConf(OpCode, tag="OP_CLUSTER_REDIST_CONF", kw_only=True):
    """Push the config, job queue, ssconf and cluster-wide files to the nodes now (docs/ha.md
    "Redistribution")."""


class OpClusterVerifyGroup(OpCode, tag="OP_CLUSTER_VERIFY_GROUP", kw_only=True):
    """Ganeti's per-group verification, the part that asks the nodes: which domains run where
    (an instance running on a node that is not its primary, Ganeti's "instance should not run
    on node"; an admin-up instance not running on its primary; a node that does not answer).
    herder's result is the list of findings (`core.verify.Finding` as dicts), Ganeti's a bool."""

    group_name: str
    debug_simulate_errors: bool = False
    error_codes: bool = False
    skip_checks: list[str] = msgspec.field(default_factory=list)
    ignore_errors: list[str] = msgspec.field(default_factory=list)
    verbose: bool = False
    verify_clutter: bool = False


class OpGroupVerifyDisks(OpCode, tag="OP_GROUP_VERIFY_DISKS", kw_only=True):
    """Ganeti's: the disks of a node group's instances with active disks. Result: [node name
    -> error, names of instances whose disks need activate-disks, instance name -> [[node,
    volume], ...] missing LVs]."""

    group_name: str


class OpClusterVerifyDisks(OpCode, tag="OP_CLUSTER_VERIFY_DISKS", kw_only=True):
    """Ganeti's (`gnt-cluster verify-disks`): OP_GROUP_VERIFY_DISKS for every group (or
    `group_name`). herder answers the groups' results in its own result (a list, one per
    group) where Ganeti submits one job per group (compat row B24)."""

    group_name: str | None = None


class OpClusterRepairDiskSizes(OpCode, tag="OP_CLUSTER_REPAIR_DISK_SIZES", kw_only=True):
    """Ganeti's `gnt-cluster repair-disk-sizes`: the disks' sizes as their primary nodes see
    them written to the config where they differ. Result: [[instance, disk index, field,
    new size in MiB], ...] for each change."""

    instances: list[str] = msgspec.field(default_factory=list)


class OpClusterDestroy(OpCode, tag="OP_CLUSTER_DESTROY", kw_only=True):
    """Ganeti's `gnt-cluster destroy`: refused while any node but the master or any instance
    is left; the result is the master node's name (the CLI then removes the cluster's files
    on the master)."""


class OpTagsSearch(OpCode, tag="OP_TAGS_SEARCH", kw_only=True):
    """Ganeti's `gnt-cluster search-tags`: [[path, tag], ...] of every tag matching the
    regular expression (paths `/cluster`, `/instances/NAME`, `/nodes/NAME`,
    `/nodegroup/NAME`, `/networks/NAME`)."""

    pattern: str

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.pattern:
            raise ValueError("pattern must not be empty")
        try:
            re.compile(self.pattern)
        except re.error as err:
            raise ValueError(f"invalid search pattern {self.pattern!r}: {err}") from None


# --- node groups --------------------------------------------------------------------------------

class OpGroupAdd(OpCode, tag="OP_GROUP_ADD", kw_only=True):
    group_name: str
    alloc_policy: Literal["preferred", "last_resort", "unallocable"] | None = None
    ndparams: dict[str, Any] | None = None
    diskparams: dict[str, dict[str, Any]] | None = None
    ipolicy: dict[str, Any] | None = None
    hv_state: dict[str, Any] | None = None
    disk_state: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        names.object_name(self.group_name, "node group name")
        _check_group_params(self)


class OpGroupSetParams(OpCode, tag="OP_GROUP_SET_PARAMS", kw_only=True):
    group_name: str
    alloc_policy: Literal["preferred", "last_resort", "unallocable"] | None = None
    ndparams: dict[str, Any] | None = None
    diskparams: dict[str, dict[str, Any]] | None = None
    ipolicy: dict[str, Any] | None = None
    hv_state: dict[str, Any] | None = None
    disk_state: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_group_params(self)


def _check_group_params(op: OpGroupAdd | OpGroupSetParams) -> None:
    params.check_changes(params.ND_FAMILY, op.ndparams)
    _disk_params(op.diskparams)
    if op.ipolicy is not None:
        model.check_ipolicy_changes(op.ipolicy, group=True)


class OpGroupRename(OpCode, tag="OP_GROUP_RENAME", kw_only=True):
    group_name: str
    new_name: str

    def __post_init__(self) -> None:
        super().__post_init__()
        names.object_name(self.new_name, "node group name")


class OpGroupRemove(OpCode, tag="OP_GROUP_REMOVE", kw_only=True):
    group_name: str


class OpGroupAssignNodes(OpCode, tag="OP_GROUP_ASSIGN_NODES", kw_only=True):
    """Ganeti's `gnt-group assign-nodes`: the nodes move to the group; refused when a DRBD
    instance would have its nodes in two groups, unless `force`."""

    group_name: str
    nodes: list[str]
    node_uuids: list[str] | None = None
    force: bool = False


class OpGroupEvacuate(OpCode, tag="OP_GROUP_EVACUATE", kw_only=True):
    """Ganeti's `gnt-group evacuate`: every instance of the group moved to other groups (the
    allocator's change-group answer); the result lists the jobs submitted."""

    group_name: str
    early_release: bool = False
    iallocator: str | None = None
    target_groups: list[str] | None = None
    sequential: bool = False
    force_failover: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _iallocator(self.iallocator)


# --- nodes --------------------------------------------------------------------------------------

class OpNodeAdd(OpCode, tag="OP_NODE_ADD", kw_only=True):
    node_name: str
    primary_ip: str | None = None
    secondary_ip: str | None = None
    group: str | None = None
    master_capable: bool | None = None
    vm_capable: bool | None = None
    ndparams: dict[str, Any] | None = None
    readd: bool = False
    node_setup: bool = False
    hv_state: dict[str, Any] | None = None
    disk_state: dict[str, Any] | None = None
    # herder: the join token the node's noded printed (docs/real-nodes.md "Joining a node");
    # the master joins the node (its certificate, the HMAC key, ssconf) before adding it.
    # A secret: whoever uses it first joins the node (docs/security.md "Secrets").
    join_token: SecretText | None = None
    # herder: without a token, the master reaches the node's daemon port first (Ganeti's
    # TcpPing); false adds it without (a node set up later, a test config; compat row T24)
    node_check: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        self.node_name = names.hostname(self.node_name, "node name")
        _ip("primary_ip", self.primary_ip)
        _ip("secondary_ip", self.secondary_ip)
        params.check_changes(params.ND_FAMILY, self.ndparams)


class OpNodeSetParams(OpCode, tag="OP_NODE_SET_PARAMS", kw_only=True):
    node_name: str
    node_uuid: str | None = None
    force: bool = False
    master_candidate: bool | None = None
    offline: bool | None = None
    drained: bool | None = None
    auto_promote: bool = False
    master_capable: bool | None = None
    vm_capable: bool | None = None
    secondary_ip: str | None = None
    ndparams: dict[str, Any] | None = None
    powered: bool | None = None
    group: str | None = None  # herder: move to a group (Ganeti: OP_GROUP_ASSIGN_NODES)
    new_name: str | None = None  # herder: rename (the UUID stays)
    hv_state: dict[str, Any] | None = None
    disk_state: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _ip("secondary_ip", self.secondary_ip)
        params.check_changes(params.ND_FAMILY, self.ndparams)
        if self.new_name is not None:
            self.new_name = names.hostname(self.new_name, "node name")


class OpNodeRemove(OpCode, tag="OP_NODE_REMOVE", kw_only=True):
    node_name: str
    node_uuid: str | None = None


class OpNodeEvacuate(OpCode, tag="OP_NODE_EVACUATE", kw_only=True):
    node_name: str
    node_uuid: str | None = None
    mode: Literal["primary-only", "secondary-only", "all"] = "all"
    iallocator: str | None = None
    remote_node: str | None = None
    remote_node_uuid: str | None = None
    early_release: bool = False
    ignore_soft_errors: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _iallocator(self.iallocator)


class OpNodeMigrate(OpCode, tag="OP_NODE_MIGRATE", kw_only=True):
    node_name: str
    node_uuid: str | None = None
    mode: Literal["live", "non-live"] | None = None
    live: bool | None = None
    target_node: str | None = None
    target_node_uuid: str | None = None
    iallocator: str | None = None
    allow_runtime_changes: bool = True
    ignore_ipolicy: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _iallocator(self.iallocator)


class OpNodePowercycle(OpCode, tag="OP_NODE_POWERCYCLE", kw_only=True):
    node_name: str
    node_uuid: str | None = None
    force: bool = False


OOB_COMMANDS = ("power-on", "power-off", "power-cycle", "power-status", "health")
OOB_TIMEOUT = 60  # Ganeti's constants.OOB_TIMEOUT (seconds)
OOB_POWER_DELAY = 2.0  # Ganeti's constants.OOB_POWER_DELAY (seconds between power-ons)


class OpOobCommand(OpCode, tag="OP_OOB_COMMAND", kw_only=True):
    """Run the nodes' out-of-band program (Ganeti's OpOobCommand: its fields and defaults)."""

    node_names: list[str] = msgspec.field(default_factory=list)
    node_uuids: list[str] | None = None
    command: Literal["power-on", "power-off", "power-cycle", "power-status", "health"]
    timeout: int = OOB_TIMEOUT
    ignore_status: bool = False
    power_delay: float = OOB_POWER_DELAY

    def __post_init__(self) -> None:
        super().__post_init__()
        _at_least("timeout", self.timeout, 1)
        _at_least("power_delay", self.power_delay, 0)
        if not math.isfinite(self.power_delay):
            raise ValueError("power_delay must be a finite number of seconds")
        for name in self.node_names:
            if not name:
                raise ValueError("node_names: empty node name")

    def summary_target(self) -> str | None:
        return ",".join(self.node_names) or None


class OpNodeQueryStorage(OpCode, tag="OP_NODE_QUERY_STORAGE", kw_only=True):
    READ_ONLY = True

    nodes: list[str] = msgspec.field(default_factory=list)
    storage_type: Literal["lvm-pv", "lvm-vg", "file"] = "lvm-vg"
    name: str | None = None
    output_fields: list[str] | None = None


class OpNodeModifyStorage(OpCode, tag="OP_NODE_MODIFY_STORAGE", kw_only=True):
    node_name: str
    node_uuid: str | None = None
    storage_type: Literal["lvm-pv"] = "lvm-pv"
    name: str
    changes: dict[str, Any]

    def __post_init__(self) -> None:
        super().__post_init__()
        _storage_unit(self.name)


class OpRepairNodeStorage(OpCode, tag="OP_REPAIR_NODE_STORAGE", kw_only=True):
    node_name: str
    node_uuid: str | None = None
    storage_type: Literal["lvm-vg"] = "lvm-vg"
    name: str
    ignore_consistency: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _storage_unit(self.name)


def _storage_unit(name: str) -> None:
    """A storage unit's name (a PV's device path, a VG's name) goes to LVM's commands as an
    argument: never an option, never several lines."""
    if not name or name.startswith("-") or any(ch in name for ch in "\0\n\r"):
        raise ValueError(f"invalid storage unit name {name!r}")


class OpRepairCommand(OpCode, tag="OP_REPAIR_COMMAND", kw_only=True):
    """Run a white-listed repair command on a node with `input` on its stdin (Ganeti 2.17)."""

    node_name: str
    command: str
    input: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
        names.plain_name(self.command, "repair command")


class OpNodeQueryvols(OpCode, tag="OP_NODE_QUERYVOLS", kw_only=True):
    """Ganeti's `gnt-node volumes`: the logical volumes of the nodes, one row of
    `output_fields` (node, phys, vg, name, size, instance) per volume."""

    output_fields: list[str]
    nodes: list[str] = msgspec.field(default_factory=list)


class OpOsDiagnose(OpCode, tag="OP_OS_DIAGNOSE", kw_only=True):
    """The OS definitions on the nodes, each with its variants (`name+variant`)."""

    READ_ONLY = True

    output_fields: list[str] = msgspec.field(default_factory=lambda: ["name", "variants"])
    names: list[str] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        for os_name in self.names:
            names.os_name(os_name)


# --- instances ----------------------------------------------------------------------------------

class OpInstanceCreate(OpCode, tag="OP_INSTANCE_CREATE", kw_only=True):
    instance_name: str
    os_type: str | None = None
    disk_template: str = ""  # an import takes its export's when it is left out
    disks: list[dict[str, Any]] = msgspec.field(default_factory=list)
    # Ganeti requires the list (an empty one makes an instance without NICs); herder's default
    # when it is left out is one NIC with the cluster's nicparams (docs/compat.md 48)
    nics: list[dict[str, Any]] = msgspec.field(default_factory=lambda: [{}])
    pnode: str | None = None
    snode: str | None = None
    iallocator: str | None = None
    hypervisor: str | None = None
    beparams: dict[str, Any] = msgspec.field(default_factory=dict)
    hvparams: dict[str, Any] = msgspec.field(default_factory=dict)
    osparams: dict[str, Any] = msgspec.field(default_factory=dict)
    start: bool = True
    no_install: bool = False
    force_variant: bool = False
    ip_check: bool = True
    name_check: bool = True
    wait_for_sync: bool = True
    tags: list[str] = msgspec.field(default_factory=list)
    mode: Literal["create", "import", "remote-import"] = "create"
    src_node: str | None = None  # import: the node holding the export
    src_node_uuid: str | None = None
    src_path: str | None = None  # import: the export's name (its directory) on src_node
    ignore_ipolicy: bool = False
    conflicts_check: bool = True  # an address of a NIC without network in a group's network
    # mode remote-import (Ganeti's): the source cluster's OP_BACKUP_PREPARE answer
    source_handshake: list[Any] | None = None
    source_x509_ca: str | None = None
    source_instance_name: str | None = None
    source_shutdown_timeout: int = 120
    group_name: str | None = None  # the allocator places the instance in this group

    def __post_init__(self) -> None:
        super().__post_init__()
        self.instance_name = names.hostname(self.instance_name, "instance name")
        _import_source(self.mode, self.src_node, self.src_path)
        _remote_source(self)
        _name_and_ip_checks(self.name_check, self.ip_check)
        if self.os_type is not None:
            names.os_name(self.os_type)
        if self.disk_template or self.mode == "create":
            params.disk_family(self.disk_template)
        if self.hypervisor is not None:
            params.hv_family(self.hypervisor)
        params.upgrade_be_params(self.beparams)
        params.check_changes(params.BE_FAMILY, self.beparams)
        params.check_hv_changes(self.hvparams, self.hypervisor)
        params.check_osparams(self.osparams)
        check_disk_specs(self.disks)
        check_nic_specs(self.nics)
        _iallocator(self.iallocator)
        _tags(self.tags)


def _import_source(mode: str, src_node: str | None, src_path: str | None) -> None:
    """An import names the export (src_node, src_path: a name in the node's export directory,
    or a path ending in one there); a creation names none."""
    if mode == "remote-import":
        if src_node is not None or src_path is not None:
            raise ValueError("src_node and src_path are for mode import")
        return
    if mode == "create":
        if src_node is not None or src_path is not None:
            raise ValueError("src_node and src_path are for mode import")
        return
    if not src_node or not src_path:
        raise ValueError("mode import needs src_node and src_path (the export's directory)")
    export_name(src_path)


def _remote_source(op: OpInstanceCreate) -> None:
    """A remote import names the source cluster's handshake, CA and instance; nothing else
    does."""
    given = (op.source_handshake, op.source_x509_ca, op.source_instance_name)
    if op.mode != "remote-import":
        if any(part is not None for part in given):
            raise ValueError("source_handshake, source_x509_ca and source_instance_name are "
                             "for mode remote-import")
        return
    if not all(given):
        raise ValueError("mode remote-import needs source_handshake, source_x509_ca and "
                         "source_instance_name")
    names.hostname(str(op.source_instance_name), "source_instance_name")
    if not 0 <= op.source_shutdown_timeout <= 86400:
        raise ValueError("source_shutdown_timeout: 0 to 86400 seconds")


def export_name(src_path: str) -> str:
    """The export's name from src_path: a name (Ganeti joins a relative src_path to its export
    directory), or the export's absolute path in the node's export directory."""
    directory, _, name = src_path.rpartition("/")
    if directory and directory != exportconf.EXPORT_DIR:
        raise ValueError(f"src_path {src_path!r}: an export's name, or a directory in "
                         f"{exportconf.EXPORT_DIR}")
    return names.export_name(name, "src_path: export name")


class OpInstanceMultiAlloc(OpCode, tag="OP_INSTANCE_MULTI_ALLOC", kw_only=True):
    """Ganeti's: several instances placed together by the allocator's multi-allocate; one
    creation job per placed instance. Result: {"allocatable": [names], "failed": [names],
    "jobs": [[true, job id], ...]}."""

    instances: list[OpInstanceCreate]
    iallocator: str | None = None
    opportunistic_locking: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _iallocator(self.iallocator)
        if not self.instances:
            raise ValueError("instances: at least one instance to allocate")
        placed = [i.instance_name for i in self.instances if i.pnode or i.snode]
        if placed:
            raise ValueError(f"instances {', '.join(placed)}: the allocator places them; give "
                             "no pnode or snode")
        if len({i.instance_name for i in self.instances}) != len(self.instances):
            raise ValueError("instances: an instance name is given twice")


class InstanceOpCode(OpCode, kw_only=True):
    """An operation on one existing instance (LUs of such opcodes share their lookups)."""

    instance_name: str
    instance_uuid: str | None = None


class OpInstanceRename(InstanceOpCode, tag="OP_INSTANCE_RENAME", kw_only=True):
    new_name: str
    ip_check: bool = True
    name_check: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        self.new_name = names.hostname(self.new_name, "instance name")
        _name_and_ip_checks(self.name_check, self.ip_check)


class OpInstanceSetParams(InstanceOpCode, tag="OP_INSTANCE_SET_PARAMS", kw_only=True):
    hvparams: dict[str, Any] | None = None
    beparams: dict[str, Any] | None = None
    osparams: dict[str, Any] | None = None
    os_name: str | None = None
    offline: bool | None = None
    force: bool = False
    force_variant: bool = False
    wait_for_sync: bool = True
    # Ganeti's disk modifications: [[op, params]] ("add"/"remove" with index -1, or an index
    # with params to modify) or [[op, index, params]] (op "add", "remove", "modify")
    disks: list[Any] = msgspec.field(default_factory=list)
    disk_template: str | None = None  # plain <-> drbd conversion
    remote_node: str | None = None  # the new DRBD secondary
    remote_node_uuid: str | None = None
    iallocator: str | None = None
    # Ganeti's NIC modifications, in the same forms as `disks` (lu/nics.py)
    nics: list[Any] = msgspec.field(default_factory=list)
    conflicts_check: bool = True
    hotplug: bool = False
    hotplug_if_possible: bool = False
    ignore_ipolicy: bool = False
    runtime_mem: int | None = None  # MiB: balloon the running guest to this (Ganeti's)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.runtime_mem is not None and (isinstance(self.runtime_mem, bool)
                                             or self.runtime_mem <= 0):
            raise ValueError("runtime_mem: a positive number of MiB")
        check_device_mods("disks", self.disks)
        check_device_mods("nics", self.nics, _nic_params_shape)
        for mod in self.nics:
            if mod[0] != "remove":
                check_nic_specs([{k: v for k, v in (mod[-1] or {}).items()
                                  if not (k == "ip" and v is None)}])
        params.check_hv_changes(self.hvparams)
        params.upgrade_be_params(self.beparams)
        params.check_changes(params.BE_FAMILY, self.beparams)
        params.check_osparams(self.osparams)
        if self.os_name is not None:
            names.os_name(self.os_name)


class OpInstanceChangeGroup(InstanceOpCode, tag="OP_INSTANCE_CHANGE_GROUP", kw_only=True):
    """Ganeti's `gnt-instance change-group`: the instance moved to another node group (the
    allocator's change-group answer, submitted as a job)."""

    early_release: bool = False
    iallocator: str | None = None
    target_groups: list[str] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _iallocator(self.iallocator)


class OpInstanceActivateDisks(InstanceOpCode, tag="OP_INSTANCE_ACTIVATE_DISKS", kw_only=True):
    ignore_size: bool = False
    wait_for_sync: bool = False


class OpInstanceMove(InstanceOpCode, tag="OP_INSTANCE_MOVE", kw_only=True):
    target_node: str
    target_node_uuid: str | None = None
    shutdown_timeout: int = 120
    ignore_consistency: bool = False
    ignore_ipolicy: bool = False
    compress: str = "none"
    # herder: finish or roll back a move the master died in (its copies outside the primary
    # removed, the instance started there when up; compat row B48)
    cleanup: bool = False


class OpInstanceGrowDisk(InstanceOpCode, tag="OP_INSTANCE_GROW_DISK", kw_only=True):
    disk: int
    amount: int  # MiB: by how much, or with `absolute` the new size
    absolute: bool = False
    wait_for_sync: bool = True
    ignore_ipolicy: bool = False


class OpInstanceRecreateDisks(InstanceOpCode, tag="OP_INSTANCE_RECREATE_DISKS", kw_only=True):
    disks: list[Any] = msgspec.field(default_factory=list)  # indices, or [index, changes]
    nodes: list[str] = msgspec.field(default_factory=list)
    node_uuids: list[str] | None = None
    iallocator: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_recreate_disks(self.disks)
        _iallocator(self.iallocator)


class OpInstanceDeactivateDisks(InstanceOpCode, tag="OP_INSTANCE_DEACTIVATE_DISKS",
                                kw_only=True):
    force: bool = False


class OpInstanceReinstall(InstanceOpCode, tag="OP_INSTANCE_REINSTALL", kw_only=True):
    os_type: str | None = None
    force_variant: bool = False
    osparams: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.os_type is not None:
            names.os_name(self.os_type)
        params.check_osparams(self.osparams)


class OpInstanceReplaceDisks(InstanceOpCode, tag="OP_INSTANCE_REPLACE_DISKS", kw_only=True):
    mode: Literal["replace_on_primary", "replace_on_secondary", "replace_new_secondary",
                  "replace_auto"] = "replace_auto"
    disks: list[int] = msgspec.field(default_factory=list)
    remote_node: str | None = None
    iallocator: str | None = None
    early_release: bool = False
    ignore_ipolicy: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        for index in self.disks:
            if not 0 <= index < 16:
                raise ValueError(f"disk index {index} out of range (0-15)")
        _iallocator(self.iallocator)


class OpInstanceQueryData(OpCode, tag="OP_INSTANCE_QUERY_DATA", kw_only=True):
    READ_ONLY = True

    instances: list[str] = msgspec.field(default_factory=list)
    static: bool = False
    use_locking: bool = False


class OpInstanceStartup(InstanceOpCode, tag="OP_INSTANCE_STARTUP", kw_only=True):
    force: bool = False
    ignore_offline_nodes: bool = False
    hvparams: dict[str, Any] | None = None
    beparams: dict[str, Any] | None = None
    no_remember: bool = False
    startup_paused: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        params.check_hv_changes(self.hvparams)
        params.upgrade_be_params(self.beparams)
        params.check_changes(params.BE_FAMILY, self.beparams)


class OpInstanceShutdown(InstanceOpCode, tag="OP_INSTANCE_SHUTDOWN", kw_only=True):
    force: bool = False
    ignore_offline_nodes: bool = False
    timeout: int = 120
    no_remember: bool = False
    admin_state_source: Literal["admin", "user"] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _at_least("timeout", self.timeout, 0)


class OpInstanceReboot(InstanceOpCode, tag="OP_INSTANCE_REBOOT", kw_only=True):
    reboot_type: Literal["soft", "hard", "full"] = "hard"
    ignore_secondaries: bool = False
    shutdown_timeout: int = 120

    def __post_init__(self) -> None:
        super().__post_init__()
        _at_least("shutdown_timeout", self.shutdown_timeout, 0)


class OpInstanceMigrate(InstanceOpCode, tag="OP_INSTANCE_MIGRATE", kw_only=True):
    mode: Literal["live", "non-live"] | None = None
    live: bool | None = None
    cleanup: bool = False
    target_node: str | None = None
    iallocator: str | None = None
    allow_failover: bool = False
    allow_runtime_changes: bool = True
    ignore_ipolicy: bool = False
    ignore_hvversions: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _iallocator(self.iallocator)


class OpInstanceFailover(InstanceOpCode, tag="OP_INSTANCE_FAILOVER", kw_only=True):
    ignore_consistency: bool = False
    target_node: str | None = None
    iallocator: str | None = None
    shutdown_timeout: int = 120
    ignore_ipolicy: bool = False
    cleanup: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _at_least("shutdown_timeout", self.shutdown_timeout, 0)
        _iallocator(self.iallocator)


class OpInstanceRemove(InstanceOpCode, tag="OP_INSTANCE_REMOVE", kw_only=True):
    ignore_failures: bool = False
    shutdown_timeout: int = 120
    # herder: the queue's recovery after a master died in a remote import (compat B64): remove
    # the instance only when its creation never finished (`Instance.incomplete`), else nothing
    cleanup: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _at_least("shutdown_timeout", self.shutdown_timeout, 0)


class OpInstanceStopStray(InstanceOpCode, tag="OP_INSTANCE_STOP_STRAY", kw_only=True):
    """herder: stop and undefine the copy of an instance running on `node_name`, a node that
    is not its primary (left by a failed or interrupted move), after checking that the copy on
    its primary runs (maintd's stray incidents; issue 18)."""

    node_name: str


# --- networks -----------------------------------------------------------------------------------

def _ipv4(field: str, value: str | None) -> None:
    if value is not None:
        try:
            ipaddress.IPv4Address(value)
        except ValueError:
            raise ValueError(f"{field} {value!r} is not an IPv4 address") from None


def _ipv6(field: str, value: str | None, network: bool) -> None:
    if value is not None and value.lower() != VALUE_NONE:
        try:
            ipaddress.IPv6Network(value) if network else ipaddress.IPv6Address(value)
        except ValueError:
            what = "an IPv6 subnet" if network else "an IPv6 address"
            raise ValueError(f"{field} {value!r} is not {what}") from None


def _mac_prefix(value: str | None) -> str | None:
    if value is None or value.lower() == VALUE_NONE:
        return value
    return names.mac_prefix(value, "mac_prefix")


VALUE_NONE = "none"  # Ganeti's constants.VALUE_NONE: `--gateway none` unsets it


class NetworkOpCode(OpCode, kw_only=True):
    network_name: str

    def summary_target(self) -> str | None:
        return self.network_name

    def __post_init__(self) -> None:
        super().__post_init__()
        names.object_name(self.network_name, "network name")


class OpNetworkAdd(NetworkOpCode, tag="OP_NETWORK_ADD", kw_only=True):
    network: str
    gateway: str | None = None
    network6: str | None = None
    gateway6: str | None = None
    mac_prefix: str | None = None
    add_reserved_ips: list[str] | None = None
    conflicts_check: bool = True
    tags: list[str] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        addrpool.subnet(self.network)
        _ipv4("gateway", self.gateway)
        _ipv6("network6", self.network6, network=True)
        _ipv6("gateway6", self.gateway6, network=False)
        self.mac_prefix = _mac_prefix(self.mac_prefix)
        for address in self.add_reserved_ips or []:
            _ipv4("add_reserved_ips:", address)
        _tags(self.tags)


class OpNetworkSetParams(NetworkOpCode, tag="OP_NETWORK_SET_PARAMS", kw_only=True):
    gateway: str | None = None  # "none" unsets it, as network6, gateway6 and mac_prefix
    network6: str | None = None
    gateway6: str | None = None
    mac_prefix: str | None = None
    add_reserved_ips: list[str] | None = None
    remove_reserved_ips: list[str] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.gateway is not None and self.gateway.lower() != VALUE_NONE:
            _ipv4("gateway", self.gateway)
        _ipv6("network6", self.network6, network=True)
        _ipv6("gateway6", self.gateway6, network=False)
        self.mac_prefix = _mac_prefix(self.mac_prefix)
        for address in (self.add_reserved_ips or []) + (self.remove_reserved_ips or []):
            _ipv4("reserved IP", address)
        if self.gateway and (self.add_reserved_ips or self.remove_reserved_ips):
            raise ValueError("Cannot modify gateway and reserved ips at once")


class OpNetworkRemove(NetworkOpCode, tag="OP_NETWORK_REMOVE", kw_only=True):
    force: bool = False


class OpNetworkConnect(NetworkOpCode, tag="OP_NETWORK_CONNECT", kw_only=True):
    group_name: str
    network_mode: str
    network_link: str
    network_vlan: str = ""
    conflicts_check: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.network_link:
            raise ValueError("network_link must not be empty")
        try:
            params.validate(params.NIC_FAMILY, {"mode": self.network_mode,
                                                "link": self.network_link,
                                                "vlan": self.network_vlan})
        except ConfigError as err:
            raise ValueError(str(err)) from None


class OpNetworkDisconnect(NetworkOpCode, tag="OP_NETWORK_DISCONNECT", kw_only=True):
    group_name: str


# --- tags ---------------------------------------------------------------------------------------

TagKind = Literal["cluster", "node", "instance", "nodegroup", "network"]


class TagsOpCode(OpCode, kw_only=True):
    """Adding or removing tags of one object (`name` is None for the cluster)."""

    kind: TagKind
    name: str | None = None
    tags: list[str]

    def summary_target(self) -> str | None:
        return self.name


class OpTagsSet(TagsOpCode, tag="OP_TAGS_SET", kw_only=True):
    def __post_init__(self) -> None:
        super().__post_init__()
        _tags(self.tags)


class OpTagsDel(TagsOpCode, tag="OP_TAGS_DEL", kw_only=True):
    pass


# --- testing ------------------------------------------------------------------------------------

class OpTestDelay(OpCode, tag="OP_TEST_DELAY", kw_only=True):
    """Sleep while holding locks (Ganeti's test opcode): `on_nodes` names the node locks taken
    exclusively; `on_master` sleeps on the master."""

    duration: float
    on_master: bool = True
    on_nodes: list[str] = msgspec.field(default_factory=list)
    on_node_uuids: list[str] | None = None
    repeat: int = 0
    no_locks: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _finite("duration", self.duration)
        if self.duration < 0:
            raise ValueError("duration must not be negative")
        _at_least("repeat", self.repeat, 0)


# --- backups (exports) ---------------------------------------------------------------------------

class OpBackupPrepare(InstanceOpCode, tag="OP_BACKUP_PREPARE", kw_only=True):
    """Ganeti's export preparation: nothing to prepare for a local export (its result is None);
    mode remote answers the handshake, X509 key name and signed CA the other cluster's import
    checks (`core.remote_export`)."""

    mode: Literal["local", "remote"]


class OpBackupExport(InstanceOpCode, tag="OP_BACKUP_EXPORT", kw_only=True):
    # mode local: the node's name; mode remote (Ganeti's): each disk's destination in the
    # other cluster, (host, port, magic, hmac, salt) signed with the cluster domain secret
    target_node: str | list[list[Any]]
    target_node_uuid: str | None = None
    mode: Literal["local", "remote"] = "local"
    shutdown: bool = True
    shutdown_timeout: int = 120
    remove_instance: bool = False
    ignore_remove_failures: bool = False
    compress: str = "none"
    x509_key_name: list[Any] | None = None
    destination_x509_ca: str | None = None
    zero_free_space: bool = False
    zeroing_timeout_fixed: int | None = None
    zeroing_timeout_per_mib: float | None = None
    long_sleep: bool = False
    # herder: the job the queue's recovery submits when the master died in an export: the
    # partial export on the target removed, the instance started when it should run
    cleanup: bool = False
    # herder: exports of the instance kept on the target (the replaced one under a dated
    # name, the oldest beyond the count removed); None: Ganeti's, the newest replaces it
    keep: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mode == "remote":
            if not isinstance(self.target_node, list) or not self.x509_key_name or \
                    not self.destination_x509_ca:
                raise ValueError("mode remote needs target_node (each disk's destination), "
                                 "x509_key_name and destination_x509_ca")
        elif not isinstance(self.target_node, str) or self.x509_key_name or \
                self.destination_x509_ca:
            raise ValueError("mode local: target_node is a node's name; x509_key_name and "
                             "destination_x509_ca are for mode remote")
        if self.compress != "none":
            raise ValueError(f"compress {self.compress!r}: exports are not compressed "
                             "(only 'none')")
        if self.zero_free_space:
            raise ValueError("zero_free_space: zeroing free space is not supported")
        if not 0 <= self.shutdown_timeout <= 86400:
            raise ValueError("shutdown_timeout: 0 to 86400 seconds")
        backupsched.keep_count(self.keep)


class OpBackupRemove(InstanceOpCode, tag="OP_BACKUP_REMOVE", kw_only=True):
    """Remove an instance's exports from every node (the instance itself may be gone)."""


# --- snapshots (herder's own: Ganeti has none; compat B63) ---------------------------------------

class SnapshotOpCode(InstanceOpCode, kw_only=True):
    """An operation on one named snapshot of an instance's disks."""

    snapshot_name: str

    def __post_init__(self) -> None:
        super().__post_init__()
        names.snapshot_name(self.snapshot_name)


class OpInstanceSnapshotAdd(SnapshotOpCode, tag="OP_INSTANCE_SNAPSHOT_ADD", kw_only=True):
    """Snapshot every disk of the instance, recorded under `snapshot_name`; `cleanup` (the job
    the queue's recovery submits when the master died in one): the volumes of a snapshot of
    that name that was never recorded are removed."""

    cleanup: bool = False


class OpInstanceSnapshotRollback(SnapshotOpCode, tag="OP_INSTANCE_SNAPSHOT_ROLLBACK",
                                 kw_only=True):
    """Every disk of the stopped instance takes the content of its snapshot; `cleanup` (the
    job the queue's recovery submits when the master died in one): the disks put back as they
    were before it, the content kept aside meanwhile removed."""

    cleanup: bool = False


class OpInstanceSnapshotRemove(SnapshotOpCode, tag="OP_INSTANCE_SNAPSHOT_REMOVE",
                               kw_only=True):
    """The snapshot's volumes removed and its record gone."""



def _defined(base: type[OpCode]) -> list[type[OpCode]]:
    """Every opcode class below `base` (the ones with an OP_ID tag), in definition order."""
    found: list[type[OpCode]] = []
    for cls in base.__subclasses__():
        if op_id_of(cls).startswith("OP_"):
            found.append(cls)
        found.extend(_defined(cls))
    return found


def op_id_of(cls: type[OpCode]) -> str:
    """OP_INSTANCE_STARTUP for OpInstanceStartup."""
    return str(cls.__struct_config__.tag)


# Every opcode defined above: what a job may contain (masterd's LU registry is built from it).
ALL_OPCODES: tuple[type[OpCode], ...] = tuple(_defined(OpCode))
BY_ID: dict[str, type[OpCode]] = {op_id_of(cls): cls for cls in ALL_OPCODES}


def parse(data: object) -> OpCode:
    """An opcode from its dict form; OpcodeError names what is wrong."""
    if isinstance(data, OpCode):
        return data
    if not isinstance(data, dict):
        raise OpcodeError("an opcode must be a JSON object with an OP_ID")
    op_id = data.get("OP_ID")
    cls = BY_ID.get(op_id) if isinstance(op_id, str) else None
    if cls is None:
        raise OpcodeError(f"unknown opcode {op_id!r} (known: {', '.join(sorted(BY_ID))})")
    try:
        return msgspec.convert(data, cls)
    except msgspec.ValidationError as err:
        raise OpcodeError(f"{op_id}: {err}") from None


def _is_secret(kind: msgspec.inspect.Type) -> bool:
    if isinstance(kind, msgspec.inspect.UnionType):
        return any(_is_secret(member) for member in kind.types)
    return bool((getattr(kind, "extra", None) or {}).get("secret"))


@functools.cache
def secret_fields(cls: type[OpCode]) -> frozenset[str]:
    """The fields of `cls` declared `SecretText` (by their names in a job's opcode)."""
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    return frozenset(f.encode_name for f in info.fields if _is_secret(f.type))


def redacted(data: dict[str, Any]) -> dict[str, Any]:
    """An opcode's dict form with every secret field that is set shown as REDACTED (the
    same dict when it has none)."""
    cls = BY_ID.get(str(data.get("OP_ID")))
    hidden = [k for k in secret_fields(cls) if data.get(k) is not None] if cls else []
    return {**data, **dict.fromkeys(hidden, REDACTED)} if hidden else data


def opcode_reason_source(op: OpCode) -> str:
    """`gnt:opcode:tags_set` for OP_TAGS_SET, as Ganeti adds when it queues an opcode."""
    return f"{reason.OPCODE_PREFIX}:{re.sub(r'^OP_', '', op.op_id).lower()}"

