"""Disk status in `cluster verify` (Ganeti's LUClusterVerifyGroup._VerifyInstance messages),
`cluster verify-disks` (LUGroupVerifyDisks) and the VG-repair safety check ("every other copy
is good" means in sync), on stand-in nodes whose /proc/drbd and `lvs` answers are shaped like
the real captures (tests/noded/bdev/world.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from herder.core import nodeverify, verify
from herder.core.diskobjects import BlockDevStatus
from herder.core.errors import OpPrereqError
from herder.masterd.jobs import opcodes
from herder.masterd.lu.cluster import ClusterVerifyGroup
from herder.masterd.lu.instance import InstanceSetParams
from herder.masterd.lu.storage import RepairNodeStorage
from herder.masterd.lu.verify_disks import ClusterVerifyDisks
from herder.masterd.vg_repair import copy_problem
from tests.conftest import build_config
from tests.noded.bdev import world
from tests.unit.standin_cluster import StandInRpc, stand_in_env

NAME = "drbd0.example.com"


def run(env: Any, op: opcodes.OpCode, lu_class: Any) -> Any:
    lu = lu_class(op, env, lambda message: None)
    lu.check(env.store.load())
    return lu.execute()


@pytest.fixture
def mirrored(tmp_path: Path) -> tuple[Any, StandInRpc, tuple[str, str]]:
    """drbd0 (node1 -> node2) running with one DRBD disk that both stand-ins hold."""
    config = build_config(nodes=3, drbd_instances=1, plain_instances=0)
    config.find_instance(NAME).disks_active = True
    env, rpc = stand_in_env(tmp_path, config)
    run(env, opcodes.OpInstanceSetParams(instance_name=NAME, disks=[["add", {"size": "1G"}]]),
        InstanceSetParams)
    with env.store.update() as fresh:
        inst = fresh.find_instance(NAME)
        inst.disks.pop(0)  # the fixture's disk, which no stand-in holds
        inst.disks[0].iv_name = "disk/0"
    rpc.nodes["node1"].domains = {NAME: "running"}
    data, meta = (c.logical_id.lv for c in  # type: ignore[union-attr]
                  env.store.load().find_instance(NAME).disks[0].children)
    return env, rpc, (data, meta)


def findings(env: Any) -> list[tuple[str, str, str]]:
    """The disk findings (the stand-ins are no hosts: their node checks are not judged here)."""
    found = run(env, opcodes.OpClusterVerifyGroup(group_name="default"), ClusterVerifyGroup)
    return [(f["severity"], f["object"], f["message"]) for f in found
            if f["code"] not in nodeverify.CODES]


def resync(rpc: StandInRpc, node: str) -> None:
    """The node's half is the target of a resync (/proc/drbd as proc_drbd83_sync.txt)."""
    minor = next(iter(rpc.nodes[node].world.state["minors"].values()))
    minor.update(cs="SyncTarget", disks="Inconsistent/UpToDate", sync=True)


def test_a_healthy_mirror_verifies_clean_and_a_resync_is_reported(mirrored) -> None:
    env, rpc, _ = mirrored
    assert findings(env) == []
    resync(rpc, "node2")
    assert ("warning", f"instance {NAME}", "disk/0 on node2.example.com is degraded; local "
            "disk state is 'syncing'") in findings(env)


def test_a_faulty_half_and_a_missing_lv_are_errors(mirrored) -> None:
    env, rpc, (_, meta) = mirrored
    minor = next(iter(rpc.nodes["node2"].world.state["minors"].values()))
    minor.update(cs="Connected", disks="Diskless/UpToDate")
    del rpc.nodes["node2"].world.state["lvs"][f"xenvg/{meta}"]
    found = findings(env)
    assert ("error", f"instance {NAME}",
            f"volume xenvg/{meta} missing on node node2.example.com") in found
    assert any(sev == "error" and msg.startswith("disk/0 on node2.example.com is degraded; "
                                                  "local disk state is '")
               for sev, _, msg in found)
    assert [g[2] for g in run(env, opcodes.OpClusterVerifyDisks(), ClusterVerifyDisks)] == [
        {NAME: [["node2.example.com", f"xenvg/{meta}"]]}]


