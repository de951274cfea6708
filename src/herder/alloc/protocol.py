"""The iallocator message (protocol version 2): validated once at the edge, then the model.

``parse_message`` turns the bytes into a JSON object, ``build_cluster`` turns its cluster part
into a :class:`~herder.alloc.model.Cluster`; the request part is checked by each mode. Bad input
raises :class:`InputError` with a one-line reason (the CLI prints it and exits 1), mirroring the
wording of Ganeti's ``hail`` so scripts that grep for it keep working.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, get_args

import msgspec

from herder.alloc import wire
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
from herder.alloc.wire import Message
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


# The checked path decodes a small message with the standard library, as it always did (what it
# takes and how it words a refusal stay as they were); msgspec's generic decoder above this.
STDLIB_JSON_MAX = 4 << 20


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_message(data: bytes | str) -> Message | dict[str, Any]:
    """The message: typed when the typed decoder takes it all (``wire``), else the generic
    decoder's object, whose fields ``build_cluster`` checks key by key. Errors of the JSON
    itself (not JSON, nested too deeply, not an object) are raised here."""
    if len(data) <= untrusted.MAX_BYTES:
        try:
            msg = wire.DECODER.decode(data)
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            pass  # the checked path words it (or takes it)
        else:
            if _complete(msg):
                return msg
    try:
        untrusted.check(data, what="input", max_bytes=len(data))
    except untrusted.BadDocument as err:
        raise InputError(f"Parsing input IAllocator message: {err}") from None
    obj: Any = None
    decoded = False
    if len(data) < STDLIB_JSON_MAX:
        try:
            text = data.decode("utf-8") if isinstance(data, bytes) else data
            obj = json.loads(text, parse_constant=_no_constant)
            decoded = True
        except (ValueError, RecursionError):
            pass  # let msgspec word the error
    if not decoded:
        try:
            obj = msgspec.json.decode(data)
        except msgspec.DecodeError as err:
            raise InputError(f"Parsing input IAllocator message: Invalid JSON: {err}") from None
    if not isinstance(obj, dict):
        raise InputError("Parsing input IAllocator message: Unable to read JSObject")
    return obj


def _complete(msg: Message) -> bool:
    """What the types cannot say: the fields an online node must have, an instance's nodes,
    the request's depth. False sends the message to the checked path (which words it)."""
    for node in msg.nodes.values():
        if not node.offline and node.vm_capable is not False and (
                node.total_memory is None or node.free_memory is None
                or node.total_disk is None or node.free_disk is None
                or node.total_cpus is None):
            return False
    for inst in msg.instances.values():
        if not inst.nodes:
            return False
    # the request sits two levels down (the message, its "request" object)
    return _nested_at_most(msg.request, untrusted.MAX_DEPTH - 1)


def _nested_at_most(value: Any, depth: int) -> bool:
    """Whether ``value`` nests at most ``depth`` arrays and objects deep."""
    level: list[Any] = [value]
    for _ in range(depth):
        inner: list[Any] = []
        for item in level:
            if isinstance(item, dict):
                inner.extend(item.values())
            elif isinstance(item, list):
                inner.extend(item)
        level = [x for x in inner if isinstance(x, (dict, list))]
        if not level:
            return True
    return not level


def message_of(msg: Message | dict[str, Any]) -> Message:
    """The typed message of a parsed one (``parse_message``) or of a library caller's dict."""
    if isinstance(msg, Message):
        return msg
    try:
        typed = msgspec.convert(msg, Message)
    except msgspec.ValidationError:
        return checked_message(msg)
    return typed if _complete(typed) else checked_message(msg)


def request_of(msg: Message | dict[str, Any]) -> dict[str, Any]:
    if isinstance(msg, Message):
        return msg.request
    req: dict[str, Any] = get(msg, "request", "obj", "invalid iallocator message")
    return req


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


# --- the checked path: a generic object, key by key, in hail's order and wording -----------


