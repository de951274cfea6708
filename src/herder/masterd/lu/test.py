"""OP_TEST_DELAY: hold node locks for a while (tests and benchmarks of the queue)."""

from __future__ import annotations

import time
from typing import Any

from herder.core import locking as L
from herder.core import model as M
from herder.core.jobs import opcodes as O
from herder.masterd.lu.base import LockRequest, LogicalUnit, lookup


class TestDelay(LogicalUnit):
    OP = O.OpTestDelay

    def declare_locks(self, config: M.ConfigData) -> list[LockRequest]:
        op: O.OpTestDelay = self.op  # type: ignore[assignment]
        if op.no_locks or not op.on_nodes:
            return []
        uuids = sorted(lookup(config.find_node, n).uuid for n in op.on_nodes)
        return [LockRequest(L.LEVEL_NODE, uuids)]

    def execute(self) -> Any:
        op: O.OpTestDelay = self.op  # type: ignore[assignment]
        for _ in range(op.repeat + 1):
            time.sleep(op.duration)
        return None