def test_verify_disks_names_instances_whose_drbd_needs_activation(mirrored) -> None:
    env, rpc, _ = mirrored
    assert run(env, opcodes.OpClusterVerifyDisks(), ClusterVerifyDisks) == [[{}, [], {}, {}]]
    minor = next(iter(rpc.nodes["node2"].world.state["minors"].values()))
    minor.update(cs="StandAlone", roles="Secondary/Unknown", disks="UpToDate/DUnknown")
    assert run(env, opcodes.OpClusterVerifyDisks(), ClusterVerifyDisks) == [
        [{}, [NAME], {}, {}]]
    rpc.calls.clear()
    rpc.fail = ("node2", "lv_list", 1)
    bad_nodes, _, _, _ = run(env, opcodes.OpClusterVerifyDisks(), ClusterVerifyDisks)[0]
    assert list(bad_nodes) == ["node2.example.com"] and "injected" in bad_nodes[
        "node2.example.com"]


def test_a_volume_no_instance_holds_is_unknown_to_verify_and_verify_disks(mirrored) -> None:
    """Issue 35 item 12: the complete copy a killed `instance move` left on its target was
    mentioned by neither `cluster verify` nor `verify-disks`. As Ganeti's
    _VerifyOrphanVolumes: every node lists the cluster's volume group, and an LV no instance
    should have there is "volume V is unknown" (unless the cluster's `reserved_lvs` names
    it); verify-disks gives them per node as a fourth element (compat B24)."""
    env, rpc, (data, _) = mirrored
    world.add_lv(rpc.nodes["node3"].world.state, "xenvg", "4e1c0d7a.disk0", 1024)
    world.add_lv(rpc.nodes["node3"].world.state, "xenvg", "root", 4096)
    world.add_lv(rpc.nodes["node1"].world.state, "xenvg", "4e1c0d7a.disk0", 1024)
    with env.store.update() as fresh:
        fresh.cluster.reserved_lvs = ["xenvg/root"]
    found = findings(env)
    for node in ("node1", "node3"):
        assert ("error", f"node {node}.example.com",
                "volume xenvg/4e1c0d7a.disk0 is unknown") in found, found
    assert not any("root" in message or data in message for _, _, message in found)
    (result,) = run(env, opcodes.OpClusterVerifyDisks(), ClusterVerifyDisks)
    assert result[3] == {"node1.example.com": ["xenvg/4e1c0d7a.disk0"],
                         "node3.example.com": ["xenvg/4e1c0d7a.disk0"]}


def test_vg_repair_refuses_while_the_other_half_is_not_in_sync(mirrored) -> None:
    env, rpc, _ = mirrored
    repair = opcodes.OpRepairNodeStorage(node_name="node1.example.com", name="xenvg")
    resync(rpc, "node2")
    with pytest.raises(OpPrereqError) as refused:
        run(env, repair, RepairNodeStorage)
    assert str(refused.value) == (
        f"repairing xenvg on node1.example.com is not safe: instance {NAME}: the copy on "
        "node2.example.com is not good: disk/0 is degraded (local disk state 'syncing'); "
        "repairing would lose its data")
    minor = next(iter(rpc.nodes["node2"].world.state["minors"].values()))
    minor.update(cs="Connected", disks="UpToDate/UpToDate", sync=False)
    lu = RepairNodeStorage(repair, env)
    lu.check(env.store.load())  # in sync: allowed


