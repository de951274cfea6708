"""OP_TEST_DELAY: hold node locks for a while (tests and benchmarks of the queue)."""

from __future__ import annotations

import time

from herder.core import model
from herder.masterd import locking
from herder.masterd.jobs import opcodes
from herder.masterd.lu.base import JobResult, LockRequest, LogicalUnit, lookup


class TestDelay(LogicalUnit[opcodes.OpTestDelay]):
    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        op = self.op
        if op.no_locks or not op.on_nodes:
            return []
        uuids = sorted(lookup(config.find_node, n).uuid for n in op.on_nodes)
        return [LockRequest(locking.LEVEL_NODE, uuids)]

    def execute(self) -> JobResult:
        op = self.op
        for _ in range(op.repeat + 1):
            time.sleep(op.duration)
        return None

