"""An hspace run over the allocator's cluster model: what `herder capacity` computes (the CLI
parses the options, reads the cluster and prints; errors keep hspace's wording, as
`InputError`).

`run` places instances in both of hspace's modes, each on its own copy of the cluster: tiered
(from the policy's biggest spec, or --tiered-alloc, shrinking along the most frequent failure)
and standard (copies of the policy's standard spec, or --standard-alloc, until the first
failure). `machine_readable` is hspace's `HTS_*` output; `resources`, `efficiency` and
`failure_reason` the figures of its human one.
"""

from __future__ import annotations

from dataclasses import dataclass

from herder.alloc.capacity import (
    Capacity,
    CapacityRun,
    Setup,
    prepare,
    spec_instance,
    tspec,
)
from herder.alloc.metrics import Stats
from herder.alloc.model import Cluster, Fail, Node
from herder.alloc.protocol import InputError, Options
from herder.alloc.textdata import htools_size

Spec = tuple[int, int, int, int]  # memory, disk, vcpus, spindles


def parse_spec(text: str | None, what: str) -> list[int] | None:
    """`disk,ram,cpu[,spindles]` (htools' sizes) as given on the command line, or None."""
    if text is None:
        return None
    parts = text.split(",")
    if len(parts) not in (3, 4):
        raise InputError(f"Invalid {what} specification '{text}' (disk,ram,cpu[,spindles])")
    try:
        return [htools_size(parts[0]), htools_size(parts[1]), *(int(p) for p in parts[2:])]
    except (InputError, ValueError):
        raise InputError(f"Invalid {what} specification '{text}'") from None


@dataclass
class Mode:
    """One mode's outcome: the cluster after its placements, what it placed, its score."""

    cluster: Cluster
    run: CapacityRun
    score: float


@dataclass
class Hspace:
    initial: Cluster  # prepared (bad groups marked), never placed on
    setup: Setup
    template: str  # the disk template of the instances placed
    score: float  # the initial cluster score
    tiered_specs: list[Spec]  # the tiered mode's starting specs
    standard_spec: Spec
    tiered: Mode
    standard: Mode

    @property
    def online(self) -> list[Node]:
        return [n for n in self.initial.nodes if not n.offline]


def run(cl0: Cluster, opts: Options, *, disk_template: str | None, spindle_use: int | None,
        max_length: int | None, accept_existing: bool, independent_groups: bool,
        tiered_alloc: list[int] | None, standard_alloc: list[int] | None) -> Hspace:
    """Both modes on copies of `cl0` (prepared in place); the specs as `parse_spec` gives
    them (disk first), None for the policy's."""
    pol = cl0.ipolicy
    template = disk_template or (pol.disk_templates[0] if pol.disk_templates else "plain")
    su_std = spindle_use if spindle_use is not None else pol.std.spindle_use
    setup = prepare(cl0, opts, accept_existing, independent_groups)
    ini_score = Stats(cl0.nodes).score()

    if tiered_alloc is not None:
        tiered_specs = [(tiered_alloc[1], tiered_alloc[0], tiered_alloc[2],
                         tiered_alloc[3] if len(tiered_alloc) > 3 else su_std)]
    else:
        tiered_specs = [(hi.memory, hi.disk_size, hi.cpus, hi.spindle_use)
                        for _, hi in pol.minmax]
    cl_t = cl0.copy()
    cap_t = Capacity(cl_t, prepare(cl_t, opts, accept_existing, independent_groups), opts)
    trun = CapacityRun()
    for mem, dsk, cpu, spn in tiered_specs:
        trun.stopped_by_limit = False
        cap_t.tiered(spec_instance("", mem, dsk, cpu, spn, template, su_std), max_length, trun)

    if standard_alloc is not None:
        std = (standard_alloc[1], standard_alloc[0], standard_alloc[2],
               standard_alloc[3] if len(standard_alloc) > 3 else su_std)
    else:
        std = (pol.std.memory, pol.std.disk_size, pol.std.cpus, su_std)
    cl_s = cl0.copy()
    cap_s = Capacity(cl_s, prepare(cl_s, opts, accept_existing, independent_groups), opts)
    srun = CapacityRun()
    cap_s.iterate(spec_instance("", *std, template, su_std), max_length, srun)
    return Hspace(cl0, setup, template, ini_score, tiered_specs, std,
                  Mode(cl_t, trun, Stats(cl_t.nodes).score()),
                  Mode(cl_s, srun, Stats(cl_s.nodes).score()))