@pytest.mark.parametrize(("report", "problem"), [
    ([[True, ["/dev/drbd1", 147, 1, None, None, False, 1]]], None),
    ([[True, ["/dev/drbd1", 147, 1, 34.9, 5, True, 2]]],
     "disk/0 is degraded (local disk state 'syncing')"),
    ([[True, ["/dev/drbd1", 147, 1, 34.9, 5, True, 1]]], "disk/0 is resyncing (34.9% synced)"),
    ([[False, "Can't find device disk/0"]],
     "disk/0 could not be found (Can't find device disk/0)"),
    ("connection refused", "its disks could not be checked (connection refused)"),
    (None, "no report of its disks"),
])
def test_a_good_copy_is_one_in_sync(report: Any, problem: str | None) -> None:
    """`report` as the node sends it (blockdev_getmirrorstatus_multi), decoded as the
    master's call decodes it."""
    if isinstance(report, list):
        report = msgspec.convert(report, list[tuple[bool, BlockDevStatus | str]])
    assert copy_problem(report) == problem


def test_verify_messages_are_ganetis(mirrored) -> None:
    env, _, _ = mirrored
    config = env.store.load()
    inst = config.find_instance(NAME)
    node1, node2 = (config.find_node(f"node{i}.example.com") for i in (1, 2))
    found = verify.disk_status_findings(
        config, [inst], {node1.uuid: "lvs failed"},
        {node1.uuid: {inst.uuid: [(False, "Can't find device disk/0")]},
         node2.uuid: "connection refused"})
    assert [str(f) for f in found] == [
        "ERROR: node node1.example.com: LVM problem on node: lvs failed",
        "ERROR: node node2.example.com: while getting disk information: connection refused",
        f"ERROR: instance {NAME}: couldn't retrieve status for disk/0 on node1.example.com: "
        "Can't find device disk/0"]


@pytest.mark.parametrize(("minor", "degraded"), [(1, False), (3, True)])
def test_the_secondary_reading_a_real_proc_drbd_capture(mirrored, shared: Path, minor: int,
                                                        degraded: bool) -> None:
    """node2's /proc/drbd is a real DRBD 8.3 capture: its minor 1 is connected and up to
    date, its minor 3 the target of a resync at 34.9 %."""
    capture = shared / "conformance/ganeti/proc_drbd83_sync.txt"
    env, rpc, _ = mirrored
    with env.store.update() as config:
        lid = config.find_instance(NAME).disks[0].logical_id
        lid.minors[1] = minor  # type: ignore[union-attr]
    state = rpc.nodes["node2"].world.state["minors"]
    state[str(minor)] = state.pop(next(iter(state)))
    rpc.nodes["node2"].world.proc_drbd = capture.read_text  # type: ignore[method-assign]
    found = findings(env)
    repair = opcodes.OpRepairNodeStorage(node_name="node1.example.com", name="xenvg")
    if not degraded:
        assert found == []
        RepairNodeStorage(repair, env).check(env.store.load())
        return
    assert ("warning", f"instance {NAME}", "disk/0 on node2.example.com is degraded; local "
            "disk state is 'syncing'") in found
    with pytest.raises(OpPrereqError, match="the copy on node2.example.com is not good: disk/0 "
                       "is degraded .local disk state 'syncing'.; repairing would lose"):
        run(env, repair, RepairNodeStorage)


def test_a_cluster_without_lvm_templates_asks_no_node_about_its_vg(tmp_path: Path) -> None:
    """As Ganeti's NV_LVLIST (only when utils.IsLvmEnabled): a cluster whose enabled templates
    include neither plain nor drbd does not list its VG on the nodes, so an LVM the nodes share
    with others (or do not have) is none of verify's business; with plain enabled the VG is
    listed and an orphan in it reported."""
    config = build_config(nodes=3, drbd_instances=0, plain_instances=0)
    config.cluster.enabled_disk_templates = ["diskless", "file"]
    env, rpc = stand_in_env(tmp_path, config)
    world.add_lv(rpc.nodes["node3"].world.state, "xenvg", "4e1c0d7a.disk0", 1024)
    assert not [f for f in findings(env) if "unknown" in f[2]]
    assert not [call for call in rpc.calls if call[1] == "lv_list"]
    with env.store.update() as fresh:
        fresh.cluster.enabled_disk_templates = ["diskless", "file", "plain"]
    assert ("error", "node node3.example.com", "volume xenvg/4e1c0d7a.disk0 is unknown") \
        in findings(env)
