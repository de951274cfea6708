"""The iallocator message (protocol version 2): validated once at the edge, then the model.

``parse_message`` turns the bytes into a JSON object, ``build_cluster`` turns its cluster part
into a :class:`~herder.alloc.model.Cluster`; the request part is checked by each mode. Bad input
raises :class:`InputError` with a one-line reason (the CLI prints it and exits 1), mirroring the
wording of Ganeti's ``hail`` so scripts that grep for it keep working.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from herder.alloc.model import (
    DISK_TEMPLATES,
    HYPERVISORS,
    Cluster,
    Group,
    Instance,
    IPolicy,
    ISpec,
    Node,
    finish_load,
)
from herder.core import untrusted


class InputError(Exception):
    """The input cannot be used at all (exit 1)."""


@dataclass
class Options:
    """What hail's command-line options control."""

    ignore_soft_errors: bool = False
    capacity_checks: bool = True
    restrict_to: list[str] | None = None
    static_kvm_mem: int = 4096
    dry_run: bool = False


@dataclass
class Response:
    success: bool
    info: str
    result: Any = field(default_factory=list)

    def to_json(self) -> str:
        prefix = "Request successful: " if self.success else "Request failed: "
        body = {"success": self.success, "info": prefix + self.info,
                "result": self.result if self.success else []}
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


# Below this size the standard library's decoder is quicker than importing msgspec (~20 ms),
# which start-up time of a one-shot iallocator call is dominated by.
STDLIB_JSON_MAX = 4 << 20


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_message(data: bytes | str) -> dict[str, Any]:
    obj: Any = None
    decoded = False
    try:
        untrusted.check(data, what="input", max_bytes=len(data))
    except untrusted.BadDocument as err:
        raise InputError(f"Parsing input IAllocator message: {err}") from None
    if len(data) < STDLIB_JSON_MAX:
        try:
            text = data.decode("utf-8") if isinstance(data, bytes) else data
            obj = json.loads(text, parse_constant=_no_constant)
            decoded = True
        except (ValueError, RecursionError):
            pass  # let msgspec word the error
    if not decoded:
        import msgspec

        try:
            obj = msgspec.json.decode(data)
        except msgspec.DecodeError as err:
            raise InputError(f"Parsing input IAllocator message: Invalid JSON: {err}") from None
    if not isinstance(obj, dict):
        raise InputError("Parsing input IAllocator message: Unable to read JSObject")
    return obj


# --- typed field access with hail-like messages ----------------------------------------------

_KINDS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "obj": (dict, "JSObject"), "str": (str, "String"), "list": (list, "JSArray"),
    "bool": (bool, "Bool"), "int": (int, "Int"), "num": ((int, float), "Double"),
}


_FAST = {"int": int, "str": str, "obj": dict, "bool": bool}
_MISSING = object()


def get(obj: dict[str, Any], key: str, kind: str, ctx: str, default: Any = ...) -> Any:
    # fast path for the well-typed common case (tens of thousands of calls per request)
    val = obj.get(key, _MISSING)
    if type(val) is _FAST.get(kind):
        return val
    return _get_checked(obj, key, kind, ctx, default)


def _get_checked(obj: dict[str, Any], key: str, kind: str, ctx: str, default: Any) -> Any:
    if key not in obj or (obj[key] is None and default is not ...):
        if default is not ...:
            return default
        keys = ",".join(json.dumps(k) for k in obj)
        raise InputError(f"{ctx}: key '{key}' not found, object contains only [{keys}]")
    val = obj[key]
    typ, label = _KINDS[kind]
    if kind in ("int", "num"):
        if isinstance(val, bool) or not isinstance(val, (int, float)):
            raise InputError(f"{ctx}: key '{key}': Unable to read {label}")
        return round(val) if kind == "int" else float(val)
    if not isinstance(val, typ):
        raise InputError(f"{ctx}: key '{key}': Unable to read {label}")
    if isinstance(val, list) and val and key.endswith("tags") \
            and not all(isinstance(x, str) for x in val):
        raise InputError(f"{ctx}: key '{key}': Unable to read String")
    return val