def failure_reason(run: CapacityRun) -> str:
    """The most frequent reason a placement failed (hspace's tie order)."""
    if not run.fails:
        return "FailMem"
    return max(sorted(run.fails), key=lambda f: run.fails[f]).label


def resources(cl: Cluster, prefix: str) -> dict[str, object]:
    """The cluster's instances and free resources, as hspace's `PREFIX_*` keys."""
    on = [n for n in cl.nodes if not n.offline]
    placed = [i for i in cl.instances if i.pnode >= 0]
    return {
        f"{prefix}_INST_CNT": len(placed),
        f"{prefix}_MEM_FREE": sum(n.unalloc for n in on),
        f"{prefix}_MEM_AVAIL": sum(n.avail_mem for n in on),
        f"{prefix}_MEM_RESVD": sum(n.r_mem for n in on),
        f"{prefix}_DSK_FREE": sum(n.f_dsk for n in on),
        f"{prefix}_SPN_FREE": sum(n.f_spindles for n in on),
        f"{prefix}_CPU_INST": sum(n.u_cpu for n in on),
    }


@dataclass(frozen=True)
class Totals:
    """The online nodes' resources."""

    nodes: int
    mem: int
    dsk: int
    cpu: int
    vcpu: int

    @classmethod
    def of(cls, online: list[Node]) -> Totals:
        return cls(len(online), int(sum(n.t_mem for n in online)),
                   int(sum(n.t_dsk for n in online)), int(sum(n.t_cpu for n in online)),
                   int(sum(n.t_cpu * n.vcpu_ratio for n in online)))


def machine_readable(result: Hspace) -> dict[str, object]:
    """hspace's --machine-readable keys and values, in its order."""
    total = Totals.of(result.online)
    out: dict[str, object] = {
        "HTS_CLUSTER_MEM": total.mem, "HTS_CLUSTER_DSK": total.dsk,
        "HTS_CLUSTER_CPU": total.cpu, "HTS_CLUSTER_VCPU": total.vcpu,
        "HTS_CLUSTER_NODES": total.nodes, "HTS_INI_SCORE": f"{result.score:.8f}",
    }
    out.update(resources(result.initial, "HTS_INI"))
    mem, dsk, cpu, spn = result.tiered_specs[0]
    out.update({"HTS_TSPEC_INI_MEM": mem, "HTS_TSPEC_INI_DSK": dsk, "HTS_TSPEC_INI_CPU": cpu,
                "HTS_TSPEC_INI_SPN": spn, "HTS_TSPEC_INI_DISK_TEMPLATE": result.template,
                "HTS_TRL_SCORE": f"{result.tiered.score:.8f}"})
    out.update(resources(result.tiered.cluster, "HTS_TRL"))
    out["HTS_TSPEC"] = f"'{tspec(result.tiered.run.placed)}'"
    std = result.standard_spec
    out.update({"HTS_SPEC_MEM": std[0], "HTS_SPEC_DSK": std[1], "HTS_SPEC_CPU": std[2],
                "HTS_SPEC_SPN": std[3], "HTS_SPEC_DISK_TEMPLATE": result.template,
                "HTS_FIN_SCORE": f"{result.standard.score:.8f}"})
    out.update(resources(result.standard.cluster, "HTS_FIN"))
    srun = result.standard.run
    out["HTS_ALLOC_INSTANCES"] = len(srun.placed)
    out["HTS_ALLOC_FAIL_REASON"] = failure_reason(srun).upper()
    for f in Fail:
        out[f"HTS_ALLOC_{f.label.upper()}_CNT"] = srun.fails.get(f, 0)
    out["HTS_OK"] = 1
    return out


def efficiency(cl: Cluster) -> tuple[float, float, float]:
    """The share (in %) of the online nodes' memory, disk and vcpus the instances use."""
    on = [n for n in cl.nodes if not n.offline]
    tm = sum(n.t_mem for n in on) or 1
    td = sum(n.t_dsk for n in on) or 1
    tv = sum(n.t_cpu * n.vcpu_ratio for n in on) or 1
    im = sum(i.mem for i in cl.instances if i.pnode >= 0 and i.uses_memory)
    idk = sum(i.dsk * (2 if i.snode >= 0 else 1) for i in cl.instances
              if i.pnode >= 0 and i.local)
    iv = sum(n.u_cpu for n in on)
    return 100 * im / tm, 100 * idk / td, 100 * iv / tv
