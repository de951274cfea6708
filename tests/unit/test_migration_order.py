"""The node RPCs of a live migration, a failed one and a failover, in Ganeti's order
(cmdlib/instance_migration.py `_ExecMigration`, `_AbortMigration`, `_ExecFailover`), against a
recording node RPC; the disk RPCs of `masterd.lu.disks` are left out of the comparison (the
disks work tests theirs)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from herder.core import model
from herder.core.errors import HerderError, OpExecError
from herder.core.noderpc import RpcTransport
from herder.core.store import FileStore
from herder.masterd.lu import migration
from tests.conftest import build_config
from tests.rpcfakes import nothing_answer

VM_RPCS = {"instance_migratable", "migration_info", "accept_instance", "migrate_instance",
           "instance_get_migration_status", "finalize_migration_src",
           "finalize_migration_dst", "instance_list", "instance_shutdown",
           "instance_stop_stray", "instance_start"}


class Recorder(RpcTransport):
    def __init__(self, statuses: list[dict[str, Any]], running_on: str) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.statuses = statuses
        self.running_on = running_on
        self.free: dict[str, int] = {}  # node short name -> free MiB (default 4096)
        self.current = 0  # the guest's memory now (0: not reported)

    def send(self, node: Any, method: str, args: dict[str, Any],
             timeout: float | None = None) -> object:
        self.calls.append((node.name, method, dict(args)))
        if method == "instance_migratable":
            return {"running": True, "state": "running", "method": "libvirt", "reason": ""}
        if method == "blockdev_find":  # the disks' consistency check: found, in sync
            return ["/dev/drbd0", 147, 0, None, None, False, 1]
        if method == "instance_get_migration_status":
            return self.statuses.pop(0)
        if method == "instance_list":
            return {"drbd0.example.com": "running"} if node.name == self.running_on else {}
        if method == "migration_info":
            return {"xml": "<domain/>", "state": "running"}
        if method == "node_info":
            return node_info(self.free.get(node.name.split(".")[0], 4096),
                             {"drbd0.example.com": self.current} if self.current else {})
        if method == "drbd_wait_sync":
            return [True, 100.0]
        if method == "blockdev_assemble":
            return ["/dev/drbd0", None]
        return nothing_answer(method)

    def vm_calls(self) -> list[tuple[str, str]]:
        return [(node.split(".")[0], method) for node, method, _ in self.calls
                if method in VM_RPCS]


def node_info(free: int, instances: dict[str, int]) -> dict[str, Any]:
    return {"bootid": "b", "memory_total": 8192, "memory_free": free, "memory_dom0": 512,
            "cpu_total": 2, "cpu_dom0": 2, "cpu_nodes": 1, "cpu_sockets": 1,
            "instances": {name: {"state": "running", "memory": memory, "vcpus": 2}
                          for name, memory in instances.items()}}


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


def test_status_calls_wait_on_the_node_and_one_answering_at_once_is_paced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each status call asks the source to answer once the migration ended (`wait`); a node
    that answers at once anyway (one from before `wait`) is asked once per POLL_INTERVAL,
    not in a loop."""
    clock = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    monkeypatch.setattr(migration, "time", SimpleNamespace(monotonic=lambda: clock[0],
                                                           sleep=sleep))
    active = {"status": "active", "transferred_ram": 1, "total_ram": 2}
    rpc = Recorder([active, dict(active), {"status": "completed"}], "node2.example.com")
    env, config, inst, target = _env(tmp_path, rpc)
    migration.migrate_or_failover(env, config, inst, target, live=True, allow_failover=False,
                                  reason=[], say=lambda line: None)
    waits = [args.get("wait") for _, method, args in rpc.calls
             if method == "instance_get_migration_status"]
    assert waits == [migration.STATUS_WAIT] * 3
    assert [s for s in slept if s] == [migration.POLL_INTERVAL] * 2