def parse_ipolicy(obj: dict[str, Any], ctx: str) -> IPolicy:
    def spec(d: Any, name: str) -> ISpec:
        if not isinstance(d, dict):
            raise InputError(f"{ctx}: key '{name}': Unable to read JSObject")
        return ISpec(
            memory=get(d, "memory-size", "int", ctx), cpus=get(d, "cpu-count", "int", ctx),
            disk_size=get(d, "disk-size", "int", ctx), disk_count=get(d, "disk-count", "int", ctx),
            nic_count=get(d, "nic-count", "int", ctx),
            spindle_use=get(d, "spindle-use", "int", ctx),
        )

    minmax = []
    for item in get(obj, "minmax", "list", ctx):
        if not isinstance(item, dict):
            raise InputError(f"{ctx}: key 'minmax': Unable to read JSObject")
        minmax.append((spec(item.get("min"), "min"), spec(item.get("max"), "max")))
    templates = tuple(get(obj, "disk-templates", "list", ctx))
    return IPolicy(
        minmax=tuple(minmax), std=spec(obj.get("std"), "std"), disk_templates=templates,
        vcpu_ratio=get(obj, "vcpu-ratio", "num", ctx),
        spindle_ratio=get(obj, "spindle-ratio", "num", ctx),
    )


def parse_instance(name: str, d: Any, ctx: str, need_nodes: bool) -> tuple[Instance, list[str]]:
    if not isinstance(d, dict):
        raise InputError(f"{ctx}: Unable to read JSObject")
    template = get(d, "disk_template", "str", ctx)
    if template not in DISK_TEMPLATES:
        raise InputError(f"{ctx}: key 'disk_template': Invalid string value for type "
                         f"DiskTemplate: {json.dumps(template)}")
    disks: list[tuple[int, int | None]] = []
    for disk in get(d, "disks", "list", ctx):
        if not isinstance(disk, dict):
            raise InputError(f"{ctx}: key 'disks': Unable to read JSObject")
        sp = disk.get("spindles")
        disks.append((get(disk, "size", "int", ctx), None if sp is None else int(sp)))
    nets: list[str] = []
    nics = get(d, "nics", "list", ctx, [])
    for nic in nics:
        if isinstance(nic, dict):
            mode = nic.get("mode")
            if mode is not None and mode not in ("bridged", "routed", "openvswitch"):
                raise InputError(f"{ctx}: key 'mode': Invalid string value for type "
                                 f"NICMode: {json.dumps(mode)}")
            if nic.get("network"):
                nets.append(str(nic["network"]))
    state = get(d, "admin_state", "str", ctx, "up")
    status = {"up": "running", "down": "ADMIN_down", "offline": "ADMIN_offline"}.get(state)
    if status is None:
        raise InputError(f"{ctx}: key 'admin_state': Invalid string value for type "
                         f"AdminState: {json.dumps(state)}")
    dsk = get(d, "disk_space_total", "int", ctx, None)
    if dsk is None:
        dsk = sum(size for size, _ in disks)
    inst = Instance(
        name=name, mem=get(d, "memory", "int", ctx),
        dsk=dsk,
        vcpus=get(d, "vcpus", "int", ctx), template=template, disks=disks, status=status,
        tags=tuple(get(d, "tags", "list", ctx, [])),
        spindle_use=get(d, "spindle_use", "int", ctx, 1),
        forthcoming=bool(get(d, "forthcoming", "bool", ctx, False)),
        nets=tuple(nets), nic_count=len(nics),
    )
    nodes: list[str] = []
    if need_nodes:
        nodes = get(d, "nodes", "list", ctx)
        if not nodes or not all(isinstance(n, str) for n in nodes):
            raise InputError(f"{ctx}: key 'nodes': Unable to read String")
    return inst, nodes


