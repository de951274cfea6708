"""Running opcodes straight against the config file, without a master daemon (`--offline`).

The same logical units as masterd, so the same rules hold; only the queue and the
inter-process locks are missing (the config store still serializes writers). For repairs and
for clusters whose master is down.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from herder.core.errors import HerderError
from herder.core.store import ConfigStore
from herder.masterd import locking
from herder.masterd.jobs import opcodes
from herder.masterd.lu.base import JobResult, MasterEnv, ResultWithJobs
from herder.masterd.processor import Processor, child_opcodes


def run_offline(store: ConfigStore, ops: Sequence[dict[str, object] | opcodes.OpCode],
                feedback: Callable[[str], None] = lambda message: None) -> list[JobResult]:
    """Check and run each opcode in order; the first failure raises (later ones do not run).
    The jobs an LU asks for (`ResultWithJobs`) run right after it, in order: its result is
    `{"jobs": [[true, [their results]] or [false, error], ...]}`, as the queue's but with the
    results where the queue has job ids."""
    parsed = [opcodes.parse(op) for op in ops]
    config = store.load()
    locks = locking.LockManager(nodes=config.nodes, nodegroups=config.nodegroups,
                                instances=config.instances, networks=config.networks)
    processor = Processor(MasterEnv(store=store, locks=locks))
    results: list[JobResult] = []
    # LUs may add and remove locks; that needs the BGL
    locks.acquire(locking.LEVEL_CLUSTER, locking.BGL)
    try:
        for op in parsed:
            results.append(_run_one(processor, store, op, feedback))
    finally:
        locks.release(locking.LEVEL_CLUSTER)
    return results


def _run_one(processor: Processor, store: ConfigStore, op: opcodes.OpCode,
             feedback: Callable[[str], None]) -> JobResult:
    unit = processor.make_lu(op, feedback)
    unit.check(store.load())
    if op.dry_run:
        return unit.dry_run_result()
    result = unit.execute()
    if not isinstance(result, ResultWithJobs):
        return result
    ran: list[list[object]] = []
    for job in result.jobs:
        try:
            ran.append([True, [_run_one(processor, store, opcodes.parse(child), feedback)
                               for child in child_opcodes(op, job)]])
        except HerderError as err:
            ran.append([False, str(err)])
    return {**result.other, "jobs": ran}