def checked_message(msg: dict[str, Any]) -> Message:
    """The typed message of a generic object that the types refused (or a caller's dict): each
    key read as hail reads it, the first bad one raised as hail words it."""
    ctx = "invalid iallocator message"
    request = get(msg, "request", "obj", ctx)
    groups_raw = get(msg, "nodegroups", "obj", ctx)
    nodes_raw = get(msg, "nodes", "obj", ctx)
    insts_raw = get(msg, "instances", "obj", ctx)
    cluster_tags = get(msg, "cluster_tags", "list", ctx, [])
    hvs = get(msg, "enabled_hypervisors", "list", ctx, [])
    for hv in hvs:
        if hv not in HYPERVISORS:
            raise InputError(f"{ctx}: key 'enabled_hypervisors': Invalid string value for type "
                             f"Hypervisor: {json.dumps(hv)}")
    groups = {uuid: _checked_group(uuid, g) for uuid, g in groups_raw.items()}
    nodes = {name: _checked_node(name, d, groups) for name, d in nodes_raw.items()}
    insts: dict[str, wire.Instance] = {}
    for name, d in insts_raw.items():
        inst = _checked_instance(name, d, f"invalid data for instance '{name}'", need_nodes=True)
        _known_nodes(name, inst.nodes, nodes)
        insts[name] = inst
    return Message(request=request, nodegroups=groups, nodes=nodes, instances=insts,
                   cluster_tags=cluster_tags, enabled_hypervisors=hvs)


def _checked_group(uuid: str, g: Any) -> wire.Group:
    gctx = f"invalid data for group '{uuid}'"
    if not isinstance(g, dict):
        raise InputError(f"{gctx}: Unable to read JSObject")
    policy = get(g, "alloc_policy", "str", gctx, "preferred")
    if policy not in get_args(wire.AllocPolicy):
        raise InputError(f"{gctx}: key 'alloc_policy': Invalid string value for type "
                         f"AllocPolicy: {json.dumps(policy)}")
    name = get(g, "name", "str", gctx)
    networks = get(g, "networks", "list", gctx, [])
    tags = get(g, "tags", "list", gctx, [])
    ipol = g.get("ipolicy")  # anything but an object: the default policy, as hail
    return wire.Group(name=name, alloc_policy=policy, networks=networks, tags=tags,
                      ipolicy=_checked_ipolicy(ipol, gctx) if isinstance(ipol, dict) else None)


def _checked_ipolicy(obj: dict[str, Any], ctx: str) -> wire.IPolicy:
    def spec(d: Any, name: str) -> wire.ISpec:
        if not isinstance(d, dict):
            raise InputError(f"{ctx}: key '{name}': Unable to read JSObject")
        return wire.ISpec(
            memory_size=get(d, "memory-size", "int", ctx),
            cpu_count=get(d, "cpu-count", "int", ctx),
            disk_size=get(d, "disk-size", "int", ctx), disk_count=get(d, "disk-count", "int", ctx),
            nic_count=get(d, "nic-count", "int", ctx),
            spindle_use=get(d, "spindle-use", "int", ctx),
        )

    minmax = []
    for item in get(obj, "minmax", "list", ctx):
        if not isinstance(item, dict):
            raise InputError(f"{ctx}: key 'minmax': Unable to read JSObject")
        minmax.append(wire.MinMax(min=spec(item.get("min"), "min"),
                                  max=spec(item.get("max"), "max")))
    templates = get(obj, "disk-templates", "list", ctx)
    return wire.IPolicy(
        minmax=minmax, std=spec(obj.get("std"), "std"), disk_templates=templates,
        vcpu_ratio=get(obj, "vcpu-ratio", "num", ctx),
        spindle_ratio=get(obj, "spindle-ratio", "num", ctx),
    )


def _checked_node(name: str, d: Any, groups: dict[str, wire.Group]) -> wire.Node:
    nctx = f"invalid data for node '{name}'"
    if not isinstance(d, dict):
        raise InputError(f"{nctx}: Unable to read JSObject")
    guuid = get(d, "group", "str", nctx)
    if guuid not in groups:
        raise InputError(f"{nctx}: unknown node group '{guuid}'")
    node = wire.Node(group=guuid, drained=get(d, "drained", "bool", nctx, False),
                     offline=get(d, "offline", "bool", nctx, False),
                     vm_capable=get(d, "vm_capable", "bool", nctx, True))
    ndp = get(d, "ndparams", "obj", nctx, {})
    excl = get(ndp, "exclusive_storage", "bool", nctx, False)
    node.tags = get(d, "tags", "list", nctx, [])
    live = not node.offline and node.vm_capable
    if live:  # only an online, VM-capable node's resources are read
        node.total_memory = get(d, "total_memory", "num", nctx)
        node.reserved_memory = get(d, "reserved_memory", "int", nctx, 0)
        node.free_memory = get(d, "free_memory", "int", nctx)
        node.total_disk = get(d, "total_disk", "num", nctx)
        node.free_disk = get(d, "free_disk", "int", nctx)
        node.total_cpus = get(d, "total_cpus", "num", nctx)
        node.reserved_cpus = get(d, "reserved_cpus", "int", nctx, 0)
        node.free_spindles = get(d, "free_spindles", "int", nctx, 0)
    spindles = None
    if excl:
        node.total_spindles = get(d, "total_spindles", "int", nctx, 0) if live else 0
    else:
        spindles = get(ndp, "spindle_count", "int", nctx, 1)
    node.ndparams = wire.NdParams(exclusive_storage=excl, spindle_count=spindles)
    return node


