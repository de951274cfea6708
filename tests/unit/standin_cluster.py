"""A cluster of stand-in nodes for masterd's disk operations where DRBD and LV activation
cannot run (this machine): each node is noded's own disk RPCs (`noded.disk_rpcs.DiskRpcs`,
arguments checked by `noded.rpcargs` as at noded's door) on a `tests.noded.bdev.world` node —
the LVM and DRBD answers shaped like the real captures in ../shared/conformance — so masterd's
LUs run unchanged and every node RPC and every node command is recorded."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from herder.core import model
from herder.core.errors import RpcError
from herder.core.store import FileStore
from herder.masterd import locking
from herder.masterd.lu.base import MasterEnv
from herder.noded import rpcargs
from herder.noded.bdev.base import BlockDevError
from herder.noded.disk_rpcs import DiskFailure, DiskRpcs
from tests.noded.bdev import world
from tests.noded.bdev.harness import WorldHost


class StandInNode(DiskRpcs):
    def __init__(self, name: str, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.settings = SimpleNamespace(state_dir=state_dir)
        self.world = world.World(world.new_state())
        self.bdev = WorldHost(self.world)
        self._map_lock = threading.Lock()
        self.domains: dict[str, str] = {}  # instance_list's answer
        self.renames: list[tuple[str, str]] = []

    def rpc_instance_run_rename(self, args: dict[str, Any]) -> dict[str, Any]:
        """The OS script is not the disks' business: recorded only."""
        self.renames.append((args["old_name"], args["instance"]["name"]))
        return {}

    def lvs(self) -> set[str]:
        return set(self.world.state["lvs"])

    def minors(self) -> dict[str, Any]:
        return dict(self.world.state["minors"])


class StandInRpc:
    """`env.rpc`: calls the node's RPC method in-process; `fail` makes (node, method) fail
    (every call, or the n-th with `fail_at`)."""

    def __init__(self, nodes: dict[str, StandInNode]) -> None:
        self.nodes = nodes
        self.calls: list[tuple[str, str, Any]] = []
        self.fail: tuple[str, str, int] | None = None  # (node, method, n-th call from 1)

    def call(self, node: model.Node, method: str, args: dict[str, Any] | None = None,
             timeout: float | None = None) -> Any:
        args = dict(args or {})
        short = node.name.split(".")[0]
        disk = args.get("disk")
        what: Any = (disk["dev_type"], tuple(disk["logical_id"][:2])) if disk else \
            args.get("file_storage_dir")
        self.calls.append((short, method, what))
        if self.fail is not None and self.fail[:2] == (short, method) and \
                sum(1 for n, m, _ in self.calls if (n, m) == self.fail[:2]) == self.fail[2]:
            raise RpcError(f"node {node.name}: {method} failed: injected")
        target = self.nodes[short]
        if method == "instance_list":
            return dict(target.domains)
        if method == "ping":
            return "pong"
        rpcargs.check(method, args)
        try:
            return getattr(target, f"rpc_{method}")(args)
        except (DiskFailure, BlockDevError) as err:
            raise RpcError(f"node {node.name}: {method}: {err}") from None

    def methods(self, *, skip: tuple[str, ...] = ("instance_list",)) -> list[tuple[str, str]]:
        return [(n, m) for n, m, _ in self.calls if m not in skip]


def stand_in_env(tmp_path: Path, config: model.ConfigData) -> tuple[MasterEnv, StandInRpc]:
    store = FileStore(tmp_path / "config.json")
    store.create(config)
    nodes = {n.name.split(".")[0]: StandInNode(n.name, tmp_path / n.name)
             for n in config.nodes.values()}
    rpc = StandInRpc(nodes)
    env = MasterEnv(store=store, locks=locking.LockManager(config.nodes, [],
                                                           config.instances), rpc=rpc)
    return env, rpc