def build_cluster(msg: dict[str, Any], opts: Options) -> Cluster:
    """The cluster described by an iallocator message."""
    ctx = "invalid iallocator message"
    get(msg, "request", "obj", ctx)
    groups_raw = get(msg, "nodegroups", "obj", ctx)
    nodes_raw = get(msg, "nodes", "obj", ctx)
    insts_raw = get(msg, "instances", "obj", ctx)
    cluster_tags = get(msg, "cluster_tags", "list", ctx, [])
    hvs = get(msg, "enabled_hypervisors", "list", ctx, [])
    for hv in hvs:
        if hv not in HYPERVISORS:
            raise InputError(f"{ctx}: key 'enabled_hypervisors': Invalid string value for type "
                             f"Hypervisor: {json.dumps(hv)}")
    groups: list[Group] = []
    by_uuid: dict[str, int] = {}
    for uuid, g in groups_raw.items():
        gctx = f"invalid data for group '{uuid}'"
        if not isinstance(g, dict):
            raise InputError(f"{gctx}: Unable to read JSObject")
        policy = get(g, "alloc_policy", "str", gctx, "preferred")
        if policy not in ("preferred", "last_resort", "unallocable"):
            raise InputError(f"{gctx}: key 'alloc_policy': Invalid string value for type "
                             f"AllocPolicy: {json.dumps(policy)}")
        ipol = g.get("ipolicy")
        groups.append(Group(
            name=get(g, "name", "str", gctx), uuid=uuid, idx=len(groups), alloc_policy=policy,
            networks=tuple(get(g, "networks", "list", gctx, [])),
            tags=tuple(get(g, "tags", "list", gctx, [])),
            ipolicy=parse_ipolicy(ipol, gctx) if isinstance(ipol, dict) else IPolicy(),
        ))
        by_uuid[uuid] = groups[-1].idx
    nodes: list[Node] = []
    for name, d in nodes_raw.items():
        nctx = f"invalid data for node '{name}'"
        if not isinstance(d, dict):
            raise InputError(f"{nctx}: Unable to read JSObject")
        guuid = get(d, "group", "str", nctx)
        if guuid not in by_uuid:
            raise InputError(f"{nctx}: unknown node group '{guuid}'")
        node = Node(name, len(nodes), by_uuid[guuid])
        node.drained = bool(get(d, "drained", "bool", nctx, False))
        offline = bool(get(d, "offline", "bool", nctx, False))
        vm_capable = bool(get(d, "vm_capable", "bool", nctx, True))
        ndp = get(d, "ndparams", "obj", nctx, {})
        node.excl = bool(get(ndp, "exclusive_storage", "bool", nctx, False))
        node.tags = tuple(get(d, "tags", "list", nctx, []))
        live = not offline and vm_capable
        node.offline = not live or node.drained
        if live:
            node.t_mem = get(d, "total_memory", "num", nctx)
            node.n_mem = get(d, "reserved_memory", "int", nctx, 0)
            node.f_mem = get(d, "free_memory", "int", nctx)
            node.t_dsk = get(d, "total_disk", "num", nctx)
            node.f_dsk = get(d, "free_disk", "int", nctx)
            node.t_cpu = get(d, "total_cpus", "num", nctx)
            node.n_cpu = get(d, "reserved_cpus", "int", nctx, 0)
            node.f_spindles = get(d, "free_spindles", "int", nctx, 0)
        if node.excl:
            node.t_spindles = get(d, "total_spindles", "int", nctx, 0) if live else 0
        else:
            node.t_spindles = get(ndp, "spindle_count", "int", nctx, 1)
        nodes.append(node)
    node_by_name = {n.name: n.idx for n in nodes}
    instances: list[Instance] = []
    for name, d in insts_raw.items():
        ictx = f"invalid data for instance '{name}'"
        inst, inodes = parse_instance(name, d, ictx, need_nodes=True)
        for nname in inodes:
            if nname not in node_by_name:
                raise InputError(f"Unknown node '{nname}' for instance {name}")
        inst.pnode = node_by_name[inodes[0]]
        inst.snode = node_by_name[inodes[1]] if len(inodes) > 1 else -1
        inst.idx = len(instances)
        instances.append(inst)
    cl = Cluster(groups=groups, nodes=nodes, instances=instances,
                 cluster_tags=tuple(cluster_tags), hypervisor=hvs[0] if hvs else None,
                 node_by_name=node_by_name,
                 inst_by_name={i.name: i.idx for i in instances})
    finish_load(cl, opts.static_kvm_mem)
    return cl


def request_instance(cl: Cluster, d: dict[str, Any], ctx: str = "invalid request dict"
                     ) -> tuple[Instance, int]:
    """The new instance of an allocate-like request and its required node count."""
    name = get(d, "name", "str", ctx)
    required = get(d, "required_nodes", "int", ctx)
    inst, _ = parse_instance(name, d, ctx, need_nodes=False)
    cl.prepare_instance(inst)
    return inst, required
