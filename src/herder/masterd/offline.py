"""Running opcodes straight against the config file, without a master daemon (`--offline`).

The same logical units as masterd, so the same rules hold; only the queue and the
inter-process locks are missing (the config store still serializes writers). For repairs and
for clusters whose master is down.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from herder.core.store import ConfigStore
from herder.masterd import locking
from herder.masterd.jobs import opcodes
from herder.masterd.lu.base import JobResult, MasterEnv
from herder.masterd.processor import Processor


def run_offline(store: ConfigStore, ops: Sequence[dict[str, object] | opcodes.OpCode],
                feedback: Callable[[str], None] = lambda message: None) -> list[JobResult]:
    """Check and run each opcode in order; the first failure raises (later ones do not run)."""
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
            unit = processor.make_lu(op, feedback)
            unit.check(store.load())
            results.append(unit.dry_run_result() if op.dry_run else unit.execute())
    finally:
        locks.release(locking.LEVEL_CLUSTER)
    return results
