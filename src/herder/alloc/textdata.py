"""The htools text format (``*.data``) and simulated clusters (``--simulate``).

Sections, separated by one empty line: groups, nodes, instances, cluster tags and optionally
policies. Fields are ``|``-separated; see docs/allocator.md for every column.
"""

from __future__ import annotations

from herder.alloc.model import (
    DISK_TEMPLATES,
    Cluster,
    Group,
    Instance,
    IPolicy,
    ISpec,
    Node,
    finish_load,
)
from herder.alloc.protocol import InputError
from herder.core import sizes

TEXT_DEFAULT_POLICY = IPolicy(
    disk_templates=("diskless", "file", "sharedfile", "plain", "blockdev", "drbd", "rbd", "ext",
                    "gluster"),
)
STATUSES = frozenset({"running", "ADMIN_down", "ADMIN_offline", "ERROR_up", "ERROR_down",
                      "ERROR_nodedown", "ERROR_nodeoffline", "USER_down", "ERROR_wrongnode"})


def _sections(text: str) -> list[list[str]]:
    sections: list[list[str]] = [[]]
    for line in text.split("\n"):
        if line.strip() == "":
            sections.append([])
        else:
            sections[-1].append(line)
    while len(sections) > 5 and not sections[-1]:
        sections.pop()
    return sections


def _num(field: str, what: str, kind: type = int) -> float:
    try:
        return kind(field)
    except ValueError:
        raise InputError(f"Invalid {what}: cannot parse string '{field}'") from None


def _spec(text: str) -> ISpec:
    parts = text.split(",")
    if len(parts) != 6:
        raise InputError(f"Invalid policy specification '{text}'")
    mem, cpu, dsize, dcount, nics, su = (int(_num(p, "policy value")) for p in parts)
    return ISpec(mem, cpu, dsize, dcount, nics, su)


def parse_policy(fields: list[str]) -> IPolicy:
    if len(fields) < 6:
        raise InputError(f"Invalid policy line '{'|'.join(fields)}'")
    specs = fields[2].split(";")
    if len(specs) % 2:
        raise InputError(f"Invalid min/max specification '{fields[2]}'")
    minmax = tuple((_spec(specs[i]), _spec(specs[i + 1])) for i in range(0, len(specs), 2))
    return IPolicy(minmax=minmax, std=_spec(fields[1]),
                   disk_templates=tuple(t for t in fields[3].split(",") if t),
                   vcpu_ratio=float(fields[4]), spindle_ratio=float(fields[5]))


