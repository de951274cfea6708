"""OP_OOB_COMMAND: a node's out-of-band program (Ganeti's LUOobCommand, lib/cmdlib/misc.py).

Ganeti's rules: power-off and power-cycle never of the master (named: refused; no names: every
node but the master); power-off only of a node marked offline (unless `ignore_status`); nodes in
name order; a node without `oob_program` gets RS_UNAVAIL, a program that fails or answers a bad
payload RS_NODATA with a warning in the job log; power-on and power-off record the node's
`powered`; power-status warns when it differs from the record; `power_delay` seconds between
power-ons. The result is Ganeti's: per node `[[RS_NORMAL, name], [status, payload]]`.
"""

from __future__ import annotations

import time
from typing import Any

from herder.core import model
from herder.core.errors import OpPrereqError
from herder.masterd import locking, oob
from herder.masterd.jobs import opcodes
from herder.masterd.livefields import RS_NODATA, RS_NORMAL, RS_UNAVAIL
from herder.masterd.lu.base import JobResult, LockRequest, LogicalUnit, lookup

SKIP_MASTER = (oob.POWER_OFF, oob.POWER_CYCLE)


def oob_program(config: model.ConfigData, node: model.Node) -> str:
    """The node's filled `oob_program` ("" when it has none: Ganeti's SupportsOob)."""
    return str(config.filled_ndparams(node).get("oob_program") or "")


class OobCommand(LogicalUnit[opcodes.OpOobCommand]):
    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        names = self.op.node_names
        return [LockRequest(locking.LEVEL_NODE, sorted(lookup(config.find_node, n).uuid
                                                       for n in names) if names else None)]

    def _nodes(self, config: model.ConfigData) -> list[model.Node]:
        op = self.op
        master = config.nodes[config.cluster.master_node]
        if op.node_names:
            nodes = [lookup(config.find_node, name) for name in op.node_names]
            if op.command in SKIP_MASTER and any(n.uuid == master.uuid for n in nodes):
                program = oob_program(config, master)
                more = (f"run '{program} {op.command} {master.name}' if you want to operate "
                        "on the master regardless" if program
                        else "it does not support out-of-band operations")
                raise OpPrereqError(f"Operating on the master node {master.name} is not "
                                    f"allowed for {op.command}; {more}", "wrong_input")
        else:
            nodes = [n for n in config.nodes.values()
                     if op.command not in SKIP_MASTER or n.uuid != master.uuid]
        return sorted({n.uuid: n for n in nodes}.values(), key=lambda n: n.name)

    def check(self, config: model.ConfigData) -> None:
        for node in self._nodes(config):
            if (not self.op.ignore_status and self.op.command == oob.POWER_OFF
                    and not node.offline):
                raise OpPrereqError(f"Cannot power off node {node.name} because it is not "
                                    "marked offline", "wrong_state")

    def execute(self) -> JobResult:
        config = self.env.store.load()
        nodes = self._nodes(config)
        result: list[list[list[Any]]] = []
        for index, node in enumerate(nodes):
            entry: list[list[Any]] = [[RS_NORMAL, node.name]]
            result.append(entry)
            program = oob_program(config, node)
            if not program:
                entry.append([RS_UNAVAIL, None])
                continue
            try:
                outcome = oob.run(program, self.op.command, node.name, self.op.timeout)
            except oob.OobError as err:
                self.feedback(f"WARNING: Out-of-band command {self.op.command} failed on "
                              f"node '{node.name}': {err}")
                entry.append([RS_NODATA, None])
                continue
            self._record(node, outcome.payload)
            entry.append([RS_NORMAL, outcome.payload])
            if self.op.command == oob.POWER_ON and index < len(nodes) - 1:
                time.sleep(self.op.power_delay)
        return result

    def _record(self, node: model.Node, payload: Any) -> None:
        command = self.op.command
        if command == oob.HEALTH:
            for item, status in payload or []:
                if status in ("WARNING", "CRITICAL"):
                    self.feedback(f"WARNING: Item '{item}' on node '{node.name}' has status "
                                  f"'{status}'")
        elif command == oob.POWER_STATUS:
            if payload[oob.POWERED] != node.powered:
                self.feedback(f"Recorded power state ({node.powered}) of node '{node.name}' "
                              f"does not match actual power state ({payload[oob.POWERED]})")
        elif command in (oob.POWER_ON, oob.POWER_OFF):
            powered = command == oob.POWER_ON
            with self.env.store.update() as config:
                config.nodes[node.uuid].powered = powered
