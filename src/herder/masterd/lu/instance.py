"""Instance LUs: rename, parameter changes and query (config only), and the operations that
act on a node through the node RPC (start, shutdown, reboot, migrate, failover, remove)."""

from __future__ import annotations

from typing import Any

from herder.core import locking as L
from herder.core import model as M
from herder.core import params as P
from herder.core.errors import ConfigError, OpPrereqError
from herder.core.jobs import opcodes as O
from herder.masterd.lu.base import LockRequest, LogicalUnit, lookup
from herder.masterd.lu.cluster import resets


def _instance_locks(config: M.ConfigData, name: str, *, nodes: bool = False,
                    shared_nodes: bool = True) -> list[LockRequest]:
    inst = lookup(config.find_instance, name)
    requests = [LockRequest(L.LEVEL_INSTANCE, [inst.uuid])]
    if nodes:
        requests.append(LockRequest(L.LEVEL_NODE, sorted(inst.all_nodes), shared=shared_nodes))
    return requests


class InstanceRename(LogicalUnit):
    OP = O.OpInstanceRename

    def declare_locks(self, config: M.ConfigData) -> list[LockRequest]:
        return _instance_locks(config, self.op.instance_name)  # type: ignore[attr-defined]

    def check(self, config: M.ConfigData) -> None:
        op: O.OpInstanceRename = self.op  # type: ignore[assignment]
        lookup(config.find_instance, op.instance_name)
        if any(i.name == op.new_name for i in config.instances.values()):
            raise OpPrereqError(f"instance {op.new_name!r} already exists", "already_exists")

    def execute(self) -> Any:
        op: O.OpInstanceRename = self.op  # type: ignore[assignment]
        with self.env.store.update() as config:
            inst = config.find_instance(op.instance_name)
            inst.name = op.new_name
            inst.touch()
        return op.new_name


class InstanceSetParams(LogicalUnit):
    OP = O.OpInstanceSetParams

    def declare_locks(self, config: M.ConfigData) -> list[LockRequest]:
        return _instance_locks(config, self.op.instance_name)  # type: ignore[attr-defined]

    def _apply(self, inst: M.Instance) -> list[list[str]]:
        op: O.OpInstanceSetParams = self.op  # type: ignore[assignment]
        changes: list[list[str]] = []
        if op.hvparams:
            inst.hvparams = P.apply_overrides(P.hv_family(inst.hypervisor), inst.hvparams,
                                              resets(op.hvparams), instance_level=True)
            changes += [[f"hv/{k}", str(v)] for k, v in op.hvparams.items()]
        if op.beparams:
            inst.beparams = P.apply_overrides(P.BE_FAMILY, inst.beparams, resets(op.beparams))
            changes += [[f"be/{k}", str(v)] for k, v in op.beparams.items()]
        if op.osparams:
            for key, value in resets(op.osparams).items():
                if value is None:
                    inst.osparams.pop(key, None)
                else:
                    inst.osparams[key] = str(value)
            changes += [[f"os/{k}", str(v)] for k, v in op.osparams.items()]
        if op.os_name:
            inst.os = op.os_name
            changes.append(["os", op.os_name])
        if op.offline is not None:
            if op.offline and inst.admin_state == "up":
                raise ConfigError(f"instance {inst.name} is running; shut it down before "
                                  "marking it offline")
            inst.admin_state = "offline" if op.offline else "down"
            changes.append(["admin_state", inst.admin_state])
        return changes

    def check(self, config: M.ConfigData) -> None:
        inst = lookup(config.find_instance, self.op.instance_name)  # type: ignore[attr-defined]
        copy = M.decode(M.encode(config)).instances[inst.uuid]
        try:
            self._apply(copy)
        except ConfigError as err:
            raise OpPrereqError(str(err)) from None

    def execute(self) -> Any:
        with self.env.store.update() as config:
            inst = config.find_instance(self.op.instance_name)  # type: ignore[attr-defined]
            changes = self._apply(inst)
            inst.touch()
        return changes