def _checked_instance(name: str, d: Any, ctx: str, need_nodes: bool) -> wire.Instance:
    if not isinstance(d, dict):
        raise InputError(f"{ctx}: Unable to read JSObject")
    template = get(d, "disk_template", "str", ctx)
    if template not in DISK_TEMPLATES:
        raise InputError(f"{ctx}: key 'disk_template': Invalid string value for type "
                         f"DiskTemplate: {json.dumps(template)}")
    disks: list[wire.Disk] = []
    for disk in get(d, "disks", "list", ctx):
        if not isinstance(disk, dict):
            raise InputError(f"{ctx}: key 'disks': Unable to read JSObject")
        sp = disk.get("spindles")
        disks.append(wire.Disk(size=get(disk, "size", "int", ctx),
                               spindles=None if sp is None else int(sp)))
    nics: list[wire.Nic] = []
    for nic in get(d, "nics", "list", ctx, []):
        checked = wire.Nic()  # anything but an object still counts as a NIC
        if isinstance(nic, dict):
            mode = nic.get("mode")
            if mode is not None and mode not in get_args(wire.NicMode):
                raise InputError(f"{ctx}: key 'mode': Invalid string value for type "
                                 f"NICMode: {json.dumps(mode)}")
            checked.mode = mode
            if nic.get("network"):
                checked.network = str(nic["network"])
        nics.append(checked)
    state = get(d, "admin_state", "str", ctx, "up")
    if state not in _STATUS:
        raise InputError(f"{ctx}: key 'admin_state': Invalid string value for type "
                         f"AdminState: {json.dumps(state)}")
    inst = wire.Instance(
        disk_template=template, disks=disks, nics=nics, admin_state=state,
        disk_space_total=get(d, "disk_space_total", "int", ctx, None),
        memory=get(d, "memory", "int", ctx), vcpus=get(d, "vcpus", "int", ctx),
        tags=get(d, "tags", "list", ctx, []), spindle_use=get(d, "spindle_use", "int", ctx, 1),
        forthcoming=bool(get(d, "forthcoming", "bool", ctx, False)),
    )
    if need_nodes:
        inst.nodes = get(d, "nodes", "list", ctx)
        if not inst.nodes or not all(isinstance(n, str) for n in inst.nodes):
            raise InputError(f"{ctx}: key 'nodes': Unable to read String")
    return inst


def _known_nodes(name: str, nodes: list[str], known: dict[str, Any]) -> None:
    for nname in nodes:
        if nname not in known:
            raise InputError(f"Unknown node '{nname}' for instance {name}")


# --- the model of a typed message ---------------------------------------------------------

_STATUS = {"up": "running", "down": "ADMIN_down", "offline": "ADMIN_offline"}


def _ispec(w: wire.ISpec) -> ISpec:
    return ISpec(memory=w.memory_size, cpus=w.cpu_count, disk_size=w.disk_size,
                 disk_count=w.disk_count, nic_count=w.nic_count, spindle_use=w.spindle_use)


def _ipolicy(w: wire.IPolicy) -> IPolicy:
    return IPolicy(minmax=tuple((_ispec(mm.min), _ispec(mm.max)) for mm in w.minmax),
                   std=_ispec(w.std), disk_templates=tuple(w.disk_templates),
                   vcpu_ratio=w.vcpu_ratio, spindle_ratio=w.spindle_ratio)


def _group(uuid: str, idx: int, w: wire.Group) -> Group:
    return Group(name=w.name, uuid=uuid, idx=idx, alloc_policy=w.alloc_policy or "preferred",
                 networks=tuple(w.networks or ()), tags=tuple(w.tags or ()),
                 ipolicy=_ipolicy(w.ipolicy) if w.ipolicy is not None else IPolicy())