def parse_text(text: str, ignore_dynu: bool = False) -> Cluster:
    secs = _sections(text)
    if len(secs) < 4:
        raise InputError("Invalid/incomplete data file: expected at least 4 sections")
    groups: list[Group] = []
    by_uuid: dict[str, int] = {}
    for line in secs[0]:
        f = line.split("|")
        if len(f) < 3:
            raise InputError(f"Invalid group line '{line}'")
        nets = tuple(x for x in f[4].split(",") if x) if len(f) > 4 else ()
        tags = tuple(x for x in f[3].split(",") if x) if len(f) > 3 else ()
        g = Group(name=f[0], uuid=f[1], idx=len(groups), alloc_policy=f[2], networks=nets,
                  tags=tags, ipolicy=TEXT_DEFAULT_POLICY)
        by_uuid[f[1]] = g.idx
        groups.append(g)
    nodes: list[Node] = []
    for line in secs[1]:
        f = line.split("|")
        if len(f) < 9:
            raise InputError(f"Invalid node line '{line}'")
        if f[8] not in by_uuid:
            raise InputError(f"Unknown group '{f[8]}' for node {f[0]}")
        n = Node(f[0], len(nodes), by_uuid[f[8]])
        n.master = f[7] == "M"
        offline = f[7] == "Y" or any(x == "?" for x in f[1:7])
        n.offline = offline
        n.t_spindles = int(f[9]) if len(f) > 9 and f[9] else 1
        n.tags = tuple(x for x in f[10].split(",") if x) if len(f) > 10 else ()
        n.excl = len(f) > 11 and f[11] == "Y"
        n.f_spindles = int(f[12]) if len(f) > 12 and f[12] else 0
        n.n_cpu = int(f[13]) if len(f) > 13 and f[13] else 1
        n.cpu_speed = float(f[14]) if len(f) > 14 and f[14] else 1.0
        if not offline:
            n.t_mem = float(_num(f[1], "total memory", float))
            n.n_mem = int(_num(f[2], "node memory"))
            n.f_mem = int(_num(f[3], "free memory"))
            n.t_dsk = float(_num(f[4], "total disk", float))
            n.f_dsk = int(_num(f[5], "free disk"))
            n.t_cpu = float(_num(f[6], "total cpus", float))
        else:
            n.n_cpu = 0 if any(x == "?" for x in f[1:7]) else n.n_cpu
        nodes.append(n)
    node_by_name = {n.name: n.idx for n in nodes}
    insts: list[Instance] = []
    for line in secs[2]:
        f = line.split("|")
        if len(f) < 9:
            raise InputError(f"Invalid instance line '{line}'")
        name = f[0]
        if f[6] not in node_by_name:
            raise InputError(f"Unknown node '{f[6]}' for instance {name}")
        if f[7] and f[7] not in node_by_name:
            raise InputError(f"Unknown node '{f[7]}' for instance {name}")
        if f[8] not in DISK_TEMPLATES:
            raise InputError(f"Invalid disk template '{f[8]}' for instance {name}")
        dsk = int(_num(f[2], "disk"))
        dsp = None
        if len(f) > 11 and f[11] not in ("", "-"):
            dsp = int(f[11])
        inst = Instance(
            name=name, mem=int(_num(f[1], "memory")), dsk=dsk, vcpus=int(_num(f[3], "vcpus")),
            template=f[8], disks=[(dsk, dsp)], status=f[4] if f[4] in STATUSES else "running",
            pnode=node_by_name[f[6]], snode=node_by_name[f[7]] if f[7] else -1,
            tags=tuple(x for x in f[9].split(",") if x) if len(f) > 9 else (),
            spindle_use=int(f[10]) if len(f) > 10 and f[10] else 1,
            forthcoming=len(f) > 12 and f[12] == "Y", auto_balance=f[5] != "N",
            idx=len(insts),
        )
        if ignore_dynu:
            inst.util = (0.0, 0.0, 0.0, 0.0)
        insts.append(inst)
    ctags = tuple(secs[3])
    cluster_pol = TEXT_DEFAULT_POLICY
    if len(secs) > 4:
        for line in secs[4]:
            f = line.split("|")
            pol = parse_policy(f)
            if f[0] == "":
                cluster_pol = pol
            else:
                for g in groups:
                    if g.name == f[0]:
                        g.ipolicy = pol
    cl = Cluster(groups=groups, nodes=nodes, instances=insts, cluster_tags=ctags,
                 ipolicy=cluster_pol, node_by_name=node_by_name,
                 inst_by_name={i.name: i.idx for i in insts})
    finish_load(cl, 0)
    return cl


def htools_size(text: str) -> int:
    """htools' sizes in MiB: lower-case units binary, upper-case SI, truncated (Ganeti's
    parseUnit)."""
    try:
        return int(sizes.parse_size(text, "m", si_upper=True))
    except ValueError:
        raise InputError(f"Invalid size '{text}'") from None