class InstanceQueryData(LogicalUnit):
    OP = O.OpInstanceQueryData

    def execute(self) -> Any:
        op: O.OpInstanceQueryData = self.op  # type: ignore[assignment]
        config = self.env.store.load()
        wanted = [lookup(config.find_instance, n) for n in op.instances] if op.instances \
            else list(config.instances.values())
        result = {}
        for inst in wanted:
            result[inst.name] = {
                "name": inst.name, "uuid": inst.uuid, "config_state": inst.admin_state,
                "run_state": None if op.static else "unknown",
                "pnode": config.node_name(inst.primary_node),
                "snodes": [config.node_name(n) for n in inst.secondary_nodes],
                "os": inst.os, "hypervisor": inst.hypervisor,
                "disk_template": inst.disk_template,
                "hv_instance": inst.hvparams, "hv_actual": config.filled_hvparams(inst),
                "be_instance": inst.beparams, "be_actual": config.filled_beparams(inst),
                "os_instance": inst.osparams, "os_actual": config.filled_osparams(inst),
                "network_port": None, "tags": inst.tags,
                "disks": [M.to_builtins(d) for d in inst.disks],
                "nics": [M.to_builtins(n) for n in inst.nics],
                "ctime": inst.ctime, "mtime": inst.mtime, "serial_no": inst.serial_no,
            }
        return result


class _NodeAction(LogicalUnit):
    """An instance operation carried out by the node daemon of its primary node."""

    new_admin_state: str | None = None

    def declare_locks(self, config: M.ConfigData) -> list[LockRequest]:
        return _instance_locks(config, self.op.instance_name,  # type: ignore[attr-defined]
                               nodes=True)

    def check(self, config: M.ConfigData) -> None:
        self.inst = lookup(config.find_instance, self.op.instance_name)  # type: ignore
        self.node = config.nodes.get(self.inst.primary_node)
        if self.node is None:
            raise OpPrereqError(f"instance {self.inst.name}: its primary node is unknown")
        if self.inst.admin_state == "offline" and self.new_admin_state == "up":
            raise OpPrereqError(f"instance {self.inst.name} is offline; mark it online first",
                                "wrong_state")
        if self.node.offline:
            raise OpPrereqError(f"node {self.node.name} is offline", "wrong_state")

    def act(self) -> None:
        raise NotImplementedError

    def execute(self) -> Any:
        self.act()  # the node first: the config changes only when the node did it
        if self.new_admin_state and not getattr(self.op, "no_remember", False):
            with self.env.store.update() as config:
                inst = config.instances[self.inst.uuid]
                inst.admin_state = self.new_admin_state  # type: ignore[assignment]
                inst.admin_state_source = "admin"
                inst.touch()
        return None


class InstanceStartup(_NodeAction):
    OP = O.OpInstanceStartup
    new_admin_state = "up"

    def act(self) -> None:
        self.env.rpc.instance_start(self.node, self.inst, self.op.reason)


class InstanceShutdown(_NodeAction):
    OP = O.OpInstanceShutdown
    new_admin_state = "down"

    def act(self) -> None:
        self.env.rpc.instance_shutdown(self.node, self.inst, self.op.reason,
                                       self.op.timeout)  # type: ignore[attr-defined]


class InstanceReboot(_NodeAction):
    OP = O.OpInstanceReboot

    def act(self) -> None:
        self.env.rpc.instance_reboot(self.node, self.inst,
                                     self.op.reboot_type, self.op.reason)  # type: ignore


class InstanceMigrate(_NodeAction):
    OP = O.OpInstanceMigrate

    def act(self) -> None:
        self.env.rpc.ping(self.node)


class InstanceFailover(_NodeAction):
    OP = O.OpInstanceFailover

    def act(self) -> None:
        self.env.rpc.ping(self.node)


class InstanceRemove(_NodeAction):
    OP = O.OpInstanceRemove

    def act(self) -> None:
        self.env.rpc.instance_shutdown(self.node, self.inst, self.op.reason,
                                       self.op.shutdown_timeout)  # type: ignore[attr-defined]


LUS = [InstanceRename, InstanceSetParams, InstanceQueryData, InstanceStartup, InstanceShutdown,
       InstanceReboot, InstanceMigrate, InstanceFailover, InstanceRemove]
