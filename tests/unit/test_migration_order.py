"""The node RPCs of a live migration, a failed one and a failover, in Ganeti's order
(cmdlib/instance_migration.py `_ExecMigration`, `_AbortMigration`, `_ExecFailover`), against a
recording node RPC; the disk RPCs of `masterd.lu.disks` are left out of the comparison (the
disks work tests theirs)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from herder.core.errors import OpExecError
from herder.core.store import FileStore
from herder.masterd.lu import migration
from tests.conftest import build_config

VM_RPCS = {"instance_migratable", "migration_info", "accept_instance", "migrate_instance",
           "instance_get_migration_status", "finalize_migration_src",
           "finalize_migration_dst", "instance_list", "instance_shutdown",
           "instance_stop_stray", "instance_start"}


class Recorder:
    def __init__(self, statuses: list[dict[str, Any]], running_on: str) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.statuses = statuses
        self.running_on = running_on

    def call(self, node: Any, method: str, args: dict[str, Any] | None = None,
             timeout: float | None = None) -> Any:
        self.calls.append((node.name, method, dict(args or {})))
        if method == "instance_migratable":
            return {"running": True, "method": "libvirt", "reason": ""}
        if method == "instance_get_migration_status":
            return self.statuses.pop(0)
        if method == "instance_list":
            return {"drbd0.example.com": "running"} if node.name == self.running_on else {}
        if method == "migration_info":
            return {"xml": "<domain/>"}
        if method == "drbd_wait_sync":
            return [True, 100.0]
        if method.startswith("blockdev_") or method.startswith("drbd_"):
            return [] if method != "blockdev_assemble" else ["/dev/drbd0"]
        return {}

    def vm_calls(self) -> list[tuple[str, str]]:
        return [(node.split(".")[0], method) for node, method, _ in self.calls
                if method in VM_RPCS]


def _env(tmp_path: Path, rpc: Recorder) -> tuple[Any, Any, Any, Any]:
    config = build_config()
    store = FileStore(tmp_path / "config.json")
    store.create(config)
    inst = config.find_instance("drbd0.example.com")
    target = config.nodes[inst.secondary_nodes[0]]
    return SimpleNamespace(rpc=rpc, store=store), config, inst, target


def test_live_migration_calls_the_nodes_in_ganetis_order(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(migration, "POLL_INTERVAL", 0)
    rpc = Recorder([{"status": "active", "transferred_ram": 1, "total_ram": 2},
                    {"status": "completed", "stats": {"total_ms": 3000, "downtime_ms": 30}}],
                   "node2.example.com")
    env, config, inst, target = _env(tmp_path, rpc)
    said: list[str] = []
    migration.migrate_or_failover(env, config, inst, target, live=True, allow_failover=False,
                                  reason=[], say=said.append)
    assert rpc.vm_calls() == [
        ("node1", "instance_migratable"), ("node1", "migration_info"),
        ("node2", "accept_instance"), ("node1", "migrate_instance"),
        ("node1", "instance_get_migration_status"), ("node1", "instance_get_migration_status"),
        ("node1", "finalize_migration_src"), ("node2", "finalize_migration_dst")]
    migrate = next(args for _, method, args in rpc.calls if method == "migrate_instance")
    assert migrate["target"] == "node2.example.com" and migrate["live"] is True
    assert migrate["move"] == {"source": "node1.example.com", "target": "node2.example.com"}
    moved = env.store.load().find_instance(inst.name)
    assert env.store.load().node_name(moved.primary_node) == "node2.example.com"
    assert any("downtime 30 ms" in line for line in said)


def test_a_failed_migration_aborts_on_both_and_stays(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(migration, "POLL_INTERVAL", 0)
    rpc = Recorder([{"status": "failed", "error": "target libvirtd went away"}],
                   "node1.example.com")
    env, config, inst, target = _env(tmp_path, rpc)
    with pytest.raises(OpExecError, match="Could not migrate instance drbd0.example.com: "
                       "target libvirtd went away; it stays on node1.example.com"):
        migration.migrate_or_failover(env, config, inst, target, live=True,
                                      allow_failover=False, reason=[], say=lambda line: None)
    assert rpc.vm_calls()[-4:] == [("node2", "finalize_migration_dst"),
                                   ("node1", "finalize_migration_src"),
                                   ("node1", "instance_list"), ("node2", "instance_list")]
    aborts = [args for _, method, args in rpc.calls if method.startswith("finalize")]
    assert all(args["success"] is False for args in aborts)
    assert env.store.load().find_instance(inst.name).primary_node == inst.primary_node


def test_a_stopped_instance_is_refused_or_failed_over(tmp_path: Path) -> None:
    rpc = Recorder([], "")
    env, config, inst, target = _env(tmp_path, rpc)
    rpc.call = _not_running(rpc.call)  # type: ignore[method-assign]  # the node says so
    with pytest.raises(OpExecError, match="Can't migrate, please use failover"):
        migration.migrate_or_failover(env, config, inst, target, live=True,
                                      allow_failover=False, reason=[], say=lambda line: None)
    said: list[str] = []
    migration.migrate_or_failover(env, config, inst, target, live=True, allow_failover=True,
                                  reason=[], say=said.append)
    assert rpc.vm_calls()[-4:] == [("node1", "instance_migratable"),
                                   ("node1", "instance_shutdown"),
                                   ("node1", "instance_stop_stray"), ("node2", "instance_start")]
    assert any("failing it over instead" in line for line in said)


def _not_running(call: Any) -> Any:
    def wrapped(node: Any, method: str, args: dict[str, Any] | None = None,
                timeout: float | None = None) -> Any:
        if method == "instance_migratable":
            call(node, method, args, timeout)
            return {"running": False, "method": "libvirt",
                    "reason": "instance drbd0.example.com is not running on node1"}
        return call(node, method, args, timeout)

    return wrapped