def simulate(specs: list[str]) -> Cluster:
    """``policy,count,disk,mem,cpu[,spindles[,exclusive_storage]]`` per group; the last
    spec given becomes group-01 (as with hail/hspace)."""
    groups: list[Group] = []
    nodes: list[Node] = []
    for gnum, spec in enumerate(reversed(specs), start=1):
        parts = spec.split(",")
        if len(parts) < 5:
            raise InputError(f"Invalid cluster specification '{spec}'")
        pol = {"p": "preferred", "a": "last_resort", "u": "unallocable"}.get(parts[0], parts[0])
        g = Group(name=f"group-{gnum:02d}", uuid=f"fake-uuid-{gnum:02d}", idx=len(groups),
                  alloc_policy=pol, ipolicy=TEXT_DEFAULT_POLICY)
        groups.append(g)
        count = int(parts[1])
        disk, mem, cpu = htools_size(parts[2]), htools_size(parts[3]), int(parts[4])
        spindles = int(parts[5]) if len(parts) > 5 else 1
        excl = len(parts) > 6 and parts[6] == "True"
        for k in range(1, count + 1):
            n = Node(f"node-{gnum:02d}-{k:03d}", len(nodes), g.idx)
            n.t_mem, n.f_mem, n.n_mem = float(mem), mem, 0
            n.t_dsk, n.f_dsk = float(disk), disk
            n.t_cpu, n.n_cpu = float(cpu), 1
            n.t_spindles, n.f_spindles, n.excl = spindles, 0, excl
            n.master = gnum == 1 and k == 1
            nodes.append(n)
    cl = Cluster(groups=groups, nodes=nodes, instances=[],
                 node_by_name={n.name: n.idx for n in nodes}, ipolicy=TEXT_DEFAULT_POLICY)
    finish_load(cl, 0)
    return cl


def serialize(cl: Cluster) -> str:
    """The cluster in text format (what ``hspace``/``hbal`` ``-S`` write)."""
    out = []
    for g in cl.groups:
        out.append(f"{g.name}|{g.uuid}|{g.alloc_policy}|{','.join(g.tags)}|"
                   f"{','.join(g.networks)}")
    out.append("")
    for n in cl.nodes:
        flag = "Y" if n.offline else ("M" if n.master else "N")
        f_mem = n.f_mem
        out.append(f"{n.name}|{int(n.t_mem)}|{n.n_mem}|{f_mem}|{int(n.t_dsk)}|{n.f_dsk}|"
                   f"{int(n.t_cpu)}|{flag}|{cl.groups[n.group].uuid}|{n.t_spindles}|"
                   f"{','.join(n.tags)}|{'Y' if n.excl else 'N'}|{n.f_spindles}|{n.n_cpu}|"
                   f"{n.cpu_speed}")
    out.append("")
    for i in cl.instances:
        if i.pnode < 0:
            continue
        snode = cl.nodes[i.snode].name if i.snode >= 0 else ""
        dsp = "-" if not i.disks or i.disks[0][1] is None else str(i.disks[0][1])
        out.append(f"{i.name}|{i.mem}|{i.dsk}|{i.vcpus}|{i.status}|"
                   f"{'Y' if i.auto_balance else 'N'}|{cl.nodes[i.pnode].name}|{snode}|"
                   f"{i.template}|{','.join(i.tags)}|{i.spindle_use}|{dsp}|"
                   f"{'Y' if i.forthcoming else 'N'}")
    out.append("")
    out.extend(cl.cluster_tags)
    out.append("")

    def spec(s: ISpec) -> str:
        return f"{s.memory},{s.cpus},{s.disk_size},{s.disk_count},{s.nic_count},{s.spindle_use}"

    def pol(owner: str, p: IPolicy) -> str:
        mm = ";".join(f"{spec(lo)};{spec(hi)}" for lo, hi in p.minmax)
        return (f"{owner}|{spec(p.std)}|{mm}|{','.join(p.disk_templates)}|{p.vcpu_ratio}|"
                f"{p.spindle_ratio}")

    out.append(pol("", cl.ipolicy))
    out.extend(pol(g.name, g.ipolicy) for g in cl.groups)
    return "\n".join(out) + "\n"
