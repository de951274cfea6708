"""Moving instances between node groups and placing several at once, as Ganeti does: the
allocator answers with jobs (change-group) or placements (multi-allocate), and the LU answers
them as jobs of their own (`ResultWithJobs`): OP_INSTANCE_CHANGE_GROUP, OP_GROUP_EVACUATE,
OP_INSTANCE_MULTI_ALLOC."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from herder.core import model, params
from herder.core.errors import OpPrereqError
from herder.masterd import iallocator, locking
from herder.masterd.jobs import opcodes
from herder.masterd.lu.base import JobResult, LockRequest, LogicalUnit, ResultWithJobs, lookup
from herder.masterd.lu.placement import live_figures


def allocator_names(config: model.ConfigData, given: str | None, kind: str) -> list[str]:
    """The op's iallocator, else the cluster's defaults for `kind`, else herder's own."""
    if given:
        return [given]
    return list(config.cluster.default_iallocators.get(kind, [])) or [iallocator.BUILTIN]


def target_groups(config: model.ConfigData, given: Sequence[str] | None,
                  leaving: set[str]) -> list[str]:
    """The names of the groups the instances may go to: those given, else every other one;
    a given group must exist and not be one the instances leave."""
    if given:
        groups = [lookup(config.find_group, name) for name in given]
        inside = [g.name for g in groups if g.uuid in leaving]
        if inside:
            raise OpPrereqError(f"can't use group(s) {', '.join(inside)} as targets: the "
                                "instances are in them", "wrong_input")
        return [g.name for g in groups]
    others = [g.name for g in config.nodegroups.values() if g.uuid not in leaving]
    if not others:
        raise OpPrereqError("there are no other node groups to move the instances to",
                            "wrong_input")
    return sorted(others)


ChangeGroupOpT = TypeVar("ChangeGroupOpT", opcodes.OpInstanceChangeGroup,
                         opcodes.OpGroupEvacuate)


class _ChangeGroup(LogicalUnit[ChangeGroupOpT]):
    """Instances to other groups through the allocator's change-group request; the answer's
    jobs are submitted, and an instance it could not place fails the opcode (Ganeti's
    _LoadNodeEvacResult with `use_nodes` false)."""

    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        return [LockRequest(locking.LEVEL_INSTANCE, None, shared=True),
                LockRequest(locking.LEVEL_NODEGROUP, None, shared=True),
                LockRequest(locking.LEVEL_NODE, None, shared=True)]

    def moving(self, config: model.ConfigData) -> list[model.Instance]:
        raise NotImplementedError

    def check(self, config: model.ConfigData) -> None:
        self.config = config
        self.instances = self.moving(config)
        leaving = {config.nodes[i.primary_node].group for i in self.instances}
        self.targets = target_groups(config, self.op.target_groups, leaving)

    def dry_run_result(self) -> JobResult:
        return [i.name for i in self.instances]

    def execute(self) -> JobResult | ResultWithJobs:
        if not self.instances:
            self.feedback("no instances to move")
            return ResultWithJobs([])
        request = {"type": "change-group", "instances": [i.name for i in self.instances],
                   "target_groups": self.targets}
        answer: list[Any]
        name, answer = iallocator.job_answer(
            self.config, allocator_names(self.config, self.op.iallocator, "change-group"),
            request, live_figures(self.env, self.config, self.feedback),
            self.env.iallocator_path or iallocator.DEFAULT_SEARCH_PATH)
        moved, failed, jobs = [*answer, [], [], []][:3]
        if failed:
            raise OpPrereqError(f"iallocator {name} could not move "
                                + "; ".join(f"{inst}: {why}" for inst, why in failed),
                                "insufficient_resources")
        for inst, group, nodes in moved:
            self.feedback(f"{inst}: to group {group} on {', '.join(nodes)}")
        early = self.op.early_release
        return ResultWithJobs([[{**op, "early_release": early}
                                if op.get("OP_ID") == "OP_INSTANCE_REPLACE_DISKS" else dict(op)
                                for op in job] for job in jobs])


class InstanceChangeGroup(_ChangeGroup[opcodes.OpInstanceChangeGroup]):
    def moving(self, config: model.ConfigData) -> list[model.Instance]:
        return [lookup(config.find_instance, self.op.instance_name)]


