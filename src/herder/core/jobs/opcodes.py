"""Opcodes: what a job asks for, with Ganeti's `OP_ID` names and field names.

Each opcode is a msgspec Struct tagged by `OP_ID`, validated once when a job is submitted
(`parse`): unknown OP_IDs and unknown fields are refused with a message. Every opcode carries
the common fields (`dry_run`, `debug_level`, `priority`, `depends`, `comment`, `reason`).
"""

from __future__ import annotations

import re
from typing import Any, Literal

import msgspec

from herder.core.errors import HerderError
from herder.core.jobs import reason

PRIORITY_HIGHEST, PRIORITY_NORMAL, PRIORITY_LOWEST = -20, 0, 19


class OpcodeError(HerderError):
    """An opcode (or job) submitted is malformed."""


class OpCode(msgspec.Struct, kw_only=True, tag_field="OP_ID", forbid_unknown_fields=True,
             omit_defaults=False):
    dry_run: bool = False
    debug_level: int = 0
    priority: int = PRIORITY_NORMAL
    depends: list[Any] | None = None
    comment: str | None = None
    reason: list[list[Any]] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        if not PRIORITY_HIGHEST <= self.priority <= PRIORITY_LOWEST:
            raise ValueError(f"priority must be between {PRIORITY_HIGHEST} and "
                             f"{PRIORITY_LOWEST}")
        try:
            self.reason = reason.validate(self.reason)
        except ValueError as err:
            raise ValueError(str(err)) from None

    @property
    def op_id(self) -> str:
        return op_id_of(type(self))

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
    diagnose_data_collector_filename: str | None = None
    name: str | None = None  # rename (herder: one opcode; Ganeti has OP_CLUSTER_RENAME)


class OpClusterRedistConf(OpCode, tag="OP_CLUSTER_REDIST_CONF", kw_only=True):
    """Push the config, job queue, ssconf and cluster-wide files to the nodes now (docs/ha.md
    "Redistribution")."""


# --- node groups --------------------------------------------------------------------------------

class OpGroupAdd(OpCode, tag="OP_GROUP_ADD", kw_only=True):
    group_name: str
    alloc_policy: Literal["preferred", "last_resort", "unallocable"] | None = None
    ndparams: dict[str, Any] | None = None
    diskparams: dict[str, dict[str, Any]] | None = None
    ipolicy: dict[str, Any] | None = None
    hv_state: dict[str, Any] | None = None
    disk_state: dict[str, Any] | None = None


class OpGroupSetParams(OpCode, tag="OP_GROUP_SET_PARAMS", kw_only=True):
    group_name: str
    alloc_policy: Literal["preferred", "last_resort", "unallocable"] | None = None
    ndparams: dict[str, Any] | None = None
    diskparams: dict[str, dict[str, Any]] | None = None
    ipolicy: dict[str, Any] | None = None
    hv_state: dict[str, Any] | None = None
    disk_state: dict[str, Any] | None = None


class OpGroupRename(OpCode, tag="OP_GROUP_RENAME", kw_only=True):
    group_name: str
    new_name: str


class OpGroupRemove(OpCode, tag="OP_GROUP_REMOVE", kw_only=True):
    group_name: str


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
    join_token: str | None = None


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


class OpNodePowercycle(OpCode, tag="OP_NODE_POWERCYCLE", kw_only=True):
    node_name: str
    node_uuid: str | None = None
    force: bool = False


class OpNodeQueryStorage(OpCode, tag="OP_NODE_QUERY_STORAGE", kw_only=True):
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


class OpRepairNodeStorage(OpCode, tag="OP_REPAIR_NODE_STORAGE", kw_only=True):
    node_name: str
    node_uuid: str | None = None
    storage_type: Literal["lvm-vg"] = "lvm-vg"
    name: str
    ignore_consistency: bool = False


class OpRepairCommand(OpCode, tag="OP_REPAIR_COMMAND", kw_only=True):
    """Run a white-listed repair command on a node with `input` on its stdin (Ganeti 2.17)."""

    node_name: str
    command: str
    input: Any = None