def test_the_targets_figures_of_the_move_are_said_when_the_source_has_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The source tells the end before reading libvirt's statistics (they are the target's
    after the guest left): finalize_migration_dst's answer carries them."""
    monkeypatch.setattr(migration, "POLL_INTERVAL", 0)

    class TargetFigures(Recorder):
        def send(self, node: Any, method: str, args: dict[str, Any],
                 timeout: float | None = None) -> object:
            answer = super().send(node, method, args, timeout)
            if method == "finalize_migration_dst":
                return {"state": "running", "stats": {"total_ms": 2900, "downtime_ms": 41}}
            return answer

    rpc = TargetFigures([{"status": "completed", "stats": {"total_ms": 3100}}],
                        "node2.example.com")
    env, config, inst, target = _env(tmp_path, rpc)
    said: list[str] = []
    migration.migrate_or_failover(env, config, inst, target, live=True, allow_failover=False,
                                  reason=[], say=said.append)
    assert "* memory transfer complete (2900 ms, downtime 41 ms)" in said
    # a target that kept no figures: the source's own time, and no made-up downtime
    rpc = Recorder([{"status": "completed", "stats": {"total_ms": 3100}}], "node1.example.com")
    env, config, inst, target = _env(tmp_path / "again", rpc)
    said.clear()
    migration.migrate_or_failover(env, config, inst, target, live=True, allow_failover=False,
                                  reason=[], say=said.append)
    assert "* memory transfer complete (3100 ms)" in said


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
    rpc.send = _not_running(rpc.send)  # type: ignore[method-assign]  # the node says so
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


def test_a_failover_from_an_offline_primary_sends_it_nothing(tmp_path: Path) -> None:
    """A dead node (offline, fenced) is not asked to shut its guest down: a call there would
    wait out the connection or, if it half answers, the whole shutdown timeout before the
    instance starts elsewhere (Ganeti's RPC layer answers for an offline node at once)."""
    rpc = Recorder([], "")
    config = build_config()
    inst = config.find_instance("drbd0.example.com")
    dead = config.nodes[inst.primary_node]
    dead.offline, dead.master_candidate = True, False
    store = FileStore(tmp_path / "config.json")
    store.create(config)
    env = SimpleNamespace(rpc=rpc, store=store)
    source = config.nodes[inst.primary_node]
    target = config.nodes[inst.secondary_nodes[0]]
    said: list[str] = []
    migration.failover(env, config, inst, target, reason=[], say=said.append,
                       ignore_consistency=True)
    assert [c for c in rpc.calls if c[0] == source.name] == []
    assert rpc.vm_calls()[-1] == (target.name.split(".")[0], "instance_start")
    assert any(f"Could not shutdown instance {inst.name} on node {source.name}, proceeding"
               in line and "marked offline" in line for line in said)


def _not_running(call: Any) -> Any:
    def wrapped(node: Any, method: str, args: dict[str, Any],
                timeout: float | None = None) -> object:
        if method == "instance_migratable":
            call(node, method, args, timeout)
            return {"running": False, "state": "shutoff", "method": "libvirt",
                    "reason": "instance drbd0.example.com is not running on node1"}
        return call(node, method, args, timeout)

    return wrapped


# --- cleanup (OP_INSTANCE_MIGRATE cleanup=True): Ganeti's _ExecCleanup, every node asked -------

class Places(Recorder):
    """Nodes answer instance_list from `places` (node short name -> state); a node in
    `silent` fails the call."""

    def __init__(self, name: str, places: dict[str, str], silent: tuple[str, ...] = ()) -> None:
        super().__init__([], "")
        self.name, self.places, self.silent = name, places, silent

    def send(self, node: Any, method: str, args: dict[str, Any],
             timeout: float | None = None) -> object:
        short = node.name.split(".")[0]
        if method == "instance_list":
            self.calls.append((node.name, method, dict(args)))
            if short in self.silent:
                raise HerderError(f"{node.name}: connection refused")
            return {self.name: self.places[short]} if short in self.places else {}
        return super().send(node, method, args, timeout)