class GroupEvacuate(_ChangeGroup[opcodes.OpGroupEvacuate]):
    def moving(self, config: model.ConfigData) -> list[model.Instance]:
        group = lookup(config.find_group, self.op.group_name)
        members = {n.uuid for n in config.nodes.values() if n.group == group.uuid}
        if self.op.target_groups and group.name in self.op.target_groups:
            raise OpPrereqError(f"group {group.name} cannot be a target of its own "
                                "evacuation", "wrong_input")
        return sorted((i for i in config.instances.values()
                       if i.primary_node in members
                       or members & set(i.secondary_nodes)), key=lambda i: i.name)

    def execute(self) -> JobResult | ResultWithJobs:
        result = super().execute()
        assert isinstance(result, ResultWithJobs)  # the change-group's answer is its jobs
        if self.op.force_failover:  # Ganeti's: no migrations, failovers instead
            result.jobs[:] = [[{**op, "OP_ID": "OP_INSTANCE_FAILOVER"} if
                               op.get("OP_ID") == "OP_INSTANCE_MIGRATE" else op for op in job]
                              for job in result.jobs]
        if self.op.sequential:  # one job of every move, in order
            result.jobs[:] = [[op for job in result.jobs for op in job]] if result.jobs else []
        return result


class InstanceMultiAlloc(LogicalUnit[opcodes.OpInstanceMultiAlloc]):
    """Ganeti's LUInstanceMultiAlloc: the allocator's multi-allocate places the instances
    together; each placed one becomes an OP_INSTANCE_CREATE job on its nodes, the others are
    listed as failed."""

    def check(self, config: model.ConfigData) -> None:
        self.config = config
        taken = [i.instance_name for i in self.op.instances
                 if any(x.name == i.instance_name for x in config.instances.values())]
        if taken:
            raise OpPrereqError(f"instance(s) {', '.join(taken)} already exist",
                                "already_exists")
        for inst in self.op.instances:
            if inst.disk_template not in config.cluster.enabled_disk_templates:
                raise OpPrereqError(f"{inst.instance_name}: disk template "
                                    f"{inst.disk_template} is not enabled", "wrong_input")
        self.allocated, self.failed = self._place()

    def _place(self) -> tuple[list[list[Any]], list[str]]:
        c = self.config.cluster
        requests = []
        for inst in self.op.instances:
            filled = params.fill(params.BE_FAMILY.defaults(), c.beparams, inst.beparams)
            sizes = [params.parse_size(d.get("size")) for d in inst.disks]
            requests.append({
                "name": inst.instance_name, "disk_template": inst.disk_template,
                "required_nodes": 2 if inst.disk_template == "drbd" else 1,
                "os": inst.os_type or "", "tags": list(inst.tags),
                "hypervisor": inst.hypervisor or (c.enabled_hypervisors or [""])[0],
                "memory": filled["maxmem"], "vcpus": filled["vcpus"],
                "spindle_use": filled["spindle_use"],
                "disks": [{"size": s, "mode": d.get("mode", "rw"), "spindles": 1}
                          for s, d in zip(sizes, inst.disks, strict=True)],
                "disk_space_total": iallocator.disk_space_total(inst.disk_template, sizes),
                "nics": [{"ip": n.get("ip"), "mac": n.get("mac", "auto"),
                          "bridge": n.get("link")} for n in inst.nics]})
        answer: list[Any]
        _, answer = iallocator.job_answer(
            self.config, allocator_names(self.config, self.op.iallocator, "multi-allocate"),
            {"type": "multi-allocate", "instances": requests},
            live_figures(self.env, self.config, self.feedback),
            self.env.iallocator_path or iallocator.DEFAULT_SEARCH_PATH)
        allocated, failed = [*answer, [], []][:2]
        return allocated, [str(name) for name in failed]

    def dry_run_result(self) -> JobResult:
        return {"allocatable": [name for name, _ in self.allocated], "failed": self.failed}

    def execute(self) -> JobResult | ResultWithJobs:
        by_name = {i.instance_name: i for i in self.op.instances}
        jobs = []
        for name, nodes in self.allocated:
            create = by_name[name].to_dict()
            for plumbing in ("dry_run", "debug_level", "depends", "comment", "reason"):
                create.pop(plumbing, None)
            create.update({"OP_ID": "OP_INSTANCE_CREATE", "pnode": nodes[0],
                           "snode": nodes[1] if len(nodes) > 1 else None, "iallocator": None})
            jobs.append([create])
        for name in self.failed:
            self.feedback(f"{name}: the allocator found no place")
        return ResultWithJobs(jobs, {"allocatable": [name for name, _ in self.allocated],
                                     "failed": self.failed})
