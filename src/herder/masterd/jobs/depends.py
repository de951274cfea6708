"""Job dependencies, Ganeti's `depends` (design-chained-jobs): every opcode may carry
`[[job_id, [status, ...]], ...]`.

- At submission a relative (negative) job id names a job submitted before it in the same
  submission (-1: the one just before; Ganeti's `_ResolveJobDependencies`); one that names no
  such job refuses the submission. Stored opcodes carry absolute ids only.
- A job does not start while a job it depends on (through any of its opcodes) is in the queue
  and not finished (Ganeti 3.0's scheduler, `jobEligible`): it stays queued.
- When an opcode is about to run, each of its dependencies decides (Ganeti's
  `_JobDependencyManager.CheckAndRegister`): a dependency that ended canceled while "canceled"
  is not among its statuses cancels the job; one that ended in a listed status, or in any
  status when the list is empty, lets the opcode go on; any other status fails the opcode
  unrun ("Dependency job N finished with status 'error', not one of 'success' as required"),
  as does a job that is not found or the job itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from herder.masterd.jobs import opcodes

Outcome = Literal["continue", "cancel", "fail"]
FINAL = frozenset({"canceled", "error", "success"})


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    message: str


def check_relative(ops: Sequence[opcodes.OpCode], position: int) -> None:
    """Refuse a relative job id of `ops` (the job at `position` of its submission) that names
    no earlier job of the submission (OpcodeError), before any job is queued."""
    for op in ops:
        for job_id, _ in op.dependencies:
            if job_id < 0 and -job_id > position:
                raise opcodes.OpcodeError(
                    f"{op.op_id}: Unable to resolve relative job ID {job_id} (the "
                    f"submission has {position} job(s) before this one)")


def resolve(ops: Sequence[opcodes.OpCode], earlier: Sequence[int]) -> None:
    """Replace relative job ids in `ops`' dependencies by the ids of `earlier` (the jobs
    submitted before this one in the same submission, in order). OpcodeError when one names
    no such job."""
    for op in ops:
        if not op.depends:
            continue
        resolved: list[tuple[int | str, list[opcodes.FinalJobStatus]]] = []
        for job_id, statuses in op.dependencies:
            if job_id < 0:
                if -job_id > len(earlier):
                    raise opcodes.OpcodeError(
                        f"{op.op_id}: Unable to resolve relative job ID {job_id} (the "
                        f"submission has {len(earlier)} job(s) before this one)")
                job_id = earlier[job_id]
            resolved.append((job_id, statuses))
        op.depends = resolved


def job_ids(ops: Sequence[dict[str, Any]]) -> set[int]:
    """Every job the opcodes (stored dict forms) depend on."""
    return {int(dep[0]) for op in ops for dep in op.get("depends") or ()}


def verdict(job_id: int, depends: Sequence[Sequence[Any]],
            status_of: Callable[[int], str | None]) -> Verdict:
    """What one opcode's dependencies say once every job they name is finished; `status_of`
    gives a job's status (None: no such job)."""
    for dep_id, wanted in depends:
        dep_id = int(dep_id)
        if dep_id == job_id:
            return Verdict("fail", "Job can't depend on itself")
        status = status_of(dep_id)
        if status is None:
            return Verdict("fail", f"Dependency error: Job {dep_id} not found")
        if status not in FINAL:  # a job that did not exist when this one was let start
            return Verdict("fail", f"Dependency job {dep_id} is not finished ({status})")
        if status == "canceled" and "canceled" not in wanted:
            return Verdict("cancel", f"Dependency job {dep_id} was cancelled")
        if wanted and status not in wanted:
            return Verdict("fail", f"Dependency job {dep_id} finished with status "
                                   f"'{status}', not one of '{', '.join(wanted)}' as required")
    return Verdict("continue", "")