def _shared_env(tmp_path: Path, rpc: Recorder) -> tuple[Any, Any, Any]:
    config = build_config()
    node1 = config.find_node("node1.example.com")
    disk = model.Disk(uuid=model.new_uuid(), dev_type="sharedfile", size=1024,
                      iv_name="disk/0", logical_id=model.FileId(
                          driver="loop", path="/srv/herder/shared-file-storage/s1/disk0"))
    inst = model.Instance(uuid=model.new_uuid(), name="s1.example.com",
                          primary_node=node1.uuid, os="debootstrap", hypervisor="kvm",
                          admin_state="up", disks=[disk],
                          nics=[model.NIC(uuid=model.new_uuid(), mac="aa:00:00:02:00:01")],
                          ctime=1.0, mtime=1.0)
    config.instances[inst.uuid] = inst
    store = FileStore(tmp_path / "config.json")
    store.create(config)
    return SimpleNamespace(rpc=rpc, store=store), config, inst


def test_cleanup_finds_the_guest_on_a_node_the_config_does_not_name(tmp_path: Path) -> None:
    rpc = Places("s1.example.com", {"node3": "running"})
    env, config, inst = _shared_env(tmp_path, rpc)
    said: list[str] = []
    migration.cleanup(env, config, inst, None, reason=[], say=said.append)
    # every online node was asked, the node found recorded it, the config follows it
    assert sorted(node for node, method in rpc.vm_calls() if method == "instance_list") == [
        "node1", "node2", "node3"]
    assert ("node3", "finalize_migration_dst") in rpc.vm_calls()
    fresh = env.store.load()
    assert fresh.node_name(fresh.instances[inst.uuid].primary_node) == "node3.example.com"
    assert any("unexpected node (node3.example.com)" in line for line in said)


def test_cleanup_refuses_two_copies_or_a_silent_node(tmp_path: Path) -> None:
    rpc = Places("s1.example.com", {"node1": "running", "node3": "running"})
    env, config, inst = _shared_env(tmp_path, rpc)
    with pytest.raises(OpExecError, match=r"runs on node1.example.com, node3.example.com, not "
                       r"only on node1.example.com; you will have to ensure manually"):
        migration.cleanup(env, config, inst, None, reason=[], say=lambda line: None)
    rpc = Places("s1.example.com", {"node1": "running"}, silent=("node2",))
    env, config, inst = _shared_env(tmp_path / "b", rpc)
    with pytest.raises(OpExecError, match="Can't contact node node2.example.com"):
        migration.cleanup(env, config, inst, None, reason=[], say=lambda line: None)
    assert env.store.load().instances[inst.uuid].primary_node == inst.primary_node


def test_cleanup_on_source_and_target_aborts_and_keeps_the_source(tmp_path: Path) -> None:
    rpc = Places("s1.example.com", {"node1": "running", "node2": "running"})
    env, config, inst = _shared_env(tmp_path, rpc)
    target = config.find_node("node2.example.com")
    original = rpc.send

    def aborting(node: Any, method: str, args: dict[str, Any],
                 timeout: float | None = None) -> object:
        if method == "finalize_migration_dst" and args["success"] is False:
            rpc.places.pop("node2")  # the target drops its copy
        return original(node, method, args, timeout)

    rpc.send = aborting  # type: ignore[method-assign]  # the target's abort removes its copy
    said: list[str] = []
    migration.cleanup(env, config, inst, target, reason=[], say=said.append)
    assert ("node2", "finalize_migration_dst") in rpc.vm_calls()
    assert env.store.load().instances[inst.uuid].primary_node == inst.primary_node
    assert any("confirmed to be running on its primary node" in line for line in said)


