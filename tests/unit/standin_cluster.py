"""A cluster of stand-in nodes for masterd's disk operations where DRBD and LV activation
cannot run (this machine): each node is noded's own disk handlers (`herder.noded.rpc`, arguments
decoded into the contract's calls as at noded's door) on a `tests.noded.bdev.world` node — the
LVM and DRBD answers shaped like the real captures in ../shared/conformance — so masterd's LUs
run unchanged and every node RPC and every node command is recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from herder.core import model
from herder.core.errors import RpcError
from herder.core.noderpc import RpcTransport
from herder.core.store import FileStore
from herder.masterd import locking
from herder.masterd.lu.base import MasterEnv
from herder.noded import rpc as noded_rpc
from herder.noded.bdev.base import BlockDevError, Host
from herder.noded.node import Node, NodeSettings
from herder.noded.node_disks import DiskFailure
from tests.noded.bdev import world
from tests.noded.bdev.harness import WorldHost
from tests.rpcfakes import nothing_answer


class StandInNode:
    """A node daemon whose block devices are a stand-in world."""

    def __init__(self, name: str, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.world = world.World(world.new_state())
        self.node = Node(NodeSettings(node_name=name, state_dir=directory / "state",
                                      run_dir=directory / "run", hmac_key=b"k" * 40,
                                      libvirt_uri="test:///default",
                                      file_root=directory / "root"),
                         bdev=WorldHost(self.world))
        self.domains: dict[str, str] = {}  # instance_list's answer
        self.renames: list[tuple[str, str]] = []  # instance_run_rename: (old, new) names

    @property
    def bdev(self) -> Host:
        return self.node.disks.host

    @bdev.setter
    def bdev(self, host: Host) -> None:
        self.node.disks.host = host

    def lvs(self) -> set[str]:
        return set(self.world.state["lvs"])

    def minors(self) -> dict[str, Any]:
        return dict(self.world.state["minors"])


class StandInRpc(RpcTransport):
    """`env.rpc`: calls the node's handler in-process; `fail` makes (node, method) fail
    (every call, or the n-th with `fail_at`)."""

    def __init__(self, nodes: dict[str, StandInNode]) -> None:
        self.nodes = nodes
        self.calls: list[tuple[str, str, Any]] = []
        self.fail: tuple[str, str, int] | None = None  # (node, method, n-th call from 1)

    def send(self, node: model.Node, method: str, args: dict[str, Any],
             timeout: float | None = None) -> object:
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
            return {**msgspec.to_builtins(nothing_answer(method)), "node": node.name}
        call = noded_rpc.decode(method, dict(args))
        if method == "instance_run_rename":  # the OS script is not the disks' business
            target.renames.append((args["old_name"], args["instance"]["name"]))
            return {"os": args["instance"]["os"], "log": ""}
        try:
            return msgspec.to_builtins(noded_rpc.run(target.node, call))
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