def _node(name: str, idx: int, group: int, w: wire.Node) -> Node:
    node = Node(name, idx, group)
    node.drained = bool(w.drained)
    ndp = w.ndparams
    node.excl = bool(ndp is not None and ndp.exclusive_storage)
    node.tags = tuple(w.tags) if w.tags else ()
    live = not w.offline and w.vm_capable is not False
    node.offline = not live or node.drained
    if live:  # _complete or the checked path saw these
        node.t_mem = w.total_memory or 0.0
        node.n_mem = w.reserved_memory or 0
        node.f_mem = w.free_memory or 0
        node.t_dsk = w.total_disk or 0.0
        node.f_dsk = w.free_disk or 0
        node.t_cpu = w.total_cpus or 0.0
        node.n_cpu = w.reserved_cpus or 0
        node.f_spindles = w.free_spindles or 0
    if node.excl:
        node.t_spindles = (w.total_spindles or 0) if live else 0
    else:
        count = ndp.spindle_count if ndp is not None else None
        node.t_spindles = 1 if count is None else count
    return node


def model_instance(name: str, w: wire.Instance, pnode: int = -1, snode: int = -1,
                   idx: int = -1) -> Instance:
    """The model's instance of a typed one (its nodes' and its own index given, not yet on
    the nodes). Once per instance of a cluster read in (100,000 at 10,000 nodes): no
    comprehension for the common cases of one disk and NICs on no network."""
    wdisks = w.disks
    if len(wdisks) == 1:
        first = wdisks[0]
        disks = [(first.size, first.spindles)]
    else:
        disks = [(d.size, d.spindles) for d in wdisks]
    dsk = w.disk_space_total
    if dsk is None:
        dsk = sum(size for size, _ in disks)
    nics = w.nics
    nets: tuple[str, ...] = ()
    if nics:
        for nic in nics:
            if nic.network:
                nets = tuple([x.network for x in nics if x.network])
                break
    state = w.admin_state
    spindle_use = w.spindle_use
    # positional: half the cost of keywords for 100,000 instances (the order of the fields:
    # name, mem, dsk, vcpus, template, disks, status, pnode, snode, tags, spindle_use,
    # forthcoming, auto_balance, nets, nic_count, idx)
    return Instance(
        name, w.memory, dsk, w.vcpus, w.disk_template, disks,
        "running" if state is None else _STATUS[state], pnode, snode,
        tuple(w.tags) if w.tags else (), 1 if spindle_use is None else spindle_use,
        w.forthcoming is True, True, nets, len(nics) if nics else 0, idx,
    )


def build_cluster(msg: Message | dict[str, Any], opts: Options) -> Cluster:
    """The cluster described by an iallocator message (``parse_message``'s, or a dict)."""
    m = message_of(msg)
    groups: list[Group] = []
    by_uuid: dict[str, int] = {}
    for uuid, g in m.nodegroups.items():
        by_uuid[uuid] = len(groups)
        groups.append(_group(uuid, len(groups), g))
    nodes: list[Node] = []
    for name, wnode in m.nodes.items():
        gidx = by_uuid.get(wnode.group)
        if gidx is None:
            raise InputError(f"invalid data for node '{name}': unknown node group "
                             f"'{wnode.group}'")
        nodes.append(_node(name, len(nodes), gidx, wnode))
    node_by_name = {n.name: n.idx for n in nodes}
    instances: list[Instance] = []
    node_idx = node_by_name.get
    for name, w in m.instances.items():
        inodes = w.nodes
        pnode = node_idx(inodes[0], -1)
        snode = node_idx(inodes[1], -1) if len(inodes) > 1 else -2
        if pnode < 0 or snode == -1 or len(inodes) > 2:
            _known_nodes(name, inodes, node_by_name)  # the unknown one, as hail words it
        instances.append(model_instance(name, w, pnode, snode if snode >= 0 else -1,
                                        len(instances)))
    hvs = m.enabled_hypervisors or ()
    cl = Cluster(groups=groups, nodes=nodes, instances=instances,
                 cluster_tags=tuple(m.cluster_tags or ()), hypervisor=hvs[0] if hvs else None,
                 node_by_name=node_by_name,
                 inst_by_name=dict(zip(m.instances, range(len(instances)), strict=True)))
    finish_load(cl, opts.static_kvm_mem)
    return cl


def request_instance(cl: Cluster, d: dict[str, Any], ctx: str = "invalid request dict"
                     ) -> tuple[Instance, int]:
    """The new instance of an allocate-like request and its required node count."""
    name = get(d, "name", "str", ctx)
    required = get(d, "required_nodes", "int", ctx)
    inst = model_instance(name, _checked_instance(name, d, ctx, need_nodes=False))
    cl.prepare_instance(inst)
    return inst, required