def test_a_target_with_less_free_memory_gets_a_ballooned_guest(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    """Ganeti's _ExecMigration: the guest (1024 MiB now, minmem 512) is ballooned down to the
    target's free 700 MiB before the migration; without allow_runtime_changes it is refused,
    and below minmem always."""
    monkeypatch.setattr(migration, "POLL_INTERVAL", 0)
    rpc = Recorder([{"status": "completed"}], "node2.example.com")
    rpc.free, rpc.current = {"node2": 700}, 1024
    env, config, inst, target = _env(tmp_path, rpc)
    said: list[str] = []
    migration.migrate_or_failover(env, config, inst, target, live=True, allow_failover=False,
                                  reason=[], say=said.append)
    balloon = [(node, args) for node, method, args in rpc.calls
               if method == "instance_balloon_memory"]
    assert balloon == [("node1.example.com", {**balloon[0][1], "memory": 700})]
    assert balloon[0][1]["name"] == inst.name and "* setting instance memory to 700" in said
    methods = [method for _, method, _ in rpc.calls]
    # migration_info is asked beside the memory check, and again after the balloon (Ganeti
    # asks it after the balloon)
    last_info = len(methods) - 1 - methods[::-1].index("migration_info")
    assert methods.index("instance_balloon_memory") < last_info < methods.index(
        "accept_instance")

    rpc = Recorder([], "node1.example.com")
    rpc.free, rpc.current = {"node2": 700}, 1024
    env, config, inst, target = _env(tmp_path / "b", rpc)
    with pytest.raises(OpExecError, match="Memory ballooning not allowed and not enough free "
                       "memory to fit instance drbd0.example.com on target node "
                       "node2.example.com"):
        migration.migrate_or_failover(env, config, inst, target, live=True,
                                      allow_failover=False, allow_runtime_changes=False,
                                      reason=[], say=lambda line: None)
    rpc.free = {"node2": 300}
    with pytest.raises(OpExecError, match="Not enough memory on node node2.example.com for "
                       "migrating instance drbd0.example.com: needed 512 MiB, available 300"):
        migration.migrate_or_failover(env, config, inst, target, live=True,
                                      allow_failover=False, reason=[], say=lambda line: None)
    assert "migrate_instance" not in [method for _, method, _ in rpc.calls]


def test_migration_info_is_asked_beside_the_memory_checks_node_info(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The three reads before the move (both nodes' node_info, the source's migration_info)
    are one round trip: each node_info answer waits here until migration_info has been asked,
    which only happens in time when they are asked at once. A refusal of the memory check is
    still said before a migration_info error (Ganeti's CheckPrereq comes first), and no disk
    is assembled after either."""
    import threading

    monkeypatch.setattr(migration, "POLL_INTERVAL", 0)

    class Overlapping(Recorder):
        def __init__(self, *args: Any, fail_info: bool = False) -> None:
            super().__init__(*args)
            self.info_asked = threading.Event()
            self.overlapped: list[bool] = []
            self.fail_info = fail_info

        def send(self, node: Any, method: str, args: dict[str, Any],
                 timeout: float | None = None) -> object:
            if method == "node_info":
                self.overlapped.append(self.info_asked.wait(3))
            if method == "migration_info":
                self.info_asked.set()
                if self.fail_info:
                    self.calls.append((node.name, method, dict(args)))
                    raise HerderError("no domain here")
            return super().send(node, method, args, timeout)

    rpc = Overlapping([{"status": "completed"}], "node2.example.com")
    env, config, inst, target = _env(tmp_path, rpc)
    migration.migrate_or_failover(env, config, inst, target, live=True, allow_failover=False,
                                  reason=[], say=lambda line: None)
    assert rpc.overlapped == [True, True]

    rpc = Overlapping([], "node1.example.com", fail_info=True)
    rpc.free = {"node2": 300}
    env, config, inst, target = _env(tmp_path / "b", rpc)
    with pytest.raises(OpExecError, match="Not enough memory on node node2.example.com"):
        migration.migrate_or_failover(env, config, inst, target, live=True,
                                      allow_failover=False, reason=[], say=lambda line: None)
    rpc.free = {}
    with pytest.raises(HerderError, match="no domain here"):
        migration.migrate_or_failover(env, config, inst, target, live=True,
                                      allow_failover=False, reason=[], say=lambda line: None)
    methods = [method for _, method, _ in rpc.calls]
    assert "blockdev_assemble" not in methods and "accept_instance" not in methods