class OpOsDiagnose(OpCode, tag="OP_OS_DIAGNOSE", kw_only=True):
    """The OS definitions on the nodes, each with its variants (`name+variant`)."""

    output_fields: list[str] = msgspec.field(default_factory=lambda: ["name", "variants"])
    names: list[str] = msgspec.field(default_factory=list)


# --- instances ----------------------------------------------------------------------------------

class OpInstanceCreate(OpCode, tag="OP_INSTANCE_CREATE", kw_only=True):
    instance_name: str
    os_type: str | None = None
    disk_template: str
    disks: list[dict[str, Any]] = msgspec.field(default_factory=list)
    nics: list[dict[str, Any]] = msgspec.field(default_factory=list)
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
    ip_check: bool = False
    name_check: bool = False
    wait_for_sync: bool = True
    tags: list[str] = msgspec.field(default_factory=list)
    mode: str = "create"


class InstanceOpCode(OpCode, kw_only=True):
    """An operation on one existing instance (LUs of such opcodes share their lookups)."""

    instance_name: str
    instance_uuid: str | None = None


class OpInstanceRename(InstanceOpCode, tag="OP_INSTANCE_RENAME", kw_only=True):
    new_name: str
    ip_check: bool = False
    name_check: bool = False


class OpInstanceSetParams(InstanceOpCode, tag="OP_INSTANCE_SET_PARAMS", kw_only=True):
    hvparams: dict[str, Any] | None = None
    beparams: dict[str, Any] | None = None
    osparams: dict[str, Any] | None = None
    os_name: str | None = None
    offline: bool | None = None
    force: bool = False
    force_variant: bool = False
    wait_for_sync: bool = True


class OpInstanceActivateDisks(InstanceOpCode, tag="OP_INSTANCE_ACTIVATE_DISKS", kw_only=True):
    ignore_size: bool = False
    wait_for_sync: bool = False


class OpInstanceReinstall(InstanceOpCode, tag="OP_INSTANCE_REINSTALL", kw_only=True):
    os_type: str | None = None
    force_variant: bool = False
    osparams: dict[str, Any] | None = None


class OpInstanceReplaceDisks(InstanceOpCode, tag="OP_INSTANCE_REPLACE_DISKS", kw_only=True):
    mode: Literal["replace_on_primary", "replace_on_secondary", "replace_new_secondary",
                  "replace_auto"] = "replace_auto"
    disks: list[int] = msgspec.field(default_factory=list)
    remote_node: str | None = None
    iallocator: str | None = None
    early_release: bool = False
    ignore_ipolicy: bool = False


class OpInstanceQueryData(OpCode, tag="OP_INSTANCE_QUERY_DATA", kw_only=True):
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


class OpInstanceShutdown(InstanceOpCode, tag="OP_INSTANCE_SHUTDOWN", kw_only=True):
    force: bool = False
    ignore_offline_nodes: bool = False
    timeout: int = 120
    no_remember: bool = False
    admin_state_source: str | None = None


class OpInstanceReboot(InstanceOpCode, tag="OP_INSTANCE_REBOOT", kw_only=True):
    reboot_type: Literal["soft", "hard", "full"] = "hard"
    ignore_secondaries: bool = False
    shutdown_timeout: int = 120


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


class OpInstanceFailover(InstanceOpCode, tag="OP_INSTANCE_FAILOVER", kw_only=True):
    ignore_consistency: bool = False
    target_node: str | None = None
    iallocator: str | None = None
    shutdown_timeout: int = 120
    ignore_ipolicy: bool = False
    cleanup: bool = False


class OpInstanceRemove(InstanceOpCode, tag="OP_INSTANCE_REMOVE", kw_only=True):
    ignore_failures: bool = False
    shutdown_timeout: int = 120


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
    pass


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
        if self.duration < 0:
            raise ValueError("duration must not be negative")


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


def parse(data: Any) -> OpCode:
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


def opcode_reason_source(op: OpCode) -> str:
    """`gnt:opcode:tags_set` for OP_TAGS_SET, as Ganeti adds when it queues an opcode."""
    return f"{reason.OPCODE_PREFIX}:{re.sub(r'^OP_', '', op.op_id).lower()}"
